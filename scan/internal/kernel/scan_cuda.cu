// scan_cuda.cu: the fused selective scan's CUDA kernels (device code only).
//
// nvcc compiles this file into a fat binary (make scan-kernel: SASS for
// sm_80 and sm_90, PTX for compute_90), which the cuda-tagged Go build
// embeds (kernel_cuda.go) and cuda.cc loads and launches through the CUDA
// driver API. No host code, no torch header: the kernels see raw float32
// pointers and the sizes in tfs_cuda_args (kernel.h).
//
// Layout of the work. A thread block is (W lanes) × (P channels), W·P = 128:
// the W lanes of a channel hold its N states, S = ⌈N/W⌉ per lane, in
// registers (state n is lane n mod W, slot n / W); blocks tile the channels
// (grid.x) and the batch (grid.y). Every thread walks the whole sequence,
// one step at a time: the recurrence is sequential in time, parallel over
// batch · channels · state. Sums over the state (y = C·h and, in backward,
// ∂L/∂x and ∂L/∂Δ) are shuffles within a channel's W lanes; sums over
// channels (∂L/∂B, ∂L/∂C) go through shared memory per block and step, then
// one atomicAdd per block and state; sums over the batch (∂L/∂A, ∂L/∂D) are
// one atomicAdd per thread at the end. Padding lanes (n ≥ N) carry zeros
// and write nothing; padding channels (d ≥ D) compute on channel 0's data
// and write nothing, so that every thread of a block reaches every
// __syncthreads and shuffle.
//
// Forward keeps the state at the start of each chunk of K steps (starts,
// B × ⌈L/K⌉ × D × N). Backward walks the chunks newest first: it reloads
// the chunk's start, recomputes the chunk's states into a scratch buffer of
// one chunk (K × B × D × N), then runs the gradient recurrence backwards
// through the chunk, ∂L/∂h carried in registers from each chunk to the one
// before: mamba-ssm's strategy (csrc/selective_scan), with the time loop
// sequential per thread instead of a block-wide parallel scan.
#include "kernel.h"

namespace {

constexpr int kThreads = 128;  // W·P, threads per block

// seg_sum sums v over the W lanes of a channel (W a power of two ≤ 32; the
// lanes of a channel are consecutive within a warp).
__device__ __forceinline__ float seg_sum(float v, int W) {
  for (int off = W / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off, W);
  return v;
}

template <int S>
__device__ __forceinline__ void scan_fwd(const tfs_cuda_args& a) {
  const int W = blockDim.x, lane = threadIdx.x;
  const int64_t d = int64_t(blockIdx.x) * blockDim.y + threadIdx.y, b = blockIdx.y;
  const int64_t L = a.L, D = a.D, N = a.N, K = a.K;
  const bool act = d < D;
  const int64_t dd = act ? d : 0;  // padding channels read channel 0
  float Av[S], h[S];
  bool ok[S];
#pragma unroll
  for (int k = 0; k < S; k++) {
    const int64_t n = lane + int64_t(k) * W;
    ok[k] = n < N;
    Av[k] = ok[k] ? a.A[dd * N + n] : 0.f;
    h[k] = 0.f;
  }
  const float Dv = a.Dv[dd];
  for (int64_t t = 0; t < L; t++) {
    if (a.starts && t % K == 0 && act) {
      float* st = a.starts + ((b * a.nc + t / K) * D + d) * N;
#pragma unroll
      for (int k = 0; k < S; k++)
        if (ok[k]) st[lane + k * W] = h[k];
    }
    const int64_t i = (b * L + t) * D + dd;
    const float dtv = a.dt[i], xv = a.x[i], dx = dtv * xv;
    const float* Bp = a.Bm + (b * L + t) * N;
    const float* Cp = a.Cm + (b * L + t) * N;
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < S; k++) {
      const int64_t n = lane + int64_t(k) * W;
      const float bn = ok[k] ? Bp[n] : 0.f, cn = ok[k] ? Cp[n] : 0.f;
      h[k] = expf(dtv * Av[k]) * h[k] + dx * bn;
      acc += cn * h[k];
    }
    acc = seg_sum(acc, W);
    if (act && lane == 0) a.y[i] = acc + Dv * xv;
  }
  if (act) {
#pragma unroll
    for (int k = 0; k < S; k++)
      if (ok[k]) a.last[(b * D + d) * N + lane + k * W] = h[k];
  }
}

template <int S>
__device__ __forceinline__ void scan_bwd(const tfs_cuda_args& a) {
  __shared__ float sgB[kThreads * S], sgC[kThreads * S];  // (channel in block, state) partial sums of one step
  const int W = blockDim.x, P = blockDim.y, lane = threadIdx.x, cl = threadIdx.y;
  const int tid = cl * W + lane, Wp = W * S;
  const int64_t d = int64_t(blockIdx.x) * P + cl, b = blockIdx.y;
  const int64_t L = a.L, D = a.D, N = a.N, K = a.K;
  const bool act = d < D;
  const int64_t dd = act ? d : 0;
  float Av[S], h[S], h0[S], gh[S], gA[S];
  bool ok[S];
#pragma unroll
  for (int k = 0; k < S; k++) {
    const int64_t n = lane + int64_t(k) * W;
    ok[k] = n < N;
    Av[k] = ok[k] ? a.A[dd * N + n] : 0.f;
    gh[k] = gA[k] = 0.f;
  }
  const float Dv = a.Dv[dd];
  float gD = 0.f;
  // hs: (j, b, d, n) for the K steps of one chunk.
  const int64_t hs_step = a.B * D * N, hs_off = (b * D + dd) * N;
  for (int64_t c = a.nc - 1; c >= 0; c--) {
    const int64_t t0 = c * K, kc = K < L - t0 ? K : L - t0;
    const float* st = a.starts + ((b * a.nc + c) * D + dd) * N;
#pragma unroll
    for (int k = 0; k < S; k++) h0[k] = h[k] = ok[k] ? st[lane + k * W] : 0.f;
    // The chunk's states, recomputed from its start.
    for (int64_t j = 0; j < kc; j++) {
      const int64_t t = t0 + j, i = (b * L + t) * D + dd;
      const float dtv = a.dt[i], dx = dtv * a.x[i];
      const float* Bp = a.Bm + (b * L + t) * N;
#pragma unroll
      for (int k = 0; k < S; k++) {
        const int64_t n = lane + int64_t(k) * W;
        const float bn = ok[k] ? Bp[n] : 0.f;
        h[k] = expf(dtv * Av[k]) * h[k] + dx * bn;
        if (act && ok[k]) a.hs[j * hs_step + hs_off + n] = h[k];
      }
    }
    // Newest step first: ∂L/∂h_t = gh + g_t·C_t, then gh ← ∂L/∂h_t · exp(Δ_t·A).
    for (int64_t j = kc - 1; j >= 0; j--) {
      const int64_t t = t0 + j, i = (b * L + t) * D + dd;
      const float g = a.gy[i], dtv = a.dt[i], xv = a.x[i], dx = dtv * xv;
      const float* Bp = a.Bm + (b * L + t) * N;
      const float* Cp = a.Cm + (b * L + t) * N;
      float gdx = 0.f, gdta = 0.f;
#pragma unroll
      for (int k = 0; k < S; k++) {
        const int64_t n = lane + int64_t(k) * W;
        const float bn = ok[k] ? Bp[n] : 0.f, cn = ok[k] ? Cp[n] : 0.f;
        const float hc = ok[k] ? a.hs[j * hs_step + hs_off + n] : 0.f;
        const float hp = j > 0 ? (ok[k] ? a.hs[(j - 1) * hs_step + hs_off + n] : 0.f) : h0[k];
        const float av = expf(dtv * Av[k]);
        const float ght = gh[k] + g * cn;
        const float gda = ght * hp * av;  // ∂L/∂(Δ·A), through exp
        gA[k] += gda * dtv;
        gdta += gda * Av[k];
        gdx += ght * bn;
        gh[k] = ght * av;
        sgC[cl * Wp + lane + k * W] = act ? g * hc : 0.f;
        sgB[cl * Wp + lane + k * W] = act ? ght * dx : 0.f;
      }
      gdx = seg_sum(gdx, W);
      gdta = seg_sum(gdta, W);
      if (act && lane == 0) {
        a.gdt[i] = gdta + gdx * xv;
        a.gx[i] = gdx * dtv + g * Dv;
        gD += g * xv;
      }
      __syncthreads();
      for (int n = tid; n < N; n += W * P) {
        float sb = 0.f, sc = 0.f;
        for (int r = 0; r < P; r++) {
          sb += sgB[r * Wp + n];
          sc += sgC[r * Wp + n];
        }
        atomicAdd(a.gB + (b * L + t) * N + n, sb);
        atomicAdd(a.gC + (b * L + t) * N + n, sc);
      }
      __syncthreads();
    }
  }
  if (act) {
#pragma unroll
    for (int k = 0; k < S; k++)
      if (ok[k]) atomicAdd(a.gA + d * N + lane + k * W, gA[k]);
    if (lane == 0) atomicAdd(a.gD + d, gD);
  }
}

}  // namespace

// The entry points cuda.cc looks up by name, one per S (states per lane).
#define TFS_KERNELS(S)                                                                                       \
  extern "C" __global__ void __launch_bounds__(kThreads) tfs_scan_fwd_s##S(tfs_cuda_args a) { scan_fwd<S>(a); } \
  extern "C" __global__ void __launch_bounds__(kThreads) tfs_scan_bwd_s##S(tfs_cuda_args a) { scan_bwd<S>(a); }
TFS_KERNELS(1)
TFS_KERNELS(2)
TFS_KERNELS(4)
TFS_KERNELS(8)
