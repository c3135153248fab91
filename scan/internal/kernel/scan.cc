// scan.cc: the fused selective scan, an operator of libtorch's dispatcher.
//
//   h_t = exp(Δ_t·A) ⊙ h_{t−1} + Δ_t·x_t·B_t,   y_t = C_t·h_t + D·x_t
//
// over x, Δ (batch, length, channels), A (channels, state), B, C (batch,
// length, state), D (channels). The forward pass walks time in chunks of K
// steps; inside a chunk the CPU kernel loops over time with the state of
// every (batch, channel) block in registers/cache, the blocks spread over
// libtorch's threads with at::parallel_for. Only the state at the start of
// each chunk is kept for backward (batch·channels·state·⌈L/K⌉ values), and
// backward recomputes each chunk's states from it, newest chunk first, then
// runs the recurrence of the gradients backwards through the chunk: the
// strategy of mamba-ssm's CUDA kernel (csrc/selective_scan/). The kernels
// are the internal ops scan_fwd and scan_bwd, reached through the
// dispatcher: the CPU kernel here, a CUDA kernel in cuda.cc (cuda build
// tag). Cases without a kernel (float64 on CUDA, other devices) take the
// same chunked path written in ATen ops: the same memory, one small op per
// step instead of one fused loop.
//
// Float32 and float64 are computed as they come; float16 and bfloat16
// inputs are computed in float32 (as mamba-ssm does) and y is returned in
// x's dtype. The operator is a composite: its casts are ordinary autograd
// ops, and the scan itself is a custom autograd Function.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernel.h"

// The libtorch version switch, as in the op shim (torch/internal/capi/shim.h).
#include <torch/csrc/api/include/torch/version.h>
#define TFS_TORCH_AT_LEAST(maj, min) \
  (TORCH_VERSION_MAJOR > (maj) || (TORCH_VERSION_MAJOR == (maj) && TORCH_VERSION_MINOR >= (min)))

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Channels per parallel task. Fixed (not derived from the thread count) so
// that gradients summed over blocks come out the same whatever the threads.
constexpr int64_t kBlock = 64;

// Implementation choice (the op's impl argument).
enum Impl : int64_t { kAuto = 0, kNative = 1, kATen = 2 };

struct Shape {
  int64_t B, L, D, N;
};

// ---- the CPU kernel ---------------------------------------------------------------

// Instruction sets: the task loops below are compiled for AVX-512 and
// AVX2+FMA besides the baseline, the CPU picking one at load time (GCC's
// function multiversioning); elsewhere they are compiled once.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define TFS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TFS_CLONES
#endif
#define TFS_INLINE inline __attribute__((always_inline))

// vexp is exp written so that the compiler vectorises it inside the loops:
// range reduction x = n·ln2 + r, |r| ≤ ln2/2, a polynomial for e^r (Cephes'
// minimax for float, within 1 ulp of the true value in float32; the Taylor
// series to r¹³ for double, truncation below 1e-17 relative), and 2ⁿ built
// from the exponent bits in two halves so that results run smoothly into
// overflow and underflow. n is rounded with the 1.5·2^mantissa trick, which
// also leaves n's integer in the low bits: no float-to-int conversion,
// whose trapping semantics would stop the vectoriser.
template <typename T>
TFS_INLINE T vexp(T x);

template <>
TFS_INLINE float vexp<float>(float x) {
  constexpr float magic = 12582912.0f;  // 1.5·2²³
  x = std::min(std::max(x, -104.0f), 89.0f);
  const float m = x * 1.44269504088896341f + magic;
  const float n = m - magic;  // round(x / ln2)
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t ni = __builtin_bit_cast(int32_t, m) - __builtin_bit_cast(int32_t, magic);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  return p * __builtin_bit_cast(float, (n1 + 127) << 23) * __builtin_bit_cast(float, (n2 + 127) << 23);
}

template <>
TFS_INLINE double vexp<double>(double x) {
  constexpr double magic = 6755399441055744.0;  // 1.5·2⁵²
  x = std::min(std::max(x, -746.0), 710.0);
  const double m = x * 1.44269504088896338700e+00 + magic;
  const double n = m - magic;
  double r = x - n * 6.93147180369123816490e-01;
  r = r - n * 1.90821492927058770002e-10;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const int64_t ni = __builtin_bit_cast(int64_t, m) - __builtin_bit_cast(int64_t, magic);
  const int64_t n1 = ni >> 1, n2 = ni - n1;
  return p * __builtin_bit_cast(double, (n1 + 1023) << 52) * __builtin_bit_cast(double, (n2 + 1023) << 52);
}

// The CPU kernel's work is split into tasks, one per (batch, block of
// kBlock channels): the recurrence of a channel never leaves its task, so
// a task runs its whole sequence, chunk after chunk, in one parallel
// region. Inside a task the state is laid out (state, channel): the
// innermost loops run over the block's channels, which the compiler
// vectorises, and the sums over the state (y = C·h, ∂L/∂x, ∂L/∂Δ) become
// per-lane accumulations with no horizontal reduction; only ∂L/∂B and
// ∂L/∂C, sums over channels, reduce across lanes, once per block.
template <typename T>
struct Args {
  Shape s;
  int64_t K, nc;  // chunk length, chunks
  const T *x, *dt, *A, *Bm, *Cm, *Dv;
  T* starts;             // forward: (B, nc, D, N), the state before each chunk (null: not kept)
  T* y;                  // forward: (B, L, D)
  T* last;               // forward: (B, D, N)
  const T* gy;           // backward: (B, L, D) or null (zero)
  const T* sts;          // backward: the forward's starts
  T *gx, *gdt;           // backward: (B, L, D)
  T* gA_part;            // backward: (B, D, N), summed over the batch afterwards
  T *gB_part, *gC_part;  // backward: (blocks, B, L, N), summed over blocks afterwards
  T* gD_part;            // backward: (B, D)
};

// Task-local buffers, (state, channel) layout, w = channels in the block.
template <typename T>
struct Local {
  std::vector<T> At, h, gh, gAt, start, hs, as;
  Local(int64_t N, int64_t K, bool bwd)
      : At(N * kBlock), h(N * kBlock), gh(bwd ? N * kBlock : 0), gAt(bwd ? N * kBlock : 0),
        start(bwd ? N * kBlock : 0), hs(bwd ? K * N * kBlock : 0), as(bwd ? K * N * kBlock : 0) {}
};

// to_local copies src (.., D, N) rows d0..d0+w into dst (N, w).
template <typename T>
TFS_INLINE void to_local(T* dst, const T* src, int64_t d0, int64_t w, int64_t N) {
  for (int64_t dl = 0; dl < w; dl++)
    for (int64_t n = 0; n < N; n++) dst[n * w + dl] = src[(d0 + dl) * N + n];
}

template <typename T>
TFS_INLINE void from_local(T* dst, const T* src, int64_t d0, int64_t w, int64_t N) {
  for (int64_t dl = 0; dl < w; dl++)
    for (int64_t n = 0; n < N; n++) dst[(d0 + dl) * N + n] = src[n * w + dl];
}

template <typename T>
TFS_INLINE void fwd_task(const Args<T>& f, int64_t task, Local<T>& loc) {
  const Shape& s = f.s;
  const int64_t nblk = (s.D + kBlock - 1) / kBlock, N = s.N;
  const int64_t b = task / nblk, d0 = (task % nblk) * kBlock, w = std::min(s.D, d0 + kBlock) - d0;
  T* __restrict At = loc.At.data();
  T* __restrict h = loc.h.data();
  to_local(At, f.A, d0, w, N);
  std::fill(h, h + N * w, T(0));
  T dtv[kBlock], dx[kBlock], acc[kBlock];
  for (int64_t t = 0; t < s.L; t++) {
    if (f.starts && t % f.K == 0) from_local(f.starts + (b * f.nc + t / f.K) * s.D * N, h, d0, w, N);
    const int64_t i0 = (b * s.L + t) * s.D + d0;
    const T* __restrict Bp = f.Bm + (b * s.L + t) * N;
    const T* __restrict Cp = f.Cm + (b * s.L + t) * N;
    for (int64_t dl = 0; dl < w; dl++) {
      dtv[dl] = f.dt[i0 + dl];
      dx[dl] = dtv[dl] * f.x[i0 + dl];
      acc[dl] = 0;
    }
    for (int64_t n = 0; n < N; n++) {
      const T bn = Bp[n], cn = Cp[n];
      T* __restrict hn = h + n * w;
      const T* __restrict An = At + n * w;
#pragma omp simd
      for (int64_t dl = 0; dl < w; dl++) {
        const T v = vexp(dtv[dl] * An[dl]) * hn[dl] + dx[dl] * bn;
        hn[dl] = v;
        acc[dl] += cn * v;
      }
    }
    for (int64_t dl = 0; dl < w; dl++) f.y[i0 + dl] = acc[dl] + f.Dv[d0 + dl] * f.x[i0 + dl];
  }
  from_local(f.last + b * s.D * N, h, d0, w, N);
}

// bwd_task runs one task's chunks newest first: it recomputes the chunk's
// states from the saved start (keeping them and exp(Δ·A) in task buffers of
// the chunk's size), then walks the chunk backwards with gh, ∂L/∂h_t,
// carried from each step to the one before (h_{t+1} = exp(Δ_{t+1}·A)·h_t + …).
template <typename T>
TFS_INLINE void bwd_task(const Args<T>& f, int64_t task, Local<T>& loc) {
  const Shape& s = f.s;
  const int64_t nblk = (s.D + kBlock - 1) / kBlock, N = s.N;
  const int64_t b = task / nblk, blk = task % nblk, d0 = blk * kBlock, w = std::min(s.D, d0 + kBlock) - d0;
  const int64_t sw = N * w;  // values per step
  T* __restrict At = loc.At.data();
  T* __restrict gh = loc.gh.data();
  T* __restrict gAt = loc.gAt.data();
  T* __restrict start = loc.start.data();
  T* __restrict hs = loc.hs.data();
  T* __restrict as = loc.as.data();
  to_local(At, f.A, d0, w, N);
  std::fill(gh, gh + sw, T(0));
  std::fill(gAt, gAt + sw, T(0));
  T dtv[kBlock], dx[kBlock], g[kBlock], gdx[kBlock], gdta[kBlock], gD[kBlock];
  std::fill(gD, gD + w, T(0));
  for (int64_t c = f.nc - 1; c >= 0; c--) {
    const int64_t t0 = c * f.K, k = std::min(f.K, s.L - t0);
    to_local(start, f.sts + (b * f.nc + c) * s.D * N, d0, w, N);
    for (int64_t j = 0; j < k; j++) {
      const int64_t t = t0 + j, i0 = (b * s.L + t) * s.D + d0;
      const T* __restrict Bp = f.Bm + (b * s.L + t) * N;
      for (int64_t dl = 0; dl < w; dl++) {
        dtv[dl] = f.dt[i0 + dl];
        dx[dl] = dtv[dl] * f.x[i0 + dl];
      }
      const T* hprev = j > 0 ? hs + (j - 1) * sw : start;
      for (int64_t n = 0; n < N; n++) {
        const T bn = Bp[n];
        const T* __restrict An = At + n * w;
        const T* __restrict hp = hprev + n * w;
        T* __restrict hn = hs + j * sw + n * w;
        T* __restrict an = as + j * sw + n * w;
#pragma omp simd
        for (int64_t dl = 0; dl < w; dl++) {
          const T a = vexp(dtv[dl] * An[dl]);
          an[dl] = a;
          hn[dl] = a * hp[dl] + dx[dl] * bn;
        }
      }
    }
    for (int64_t j = k - 1; j >= 0; j--) {
      const int64_t t = t0 + j, i0 = (b * s.L + t) * s.D + d0;
      const T* __restrict Bp = f.Bm + (b * s.L + t) * N;
      const T* __restrict Cp = f.Cm + (b * s.L + t) * N;
      T* __restrict gBp = f.gB_part + ((blk * s.B + b) * s.L + t) * N;
      T* __restrict gCp = f.gC_part + ((blk * s.B + b) * s.L + t) * N;
      for (int64_t dl = 0; dl < w; dl++) {
        g[dl] = f.gy ? f.gy[i0 + dl] : T(0);
        dtv[dl] = f.dt[i0 + dl];
        dx[dl] = dtv[dl] * f.x[i0 + dl];
        gdx[dl] = gdta[dl] = 0;
      }
      const T* hprev = j > 0 ? hs + (j - 1) * sw : start;
      for (int64_t n = 0; n < N; n++) {
        const T bn = Bp[n], cn = Cp[n];
        const T* __restrict a = as + j * sw + n * w;
        const T* __restrict hc = hs + j * sw + n * w;
        const T* __restrict hp = hprev + n * w;
        const T* __restrict An = At + n * w;
        T* __restrict ghn = gh + n * w;
        T* __restrict gAn = gAt + n * w;
        T sc = 0, sb = 0;
#pragma omp simd reduction(+ : sc, sb)
        for (int64_t dl = 0; dl < w; dl++) {
          const T ght = ghn[dl] + g[dl] * cn;  // ∂L/∂h_t
          sc += g[dl] * hc[dl];
          const T gda = ght * hp[dl] * a[dl];  // ∂L/∂(Δ·A), through exp
          gAn[dl] += gda * dtv[dl];
          gdta[dl] += gda * An[dl];
          gdx[dl] += ght * bn;
          sb += ght * dx[dl];
          ghn[dl] = ght * a[dl];
        }
        gCp[n] = sc;
        gBp[n] = sb;
      }
      for (int64_t dl = 0; dl < w; dl++) {
        const T xv = f.x[i0 + dl];
        f.gdt[i0 + dl] = gdta[dl] + gdx[dl] * xv;
        f.gx[i0 + dl] = gdx[dl] * dtv[dl] + g[dl] * f.Dv[d0 + dl];
        gD[dl] += g[dl] * xv;
      }
    }
  }
  from_local(f.gA_part + b * s.D * N, gAt, d0, w, N);
  for (int64_t dl = 0; dl < w; dl++) f.gD_part[b * s.D + d0 + dl] = gD[dl];
}

TFS_CLONES void fwd_tasks_f32(const Args<float>& f, int64_t lo, int64_t hi, Local<float>& l) {
  for (int64_t t = lo; t < hi; t++) fwd_task(f, t, l);
}
TFS_CLONES void fwd_tasks_f64(const Args<double>& f, int64_t lo, int64_t hi, Local<double>& l) {
  for (int64_t t = lo; t < hi; t++) fwd_task(f, t, l);
}
TFS_CLONES void bwd_tasks_f32(const Args<float>& f, int64_t lo, int64_t hi, Local<float>& l) {
  for (int64_t t = lo; t < hi; t++) bwd_task(f, t, l);
}
TFS_CLONES void bwd_tasks_f64(const Args<double>& f, int64_t lo, int64_t hi, Local<double>& l) {
  for (int64_t t = lo; t < hi; t++) bwd_task(f, t, l);
}
void run_fwd(const Args<float>& f, int64_t lo, int64_t hi, Local<float>& l) { fwd_tasks_f32(f, lo, hi, l); }
void run_fwd(const Args<double>& f, int64_t lo, int64_t hi, Local<double>& l) { fwd_tasks_f64(f, lo, hi, l); }
void run_bwd(const Args<float>& f, int64_t lo, int64_t hi, Local<float>& l) { bwd_tasks_f32(f, lo, hi, l); }
void run_bwd(const Args<double>& f, int64_t lo, int64_t hi, Local<double>& l) { bwd_tasks_f64(f, lo, hi, l); }

Shape shape_of(const at::Tensor& x, const at::Tensor& A) { return {x.size(0), x.size(1), x.size(2), A.size(1)}; }

int64_t blocks(const Shape& s) { return (s.D + kBlock - 1) / kBlock; }

// native_forward runs the CPU kernel: y (B, L, D), the last state (B, D, N)
// and, when starts is not null, the state before every chunk (B, chunks, D, N).
std::tuple<at::Tensor, at::Tensor> native_forward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                                  const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& Dv,
                                                  int64_t K, at::Tensor* starts) {
  const Shape s = shape_of(x, A);
  const int64_t nc = (s.L + K - 1) / K;
  auto last = at::empty({s.B, s.D, s.N}, x.options());
  auto y = at::empty({s.B, s.L, s.D}, x.options());
  if (starts) *starts = at::empty({s.B, nc, s.D, s.N}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "selective_scan_forward", [&] {
    using T = scalar_t;
    Args<T> f{};
    f.s = s;
    f.K = K;
    f.nc = nc;
    f.x = x.data_ptr<T>(), f.dt = dt.data_ptr<T>(), f.A = A.data_ptr<T>();
    f.Bm = Bm.data_ptr<T>(), f.Cm = Cm.data_ptr<T>(), f.Dv = Dv.data_ptr<T>();
    f.starts = starts ? starts->data_ptr<T>() : nullptr;
    f.y = y.data_ptr<T>(), f.last = last.data_ptr<T>();
    at::parallel_for(0, s.B * blocks(s), 1, [&](int64_t lo, int64_t hi) {
      Local<T> loc(s.N, K, false);
      run_fwd(f, lo, hi, loc);
    });
  });
  return {y, last};
}

variable_list native_backward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                              const at::Tensor& Cm, const at::Tensor& Dv, const at::Tensor& starts, int64_t K,
                              const at::Tensor& gy_in) {
  const Shape s = shape_of(x, A);
  const int64_t nc = (s.L + K - 1) / K, nblk = blocks(s);
  auto opts = x.options();
  at::Tensor gy = gy_in.defined() ? gy_in.contiguous() : at::Tensor();
  auto gx = at::empty({s.B, s.L, s.D}, opts);
  auto gdt = at::empty({s.B, s.L, s.D}, opts);
  auto gA_part = at::zeros({s.B, s.D, s.N}, opts);
  auto gD_part = at::zeros({s.B, s.D}, opts);
  auto gB_part = at::empty({nblk, s.B, s.L, s.N}, opts);
  auto gC_part = at::empty({nblk, s.B, s.L, s.N}, opts);
  const int64_t kmax = std::min(K, s.L);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "selective_scan_backward", [&] {
    using T = scalar_t;
    Args<T> f{};
    f.s = s;
    f.K = K;
    f.nc = nc;
    f.x = x.data_ptr<T>(), f.dt = dt.data_ptr<T>(), f.A = A.data_ptr<T>();
    f.Bm = Bm.data_ptr<T>(), f.Cm = Cm.data_ptr<T>(), f.Dv = Dv.data_ptr<T>();
    f.gy = gy.defined() ? gy.data_ptr<T>() : nullptr;
    f.sts = starts.data_ptr<T>();
    f.gx = gx.data_ptr<T>(), f.gdt = gdt.data_ptr<T>();
    f.gA_part = gA_part.data_ptr<T>(), f.gD_part = gD_part.data_ptr<T>();
    f.gB_part = gB_part.data_ptr<T>(), f.gC_part = gC_part.data_ptr<T>();
    at::parallel_for(0, s.B * nblk, 1, [&](int64_t lo, int64_t hi) {
      Local<T> loc(s.N, kmax, true);  // one chunk of one task: in cache
      run_bwd(f, lo, hi, loc);
    });
  });
  return {gx, gdt, gA_part.sum(0), gB_part.sum(0), gC_part.sum(0), gD_part.sum(0)};
}

// ---- the same algorithm in ATen ops (any device) -------------------------------

// exp(Δ·A) for steps [t0, t0+k): (B, k, D, N), contiguous.
at::Tensor chunk_dA(const at::Tensor& dt, const at::Tensor& A, int64_t t0, int64_t k) {
  return at::exp(dt.narrow(1, t0, k).unsqueeze(-1) * A);
}

std::tuple<at::Tensor, at::Tensor> aten_forward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                                const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& Dv,
                                                int64_t K, at::Tensor* starts) {
  const Shape s = shape_of(x, A);
  const int64_t nc = (s.L + K - 1) / K;
  auto h = at::zeros({s.B, s.D, s.N}, x.options());
  auto y = at::empty({s.B, s.L, s.D}, x.options());
  if (starts) *starts = at::empty({s.B, nc, s.D, s.N}, x.options());
  for (int64_t c = 0; c < nc; c++) {
    const int64_t t0 = c * K, k = std::min(K, s.L - t0);
    if (starts) starts->select(1, c).copy_(h);
    auto dA = chunk_dA(dt, A, t0, k);
    auto dBx = (dt.narrow(1, t0, k) * x.narrow(1, t0, k)).unsqueeze(-1) * Bm.narrow(1, t0, k).unsqueeze(2);
    auto Cc = Cm.narrow(1, t0, k);
    for (int64_t j = 0; j < k; j++) {
      h = dA.select(1, j) * h + dBx.select(1, j);
      y.select(1, t0 + j).copy_(at::matmul(h, Cc.select(1, j).unsqueeze(-1)).squeeze(-1));
    }
  }
  y.add_(x * Dv);
  return {y, h};
}

variable_list aten_backward(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                            const at::Tensor& Cm, const at::Tensor& Dv, const at::Tensor& starts, int64_t K,
                            const at::Tensor& gy_in) {
  const Shape s = shape_of(x, A);
  const int64_t nc = (s.L + K - 1) / K;
  auto opts = x.options();
  auto gy = gy_in.defined() ? gy_in : at::zeros({s.B, s.L, s.D}, opts);
  auto gx = at::empty({s.B, s.L, s.D}, opts);
  auto gdt = at::empty({s.B, s.L, s.D}, opts);
  auto gB = at::empty({s.B, s.L, s.N}, opts);
  auto gC = at::empty({s.B, s.L, s.N}, opts);
  auto gA = at::zeros({s.D, s.N}, opts);
  auto gh = at::zeros({s.B, s.D, s.N}, opts);
  for (int64_t c = nc - 1; c >= 0; c--) {
    const int64_t t0 = c * K, k = std::min(K, s.L - t0);
    auto start = starts.select(1, c);
    auto dtc = dt.narrow(1, t0, k), xc = x.narrow(1, t0, k), gyc = gy.narrow(1, t0, k);
    auto Bc = Bm.narrow(1, t0, k), Cc = Cm.narrow(1, t0, k);
    auto dA = chunk_dA(dt, A, t0, k);
    auto dx = dtc * xc;
    auto dBx = dx.unsqueeze(-1) * Bc.unsqueeze(2);
    // The chunk's states, recomputed from its start.
    auto hs = at::empty({s.B, k, s.D, s.N}, opts);
    auto h = start;
    for (int64_t j = 0; j < k; j++) {
      h = dA.select(1, j) * h + dBx.select(1, j);
      hs.select(1, j).copy_(h);
    }
    // ∂L/∂h_t for every step of the chunk, newest first.
    auto G = at::empty({s.B, k, s.D, s.N}, opts);
    auto gyC = gyc.unsqueeze(-1) * Cc.unsqueeze(2);
    for (int64_t j = k - 1; j >= 0; j--) {
      auto ght = gh + gyC.select(1, j);
      G.select(1, j).copy_(ght);
      gh = ght * dA.select(1, j);
    }
    auto hprev = k > 1 ? at::cat({start.unsqueeze(1), hs.narrow(1, 0, k - 1)}, 1) : start.unsqueeze(1);
    auto gdA = G * hprev * dA;
    gA.add_((gdA * dtc.unsqueeze(-1)).sum(at::IntArrayRef{0, 1}));
    auto gdx = (G * Bc.unsqueeze(2)).sum(-1);
    gdt.narrow(1, t0, k).copy_((gdA * A).sum(-1) + gdx * xc);
    gx.narrow(1, t0, k).copy_(gdx * dtc + gyc * Dv);
    gB.narrow(1, t0, k).copy_((G * dx.unsqueeze(-1)).sum(2));
    gC.narrow(1, t0, k).copy_((gyc.unsqueeze(-1) * hs).sum(2));
  }
  auto gD = (gy * x).sum(at::IntArrayRef{0, 1});
  return {gx, gdt, gA, gB, gC, gD};
}

// ---- which implementation runs -------------------------------------------------

// The backend kernels are two internal operators of the same library,
// scan_fwd and scan_bwd, with a kernel for each device that has one: the
// CPU kernel above (registered below), the CUDA kernel (cuda.cc, compiled
// only with the cuda build tag and registered for the CUDA dispatch key).
// The autograd Function calls them through the dispatcher when the device
// has a kernel for them and the kernel takes the dtype and state size, and
// the ATen-op path otherwise.
enum Which : int64_t { kUseATen = 0, kUseCPU = 1, kUseCUDA = 2 };

bool has_kernel(c10::DispatchKey k) {
  auto h = c10::Dispatcher::singleton().findSchema({"torchfit_scan::scan_fwd", ""});
  return h.has_value() && h->hasKernelForDispatchKey(k);
}

// choose answers which implementation runs the scan for inputs on device
// type dev, in compute dtype ct, with n states per channel; impl is the
// op's argument. kNative on a device without a native kernel for the case
// is an error.
int64_t choose(c10::DeviceType dev, at::ScalarType ct, int64_t n, int64_t impl) {
  TORCH_CHECK(impl >= kAuto && impl <= kATen, "selective_scan: unknown impl ", impl);
  if (impl == kATen) return kUseATen;
  if (dev == c10::DeviceType::CPU && (ct == at::kFloat || ct == at::kDouble)) return kUseCPU;
  const bool cuda_built = dev == c10::DeviceType::CUDA && has_kernel(c10::DispatchKey::CUDA);
  const bool cuda_ready = cuda_built && __atomic_load_n(&tfs_cuda_ready, __ATOMIC_ACQUIRE) != 0;
  if (cuda_ready && ct == at::kFloat && n <= TFS_CUDA_MAX_STATE) return kUseCUDA;
  TORCH_CHECK(impl != kNative, "selective_scan: no native kernel for ", ct, " inputs with ", n, " states on ", dev,
              dev != c10::DeviceType::CUDA ? ""
              : !cuda_built                ? " (built without the cuda tag)"
              : !cuda_ready                ? " (the CUDA kernel's fat binary was not built: make scan-kernel)"
                                           : "");
  return kUseATen;
}

// The CPU kernels of scan_fwd and scan_bwd.
std::tuple<at::Tensor, at::Tensor, at::Tensor> cpu_fwd(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                                       const at::Tensor& Bm, const at::Tensor& Cm,
                                                       const at::Tensor& Dv, int64_t K, bool save) {
  at::Tensor starts;
  auto out = native_forward(x, dt, A, Bm, Cm, Dv, K, save ? &starts : nullptr);
  if (!save) starts = at::empty({0}, x.options());
  return {std::get<0>(out), std::get<1>(out), starts};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> cpu_bwd(
    const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm, const at::Tensor& Cm,
    const at::Tensor& Dv, const at::Tensor& starts, const at::Tensor& gy, int64_t K) {
  auto g = native_backward(x, dt, A, Bm, Cm, Dv, starts, K, gy);
  return {g[0], g[1], g[2], g[3], g[4], g[5]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_fwd(const at::Tensor& x, const at::Tensor& dt,
                                                        const at::Tensor& A, const at::Tensor& Bm,
                                                        const at::Tensor& Cm, const at::Tensor& Dv, int64_t K,
                                                        bool save) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torchfit_scan::scan_fwd", "")
                       .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                           const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, const at::Tensor&, int64_t, bool)>();
  return op.call(x, dt, A, Bm, Cm, Dv, K, save);
}

variable_list call_bwd(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                       const at::Tensor& Cm, const at::Tensor& Dv, const at::Tensor& starts, const at::Tensor& gy,
                       int64_t K) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("torchfit_scan::scan_bwd", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
  auto g = op.call(x, dt, A, Bm, Cm, Dv, starts, gy, K);
  return {std::get<0>(g), std::get<1>(g), std::get<2>(g), std::get<3>(g), std::get<4>(g), std::get<5>(g)};
}

// ---- the autograd Function ----------------------------------------------------

struct SelectiveScan : public torch::autograd::Function<SelectiveScan> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                               const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& Dv, int64_t K,
                               int64_t impl, bool save) {
    const int64_t which = choose(x.device().type(), x.scalar_type(), A.size(1), impl);
    at::Tensor y, last, starts;
    if (which == kUseATen) {
      std::tie(y, last) = aten_forward(x, dt, A, Bm, Cm, Dv, K, save ? &starts : nullptr);
    } else {
      std::tie(y, last, starts) = call_fwd(x, dt, A, Bm, Cm, Dv, K, save);
    }
    if (save) {
      ctx->save_for_backward({x, dt, A, Bm, Cm, Dv, starts});
      ctx->saved_data["K"] = K;
      ctx->saved_data["which"] = which;
    }
    ctx->mark_non_differentiable({last});
    return {y, last};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    TORCH_CHECK(saved.size() == 7, "selective_scan: backward without saved state (the forward ran without grad)");
    const int64_t K = ctx->saved_data["K"].toInt();
    const int64_t which = ctx->saved_data["which"].toInt();
    const auto &x = saved[0], &dt = saved[1], &A = saved[2], &Bm = saved[3], &Cm = saved[4], &Dv = saved[5],
               &starts = saved[6];
    at::Tensor gy = grads.empty() ? at::Tensor() : grads[0];
    if (gy.defined()) gy = gy.to(x.scalar_type()).contiguous();
    variable_list g;
    if (which == kUseATen) {
      g = aten_backward(x, dt, A, Bm, Cm, Dv, starts, K, gy);
    } else {
      if (!gy.defined()) gy = at::zeros_like(x);
      g = call_bwd(x, dt, A, Bm, Cm, Dv, starts, gy, K);
    }
    g.resize(9);  // K, impl, save: no gradient
    return g;
  }
};

void check_inputs(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                  const at::Tensor& Cm, const at::Tensor& Dv, int64_t K) {
  TORCH_CHECK(x.dim() == 3, "selective_scan: x must be (batch, length, channels), got shape ", x.sizes());
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  TORCH_CHECK(L >= 1 && B >= 1 && D >= 1, "selective_scan: empty input of shape ", x.sizes());
  TORCH_CHECK(dt.sizes() == x.sizes(), "selective_scan: delta must have x's shape ", x.sizes(), ", got ", dt.sizes());
  TORCH_CHECK(A.dim() == 2 && A.size(0) == D && A.size(1) >= 1, "selective_scan: A must be (", D,
              ", state), got shape ", A.sizes());
  const int64_t N = A.size(1);
  TORCH_CHECK(Bm.dim() == 3 && Bm.size(0) == B && Bm.size(1) == L && Bm.size(2) == N, "selective_scan: B must be (",
              B, ", ", L, ", ", N, "), got shape ", Bm.sizes());
  TORCH_CHECK(Cm.sizes() == Bm.sizes(), "selective_scan: C must be (", B, ", ", L, ", ", N, "), got shape ",
              Cm.sizes());
  TORCH_CHECK(Dv.dim() == 1 && Dv.size(0) == D, "selective_scan: D must be (", D, "), got shape ", Dv.sizes());
  TORCH_CHECK(K >= 1, "selective_scan: chunk must be at least 1, got ", K);
  for (const auto* t : {&dt, &A, &Bm, &Cm, &Dv}) {
    TORCH_CHECK(t->device() == x.device(), "selective_scan: inputs on different devices (", x.device(), " and ",
                t->device(), ")");
  }
}

// selective_scan is the operator: checks, casts to the compute dtype, runs
// the Function, and returns y (in x's dtype for half inputs) and the last
// state (compute dtype, no gradient).
std::tuple<at::Tensor, at::Tensor> selective_scan(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                                                  const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& Dv,
                                                  int64_t K, int64_t impl) {
  check_inputs(x, dt, A, Bm, Cm, Dv, K);
  at::ScalarType ct = x.scalar_type();
  for (const auto* t : {&dt, &A, &Bm, &Cm, &Dv}) ct = c10::promoteTypes(ct, t->scalar_type());
  TORCH_CHECK(at::isFloatingType(ct), "selective_scan: inputs must be floating point, got ", ct);
  if (ct != at::kDouble) ct = at::kFloat;  // half and bfloat16 are computed in float32
  auto prep = [ct](const at::Tensor& t) { return t.to(ct).contiguous(); };
  auto cx = prep(x), cdt = prep(dt), cA = prep(A), cB = prep(Bm), cC = prep(Cm), cD = prep(Dv);
  bool grad = false;
  for (const auto* t : {&cx, &cdt, &cA, &cB, &cC, &cD}) grad = grad || t->requires_grad();
  grad = grad && c10::GradMode::is_enabled();
  auto out = SelectiveScan::apply(cx, cdt, cA, cB, cC, cD, K, impl, grad);
  auto y = out[0];
  if (x.scalar_type() != ct && (x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16)) {
    y = y.to(x.scalar_type());
  }
  return {y, out[1]};
}

// implementation answers which implementation the scan runs for inputs of
// dtype on device with state states per channel (compute dtype: float32
// unless dtype is float64): 0 the ATen-op path, 1 the CPU kernel, 2 the
// CUDA kernel; impl as the scan's argument.
// The device is a string ("cpu", "cuda:0") so that asking needs no device.
int64_t implementation(c10::string_view device, at::ScalarType dtype, int64_t state, int64_t impl) {
  TORCH_CHECK(state >= 1, "selective_scan: state must be at least 1, got ", state);
  const at::ScalarType ct = dtype == at::kDouble ? at::kDouble : at::kFloat;
  return choose(c10::Device(std::string(device.data(), device.size())).type(), ct, state, impl);
}

}  // namespace

int tfs_cuda_ready = 0;

TORCH_LIBRARY(torchfit_scan, m) {
  m.def(
      "selective_scan(Tensor x, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor D, int chunk=64, int impl=0) "
      "-> (Tensor, Tensor)",
      TORCH_FN(selective_scan));
  m.def("implementation(str device, ScalarType dtype, int state=16, int impl=0) -> int", TORCH_FN(implementation));
  // The backend kernels (internal: no autograd of their own, the Function
  // above is their autograd). scan_fwd returns y, the last state and the
  // chunk starts (empty when not saved); scan_bwd the gradients of x, delta,
  // A, B, C and D.
  m.def("scan_fwd(Tensor x, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor D, int chunk, bool save) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("scan_bwd(Tensor x, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor D, Tensor starts, Tensor gy, "
        "int chunk) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torchfit_scan, CPU, m) {
  m.impl("scan_fwd", TORCH_FN(cpu_fwd));
  m.impl("scan_bwd", TORCH_FN(cpu_bwd));
}

extern "C" {

void tfs_free_error(tfs_err e) { std::free(e); }

}  // extern "C"

#include "parwidth.h"
TF_PARALLEL_WIDTH(tf_scan_parallel_width)
