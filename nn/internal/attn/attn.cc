// attn.cc: memory-efficient (flash-style) attention on the CPU, an operator
// of libtorch's dispatcher.
//
//   out = dropout(softmax(scale·q·kᵀ + masks))·v
//
// for q (B, H, L, D), k (B, H, S, D), v (B, H, S, Dv). The forward pass
// walks the keys in tiles of kKeys for a block of kRows queries at a time,
// keeping a running maximum and sum per row (the online softmax of
// FlashAttention), so no (L, S) matrix is ever formed: it keeps only the
// output and each row's log-sum-exp for backward. Backward (FlashAttention-2)
// recomputes each tile's probabilities from q, k and the log-sum-exp, with
// D = rowsum(dO ∘ O), and accumulates dQ, dK and dV tile by tile.
// Attention dropout draws its keep mask from Philox (internal/philox): a
// pure function of (seed, element index), made again in backward instead
// of being kept. The seed is drawn per call from the default CPU generator,
// so torch.ManualSeed makes runs repeatable.
//
// Float64 is computed in float64, float32 and bfloat16 in float32 (tiles
// are converted as they are loaded). Work is spread over libtorch's threads
// with at::parallel_for: forward over (batch, head, block of queries),
// backward over (batch, head). The tile products go to libtorch's matrix
// product (at::mm_out on tensors over the tile buffers: its BLAS, serial
// inside the parallel region); register-blocked products written here, for
// AVX-512 and AVX2 besides the baseline, are the alternative
// (TORCHFIT_ATTN_TILES=own) and take the ragged edges' other products.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "philox.h"

// The libtorch version switch, as in the op shim (torch/internal/capi/shim.h).
#include <torch/csrc/api/include/torch/version.h>
#define TFA_TORCH_AT_LEAST(maj, min) \
  (TORCH_VERSION_MAJOR > (maj) || (TORCH_VERSION_MAJOR == (maj) && TORCH_VERSION_MINOR >= (min)))

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kRows = 64;   // queries per block
constexpr int64_t kKeys = 256;  // keys per tile

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define TFA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TFA_CLONES
#endif
#define TFA_INLINE inline __attribute__((always_inline))

template <typename S>
struct AccOf {
  using type = S;
};
template <>
struct AccOf<c10::BFloat16> {
  using type = float;
};

// ---- exp ------------------------------------------------------------------------

// fexp is e^x in float32 written so that loops over it vectorise: x = n·ln2 + r
// with |r| ≤ ln2/2, a degree-6 polynomial for e^r, 2ⁿ from the exponent bits.
// Below −87.3 (including −inf) it is 0, as a masked score's weight must be.
TFA_INLINE float fexp(float x) {
  const float xc = std::min(std::max(x, -87.3f), 88.0f);
  const float t = xc * 1.44269504088896341f;
  const float n = __builtin_floorf(t + 0.5f);
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  const float v = p * __builtin_bit_cast(float, e);
  return x < -87.3f ? 0.0f : v;
}

// aexp is the exp of the accumulation type: float64 keeps libm's.
TFA_INLINE float aexp(float x) { return fexp(x); }
TFA_INLINE double aexp(double x) { return std::exp(x); }

// ---- tile matrix products ----------------------------------------------------

// micro computes the MR×NR block c = (add ? c : 0) + alpha·a·b for a (MR×K,
// row stride lda) and b (K×NR, row stride ldb): one vector of NR lanes per
// row, held in registers (GCC's vector extension: AVX-512, AVX2 or SSE
// registers as the clone has them).
template <typename A, int MR, int NR>
TFA_INLINE void micro(int64_t K, const A* __restrict a, int64_t lda, const A* __restrict b, int64_t ldb,
                      A* __restrict c, int64_t ldc, A alpha, bool add) {
  typedef A vec __attribute__((vector_size(NR * sizeof(A))));
  vec acc[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) acc[r] = vec{};
  for (int64_t k = 0; k < K; k++) {
    vec bk;
    __builtin_memcpy(&bk, b + k * ldb, sizeof(vec));
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) acc[r] += a[r * lda + k] * bk;
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) {
    vec out = alpha * acc[r];
    if (add) {
      vec old;
      __builtin_memcpy(&old, c + r * ldc, sizeof(vec));
      out += old;
    }
    __builtin_memcpy(c + r * ldc, &out, sizeof(vec));
  }
}

// edge is micro for the ragged edges (m ≤ MR rows, n < NR columns).
template <typename A>
TFA_INLINE void edge(int64_t m, int64_t n, int64_t K, const A* a, int64_t lda, const A* b, int64_t ldb, A* c,
                     int64_t ldc, A alpha, bool add) {
  for (int64_t r = 0; r < m; r++)
    for (int64_t j = 0; j < n; j++) {
      A s = 0;
      for (int64_t k = 0; k < K; k++) s += a[r * lda + k] * b[k * ldb + j];
      c[r * ldc + j] = (add ? c[r * ldc + j] : A(0)) + alpha * s;
    }
}

// own_tiles chooses the register-blocked products below for the tiles
// (TORCHFIT_ATTN_TILES=own) over libtorch's matrix product (its BLAS: two
// to three times faster per tile here, for a few microseconds a call).
bool own_tiles() {
  static const bool own = [] {
    const char* e = std::getenv("TORCHFIT_ATTN_TILES");
    return e != nullptr && std::string(e) == "own";
  }();
  return own;
}

// blas_gemm is gemm through at::mm_out / addmm_ on tensors over the buffers.
template <typename A>
void blas_gemm(int64_t M, int64_t N, int64_t K, const A* a, int64_t lda, const A* b, int64_t ldb, bool add, A* c,
               int64_t ldc) {
  const auto o = at::TensorOptions().dtype(c10::CppTypeToScalarType<A>::value);
  auto ta = at::from_blob(const_cast<A*>(a), {M, K}, {lda, 1}, o);
  auto tb = at::from_blob(const_cast<A*>(b), {K, N}, {ldb, 1}, o);
  auto tc = at::from_blob(c, {M, N}, {ldc, 1}, o);
  if (add) {
    tc.addmm_(ta, tb);
  } else {
    at::mm_out(tc, ta, tb);
  }
}

// gemm: c (M×N) = (add ? c : 0) + alpha·a·b, everything row-major.
template <typename A>
TFA_INLINE void gemm(int64_t M, int64_t N, int64_t K, A alpha, const A* a, int64_t lda, const A* b, int64_t ldb,
                     bool add, A* c, int64_t ldc) {
  if (alpha == A(1) && !own_tiles()) {
    blas_gemm(M, N, K, a, lda, b, ldb, add, c, ldc);
    return;
  }
  constexpr int MR = 8, NR = 32 / sizeof(A);  // the fastest measured here (AVX-512 Xeon)
  int64_t i = 0;
  for (; i + MR <= M; i += MR) {
    int64_t j = 0;
    for (; j + NR <= N; j += NR) micro<A, MR, NR>(K, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, alpha, add);
    if (j < N) edge(MR, N - j, K, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, alpha, add);
  }
  for (; i < M; i++) {
    int64_t j = 0;
    for (; j + NR <= N; j += NR) micro<A, 1, NR>(K, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, alpha, add);
    if (j < N) edge(1, N - j, K, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, alpha, add);
  }
}

// ---- problem description ---------------------------------------------------------

template <typename S>
struct Args {
  using A = typename AccOf<S>::type;
  int64_t B, H, L, Sk, D, Dv;
  const S *q, *k, *v;         // (B, H, L, D), (B, H, S, D), (B, H, S, Dv); last dim contiguous
  int64_t qs[3], ks[3], vs[3];  // strides of batch, head, row
  const S* out;               // forward writes outw; backward reads out
  S* outw;
  int64_t os[3];
  A* lse;                 // (B, H, L) contiguous
  const A* kpm;           // (B, S) additive, contiguous, or null
  const A* am;            // additive, strided over (B, H, L, S) (zero strides broadcast), or null
  int64_t ams[4];
  bool causal;
  int64_t off;  // causal: query i sees keys j ≤ i + off
  A scale;
  double p;  // dropout
  uint64_t seed;
  // backward
  const S* gout;
  int64_t gs[3];
  A *gq, *gk, *gv;  // (B, H, ·, ·) contiguous, accumulation dtype
};

// keys_end is the number of keys rows r0..r1−1 can see at all.
template <typename S>
TFA_INLINE int64_t keys_end(const Args<S>& f, int64_t last_row) {
  if (!f.causal) return f.Sk;
  return std::max<int64_t>(0, std::min(f.Sk, last_row + f.off + 1));
}

// keep fills z[0..n) with the dropout scale of elements e0..e0+n of the
// head-major (B, H, L, S) index space: 1/(1−p) where kept, 0 where dropped.
template <typename A>
TFA_INLINE void keep(uint64_t seed, uint64_t e0, int64_t n, double p, A* z) {
  const A inv = static_cast<A>(1 / (1 - p));
  const float pf = static_cast<float>(p);  // philox_uniform's values are exact floats
  uint64_t e = e0;
  int64_t c = 0;
  while (c < n) {
    const philox_u4 blk = philox_block(seed, 0, e >> 2);
    for (int w = static_cast<int>(e & 3); w < 4 && c < n; w++, c++, e++) z[c] = philox_uniform(blk.v[w]) >= pf ? inv : A(0);
  }
}

// scores turns the product row sr (keys j0..j0+n) of query i into masked
// scores: masks added, keys beyond the causal limit −inf.
template <typename S, typename A>
TFA_INLINE void mask_row(const Args<S>& f, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n, A* sr) {
  const A ninf = -std::numeric_limits<A>::infinity();
  if (f.kpm) {
    const A* kp = f.kpm + b * f.Sk + j0;
    for (int64_t c = 0; c < n; c++) sr[c] += kp[c];
  }
  if (f.am) {
    const A* m = f.am + b * f.ams[0] + h * f.ams[1] + i * f.ams[2] + j0 * f.ams[3];
    for (int64_t c = 0; c < n; c++) sr[c] += m[c * f.ams[3]];
  }
  if (f.causal) {
    for (int64_t c = std::max<int64_t>(0, i + f.off + 1 - j0); c < n; c++) sr[c] = ninf;
  }
}

// load copies rows r0..r0+m of a (row stride rs) into dst (m × w, times
// scale) in the accumulation type; loadT the transpose (w × m).
template <typename S, typename A>
TFA_INLINE void load(A* dst, const S* src, int64_t rs, int64_t m, int64_t w, A scale) {
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < w; c++) dst[r * w + c] = static_cast<A>(src[r * rs + c]) * scale;
}
template <typename S, typename A>
TFA_INLINE void loadT(A* dst, const S* src, int64_t rs, int64_t m, int64_t w) {
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < w; c++) dst[c * m + r] = static_cast<A>(src[r * rs + c]);
}
template <typename A>
TFA_INLINE void transpose(A* dst, const A* src, int64_t m, int64_t n) {
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < n; c++) dst[c * m + r] = src[r * n + c];
}

// ---- forward -----------------------------------------------------------------------

template <typename S>
struct FwdLocal {
  using A = typename AccOf<S>::type;
  std::vector<A> Q, Kt, V, Sx, O, Z, m, l;
  explicit FwdLocal(const Args<S>& f)
      : Q(kRows * f.D), Kt(f.D * kKeys), V(kKeys * f.Dv), Sx(kRows * kKeys), O(kRows * f.Dv),
        Z(f.p > 0 ? kKeys : 0), m(kRows), l(kRows) {}
};

// fwd_task runs one block of queries of one head.
template <typename S>
TFA_INLINE void fwd_task(const Args<S>& f, int64_t task, FwdLocal<S>& w) {
  using A = typename AccOf<S>::type;
  const A ninf = -std::numeric_limits<A>::infinity();
  const int64_t nq = (f.L + kRows - 1) / kRows;
  const int64_t bh = task / nq, b = bh / f.H, h = bh % f.H, i0 = (task % nq) * kRows;
  const int64_t m = std::min(kRows, f.L - i0), D = f.D, Dv = f.Dv;
  const S* q = f.q + b * f.qs[0] + h * f.qs[1] + i0 * f.qs[2];
  const S* k = f.k + b * f.ks[0] + h * f.ks[1];
  const S* v = f.v + b * f.vs[0] + h * f.vs[1];
  A *Q = w.Q.data(), *Kt = w.Kt.data(), *V = w.V.data(), *Sx = w.Sx.data(), *O = w.O.data(), *Z = w.Z.data();
  A *mr = w.m.data(), *lr = w.l.data();
  load(Q, q, f.qs[2], m, D, f.scale);
  std::fill(O, O + m * Dv, A(0));
  std::fill(mr, mr + m, ninf);
  std::fill(lr, lr + m, A(0));
  const int64_t jend = keys_end(f, i0 + m - 1);
  for (int64_t j0 = 0; j0 < jend; j0 += kKeys) {
    const int64_t n = std::min(kKeys, jend - j0);
    loadT(Kt, k + j0 * f.ks[2], f.ks[2], n, D);
    load(V, v + j0 * f.vs[2], f.vs[2], n, Dv, A(1));
    gemm<A>(m, n, D, A(1), Q, D, Kt, n, false, Sx, n);
    for (int64_t r = 0; r < m; r++) {
      const int64_t i = i0 + r;
      A* sr = Sx + r * n;
      mask_row(f, b, h, i, j0, n, sr);
      A mx = ninf;
      for (int64_t c = 0; c < n; c++) mx = std::max(mx, sr[c]);
      const A mnew = std::max(mr[r], mx);
      const A sh = mnew == ninf ? A(0) : mnew;
      A sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < n; c++) {
        const A e = aexp(sr[c] - sh);
        sr[c] = e;
        sum += e;
      }
      const A alpha = mr[r] == ninf ? A(0) : aexp(mr[r] - sh);
      lr[r] = lr[r] * alpha + sum;
      mr[r] = mnew;
      if (alpha != A(1)) {
        A* o = O + r * Dv;
        for (int64_t c = 0; c < Dv; c++) o[c] *= alpha;
      }
      if (f.p > 0) {
        keep(f.seed, static_cast<uint64_t>((bh * f.L + i) * f.Sk + j0), n, f.p, Z);
        for (int64_t c = 0; c < n; c++) sr[c] *= Z[c];
      }
    }
    gemm<A>(m, Dv, n, A(1), Sx, n, V, Dv, true, O, Dv);
  }
  S* out = f.outw + b * f.os[0] + h * f.os[1] + i0 * f.os[2];
  A* lse = f.lse + bh * f.L + i0;
  for (int64_t r = 0; r < m; r++) {
    const A inv = lr[r] > 0 ? A(1) / lr[r] : A(0);
    for (int64_t c = 0; c < Dv; c++) out[r * f.os[2] + c] = static_cast<S>(O[r * Dv + c] * inv);
    lse[r] = lr[r] > 0 ? mr[r] + std::log(lr[r]) : ninf;
  }
}

// ---- backward ----------------------------------------------------------------------

template <typename S>
struct BwdLocal {
  using A = typename AccOf<S>::type;
  std::vector<A> Q, dO, Dr, dQ, Kt, K, Vt, P, Z, dP, T;
  explicit BwdLocal(const Args<S>& f)
      : Q(kRows * f.D), dO(kRows * f.Dv), Dr(kRows), dQ(kRows * f.D), Kt(f.D * kKeys), K(kKeys * f.D),
        Vt(f.Dv * kKeys), P(kRows * kKeys), Z(f.p > 0 ? kRows * kKeys : 0), dP(kRows * kKeys),
        T(kRows * kKeys) {}
};

// bwd_task runs one head: blocks of queries in turn, each against every
// tile of keys it sees; dK and dV accumulate in place (the head is the task's).
template <typename S>
TFA_INLINE void bwd_task(const Args<S>& f, int64_t bh, BwdLocal<S>& w) {
  using A = typename AccOf<S>::type;
  const A ninf = -std::numeric_limits<A>::infinity();
  const int64_t b = bh / f.H, h = bh % f.H, D = f.D, Dv = f.Dv;
  const S* k = f.k + b * f.ks[0] + h * f.ks[1];
  const S* v = f.v + b * f.vs[0] + h * f.vs[1];
  A* gk = f.gk + bh * f.Sk * D;
  A* gv = f.gv + bh * f.Sk * Dv;
  A *Q = w.Q.data(), *dO = w.dO.data(), *Dr = w.Dr.data(), *dQ = w.dQ.data(), *Kt = w.Kt.data(), *K = w.K.data();
  A *Vt = w.Vt.data(), *P = w.P.data(), *Z = w.Z.data(), *dP = w.dP.data(), *T = w.T.data();
  for (int64_t i0 = 0; i0 < f.L; i0 += kRows) {
    const int64_t m = std::min(kRows, f.L - i0);
    load(Q, f.q + b * f.qs[0] + h * f.qs[1] + i0 * f.qs[2], f.qs[2], m, D, f.scale);
    const S* go = f.gout + b * f.gs[0] + h * f.gs[1] + i0 * f.gs[2];
    const S* o = f.out + b * f.os[0] + h * f.os[1] + i0 * f.os[2];
    load(dO, go, f.gs[2], m, Dv, A(1));
    for (int64_t r = 0; r < m; r++) {
      A s = 0;
      for (int64_t c = 0; c < Dv; c++) s += dO[r * Dv + c] * static_cast<A>(o[r * f.os[2] + c]);
      Dr[r] = s;
    }
    std::fill(dQ, dQ + m * D, A(0));
    const A* lse = f.lse + bh * f.L + i0;
    const int64_t jend = keys_end(f, i0 + m - 1);
    for (int64_t j0 = 0; j0 < jend; j0 += kKeys) {
      const int64_t n = std::min(kKeys, jend - j0);
      loadT(Kt, k + j0 * f.ks[2], f.ks[2], n, D);
      load(K, k + j0 * f.ks[2], f.ks[2], n, D, A(1));
      loadT(Vt, v + j0 * f.vs[2], f.vs[2], n, Dv);
      gemm<A>(m, n, D, A(1), Q, D, Kt, n, false, P, n);
      for (int64_t r = 0; r < m; r++) {
        const int64_t i = i0 + r;
        A* pr = P + r * n;
        mask_row(f, b, h, i, j0, n, pr);
        const A ls = lse[r];
        if (ls == ninf) {
          std::fill(pr, pr + n, A(0));
        } else {
#pragma omp simd
          for (int64_t c = 0; c < n; c++) pr[c] = aexp(pr[c] - ls);
        }
        if (f.p > 0) keep(f.seed, static_cast<uint64_t>((bh * f.L + i) * f.Sk + j0), n, f.p, Z + r * n);
      }
      // dV += (P∘Z)ᵀ·dO
      if (f.p > 0) {
        for (int64_t x = 0; x < m * n; x++) dP[x] = P[x] * Z[x];
        transpose(T, dP, m, n);
      } else {
        transpose(T, P, m, n);
      }
      gemm<A>(n, Dv, m, A(1), T, m, dO, Dv, true, gv + j0 * Dv, Dv);
      // dP = dO·Vᵀ (∘Z); dS = P∘(dP − D)
      gemm<A>(m, n, Dv, A(1), dO, Dv, Vt, n, false, dP, n);
      for (int64_t r = 0; r < m; r++) {
        A* dp = dP + r * n;
        const A* pr = P + r * n;
        const A d = Dr[r];
        if (f.p > 0) {
          const A* z = Z + r * n;
          for (int64_t c = 0; c < n; c++) dp[c] = pr[c] * (dp[c] * z[c] - d);
        } else {
          for (int64_t c = 0; c < n; c++) dp[c] = pr[c] * (dp[c] - d);
        }
      }
      // dQs += dS·K; dK += dSᵀ·Qs
      gemm<A>(m, D, n, A(1), dP, n, K, D, true, dQ, D);
      transpose(T, dP, m, n);
      gemm<A>(n, D, m, A(1), T, m, Q, D, true, gk + j0 * D, D);
    }
    A* gq = f.gq + (bh * f.L + i0) * D;
    for (int64_t x = 0; x < m * D; x++) gq[x] = dQ[x] * f.scale;
  }
}

TFA_CLONES void fwd_f64(const Args<double>& f, int64_t lo, int64_t hi, FwdLocal<double>& w) {
  for (int64_t t = lo; t < hi; t++) fwd_task(f, t, w);
}
TFA_CLONES void fwd_f32(const Args<float>& f, int64_t lo, int64_t hi, FwdLocal<float>& w) {
  for (int64_t t = lo; t < hi; t++) fwd_task(f, t, w);
}
TFA_CLONES void fwd_bf16(const Args<c10::BFloat16>& f, int64_t lo, int64_t hi, FwdLocal<c10::BFloat16>& w) {
  for (int64_t t = lo; t < hi; t++) fwd_task(f, t, w);
}
TFA_CLONES void bwd_f64(const Args<double>& f, int64_t lo, int64_t hi, BwdLocal<double>& w) {
  for (int64_t t = lo; t < hi; t++) bwd_task(f, t, w);
}
TFA_CLONES void bwd_f32(const Args<float>& f, int64_t lo, int64_t hi, BwdLocal<float>& w) {
  for (int64_t t = lo; t < hi; t++) bwd_task(f, t, w);
}
TFA_CLONES void bwd_bf16(const Args<c10::BFloat16>& f, int64_t lo, int64_t hi, BwdLocal<c10::BFloat16>& w) {
  for (int64_t t = lo; t < hi; t++) bwd_task(f, t, w);
}
void run_fwd(const Args<double>& f, int64_t lo, int64_t hi, FwdLocal<double>& w) { fwd_f64(f, lo, hi, w); }
void run_fwd(const Args<float>& f, int64_t lo, int64_t hi, FwdLocal<float>& w) { fwd_f32(f, lo, hi, w); }
void run_fwd(const Args<c10::BFloat16>& f, int64_t lo, int64_t hi, FwdLocal<c10::BFloat16>& w) {
  fwd_bf16(f, lo, hi, w);
}
void run_bwd(const Args<double>& f, int64_t lo, int64_t hi, BwdLocal<double>& w) { bwd_f64(f, lo, hi, w); }
void run_bwd(const Args<float>& f, int64_t lo, int64_t hi, BwdLocal<float>& w) { bwd_f32(f, lo, hi, w); }
void run_bwd(const Args<c10::BFloat16>& f, int64_t lo, int64_t hi, BwdLocal<c10::BFloat16>& w) {
  bwd_bf16(f, lo, hi, w);
}

// ---- tensors to arguments -------------------------------------------------------------

// The masks, prepared by the operator: additive, in the accumulation dtype.
struct Masks {
  at::Tensor kpm;  // (B, S) contiguous, or undefined
  at::Tensor am;   // expanded to (B, H, L, S), or undefined
};

template <typename S>
Args<S> make_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Masks& mk, bool causal,
                  int64_t off, double scale, double p, uint64_t seed) {
  using A = typename AccOf<S>::type;
  Args<S> f{};
  f.B = q.size(0), f.H = q.size(1), f.L = q.size(2), f.D = q.size(3), f.Sk = k.size(2), f.Dv = v.size(3);
  f.q = q.data_ptr<S>(), f.k = k.data_ptr<S>(), f.v = v.data_ptr<S>();
  for (int d = 0; d < 3; d++) f.qs[d] = q.stride(d), f.ks[d] = k.stride(d), f.vs[d] = v.stride(d);
  f.kpm = mk.kpm.defined() ? mk.kpm.data_ptr<A>() : nullptr;
  f.am = mk.am.defined() ? mk.am.data_ptr<A>() : nullptr;
  if (f.am)
    for (int d = 0; d < 4; d++) f.ams[d] = mk.am.stride(d);
  f.causal = causal, f.off = off, f.scale = static_cast<A>(scale), f.p = p, f.seed = seed;
  return f;
}

// grain is at::parallel_for's grain for tasks of `work` multiply-adds
// each: every thread gets at least kMinChunk of them, so a small attention
// (a CLIP tower's 16 or 17 positions) stays on the calling thread, where
// waking a second thread costs more than it saves (BenchmarkCore at 2
// threads, 12 heads of 64, forward and backward: at 17 positions 0.24–0.26
// ms on one thread, 0.32–0.43 ms split per head; from 128 positions the
// split is about 1.6× faster).
constexpr int64_t kMinChunk = int64_t(1) << 21;

int64_t grain(int64_t work) { return std::max<int64_t>(1, (kMinChunk + work - 1) / std::max<int64_t>(work, 1)); }

template <typename S>
void forward_kernel(Args<S>& f, const at::Tensor& out, const at::Tensor& lse) {
  f.outw = out.data_ptr<S>(), f.out = f.outw;
  for (int d = 0; d < 3; d++) f.os[d] = out.stride(d);
  f.lse = lse.data_ptr<typename AccOf<S>::type>();
  const int64_t tasks = f.B * f.H * ((f.L + kRows - 1) / kRows);
  const int64_t work = std::min(kRows, f.L) * f.Sk * (f.D + f.Dv);  // per block of queries
  at::parallel_for(0, tasks, grain(work), [&](int64_t lo, int64_t hi) {
    FwdLocal<S> w(f);
    run_fwd(f, lo, hi, w);
  });
}

template <typename S>
void backward_kernel(Args<S>& f, const at::Tensor& out, const at::Tensor& lse, const at::Tensor& gout,
                     const at::Tensor& gq, const at::Tensor& gk, const at::Tensor& gv) {
  using A = typename AccOf<S>::type;
  f.out = out.data_ptr<S>();
  for (int d = 0; d < 3; d++) f.os[d] = out.stride(d), f.gs[d] = gout.stride(d);
  f.lse = lse.data_ptr<A>();
  f.gout = gout.data_ptr<S>();
  f.gq = gq.data_ptr<A>(), f.gk = gk.data_ptr<A>(), f.gv = gv.data_ptr<A>();
  // per head: q·kᵀ again, dO·vᵀ, and the dV, dQ and dK products
  const int64_t work = f.L * f.Sk * (3 * f.D + 2 * f.Dv);
  at::parallel_for(0, f.B * f.H, grain(work), [&](int64_t lo, int64_t hi) {
    BwdLocal<S> w(f);
    run_bwd(f, lo, hi, w);
  });
}

at::ScalarType acc_type(at::ScalarType st) { return st == at::kDouble ? at::kDouble : at::kFloat; }

// rows_last makes a tensor's last dimension contiguous (the kernel's one demand).
at::Tensor rows_last(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// head_major allocates (B, H, n, d) laid out as (B, n, H, d): the layout
// nn.MultiheadAttention turns back into (B, n, H·d) without a copy.
at::Tensor head_major(int64_t B, int64_t H, int64_t n, int64_t d, const at::TensorOptions& o) {
  return at::empty({B, n, H, d}, o).permute({0, 2, 1, 3});
}

std::tuple<at::Tensor, at::Tensor> run_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const Masks& mk, bool causal, int64_t off, double scale, double p,
                                               uint64_t seed) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Dv = v.size(3);
  auto out = head_major(B, H, L, Dv, q.options());
  auto lse = at::empty({B, H, L}, q.options().dtype(acc_type(q.scalar_type())));
  switch (q.scalar_type()) {
    case at::kDouble: {
      auto f = make_args<double>(q, k, v, mk, causal, off, scale, p, seed);
      forward_kernel(f, out, lse);
      break;
    }
    case at::kFloat: {
      auto f = make_args<float>(q, k, v, mk, causal, off, scale, p, seed);
      forward_kernel(f, out, lse);
      break;
    }
    case at::kBFloat16: {
      auto f = make_args<c10::BFloat16>(q, k, v, mk, causal, off, scale, p, seed);
      forward_kernel(f, out, lse);
      break;
    }
    default:
      TORCH_CHECK(false, "attention: unsupported dtype ", q.scalar_type());
  }
  return {out, lse};
}

variable_list run_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Masks& mk,
                           bool causal, int64_t off, double scale, double p, uint64_t seed, const at::Tensor& out,
                           const at::Tensor& lse, const at::Tensor& gout) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), D = q.size(3), Dv = v.size(3);
  auto ao = q.options().dtype(acc_type(q.scalar_type()));
  auto gq = at::empty({B, H, L, D}, ao);
  auto gk = at::zeros({B, H, S, D}, ao);
  auto gv = at::zeros({B, H, S, Dv}, ao);
  switch (q.scalar_type()) {
    case at::kDouble: {
      auto f = make_args<double>(q, k, v, mk, causal, off, scale, p, seed);
      backward_kernel(f, out, lse, gout, gq, gk, gv);
      break;
    }
    case at::kFloat: {
      auto f = make_args<float>(q, k, v, mk, causal, off, scale, p, seed);
      backward_kernel(f, out, lse, gout, gq, gk, gv);
      break;
    }
    case at::kBFloat16: {
      auto f = make_args<c10::BFloat16>(q, k, v, mk, causal, off, scale, p, seed);
      backward_kernel(f, out, lse, gout, gq, gk, gv);
      break;
    }
    default:
      TORCH_CHECK(false, "attention: unsupported dtype ", q.scalar_type());
  }
  const auto st = q.scalar_type();
  if (st != gq.scalar_type()) return {gq.to(st), gk.to(st), gv.to(st)};
  return {gq, gk, gv};
}

// ---- the autograd Function ----------------------------------------------------------

// The masks go in as one non-tensor argument (no gradient; libtorch 1.13's
// Function cannot take undefined tensors) and are kept in saved_data.
struct Attention : public torch::autograd::Function<Attention> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const Masks& mk, bool causal, int64_t off, double scale, double p, int64_t seed,
                               bool save) {
    at::Tensor out, lse;
    std::tie(out, lse) = run_forward(q, k, v, mk, causal, off, scale, p, static_cast<uint64_t>(seed));
    if (save) {
      ctx->save_for_backward({q, k, v, out, lse});
      if (mk.kpm.defined()) ctx->saved_data["kpm"] = mk.kpm;
      if (mk.am.defined()) ctx->saved_data["am"] = mk.am;
      ctx->saved_data["causal"] = causal;
      ctx->saved_data["off"] = off;
      ctx->saved_data["scale"] = scale;
      ctx->saved_data["p"] = p;
      ctx->saved_data["seed"] = seed;
    }
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    TORCH_CHECK(s.size() == 5, "attention: backward without saved state (the forward ran without grad)");
    auto& sd = ctx->saved_data;
    Masks mk;
    if (sd.count("kpm")) mk.kpm = sd["kpm"].toTensor();
    if (sd.count("am")) mk.am = sd["am"].toTensor();
    auto gout = grads[0];
    variable_list g(10);
    if (!gout.defined()) return g;
    gout = rows_last(gout.to(s[0].scalar_type()));
    auto gs = run_backward(s[0], s[1], s[2], mk, sd["causal"].toBool(), sd["off"].toInt(), sd["scale"].toDouble(),
                           sd["p"].toDouble(), static_cast<uint64_t>(sd["seed"].toInt()), s[3], s[4], gout);
    g[0] = gs[0], g[1] = gs[1], g[2] = gs[2];
    return g;
  }
};

// additive turns a mask into the kernel's form: float masks cast to the
// accumulation dtype, bool masks (true: masked) to 0 / −inf.
at::Tensor additive(const at::Tensor& m, at::ScalarType acc) {
  if (m.scalar_type() == at::kBool) {
    auto z = at::zeros(m.sizes(), m.options().dtype(acc));
    return z.masked_fill(m, -std::numeric_limits<double>::infinity());
  }
  TORCH_CHECK(at::isFloatingType(m.scalar_type()), "attention: masks must be bool or floating point, got ",
              m.scalar_type());
  return m.to(acc);
}

// attention is the operator. q (B, H, L, D), k (B, H, S, D), v (B, H, S, Dv);
// key_padding_mask (B, S); attn_mask broadcastable to (B, H, L, S); causal
// lets query i see keys j ≤ i + causal_offset; scale defaults to 1/√D;
// seed < 0 draws the dropout seed from the default CPU generator. It returns
// the output (B, H, L, Dv) and the rows' log-sum-exp (B, H, L), −inf where
// a row sees no key (its output is then 0).
std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const c10::optional<at::Tensor>& key_padding_mask,
                                             const c10::optional<at::Tensor>& attn_mask, bool causal,
                                             int64_t causal_offset, double dropout, c10::optional<double> scale,
                                             int64_t seed) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "attention: q, k and v must be (batch, heads, length, dim), got shapes ", q.sizes(), ", ", k.sizes(),
              ", ", v.sizes());
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), S = k.size(2);
  TORCH_CHECK(k.size(0) == B && k.size(1) == H && k.size(3) == D, "attention: k must be (", B, ", ", H, ", S, ", D,
              "), got shape ", k.sizes());
  TORCH_CHECK(v.size(0) == B && v.size(1) == H && v.size(2) == S, "attention: v must be (", B, ", ", H, ", ", S,
              ", Dv), got shape ", v.sizes());
  TORCH_CHECK(B > 0 && H > 0 && L > 0 && S > 0 && D > 0 && v.size(3) > 0, "attention: empty input of shapes ",
              q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  for (const auto* t : {&q, &k, &v}) {
    TORCH_CHECK(t->device().is_cpu(), "attention: the fused kernel runs on the CPU, got a tensor on ", t->device());
  }
  const auto st = q.scalar_type();
  TORCH_CHECK(st == at::kDouble || st == at::kFloat || st == at::kBFloat16,
              "attention: q, k and v must be float64, float32 or bfloat16, got ", st);
  TORCH_CHECK(k.scalar_type() == st && v.scalar_type() == st, "attention: q, k and v must share a dtype, got ", st,
              ", ", k.scalar_type(), ", ", v.scalar_type());
  TORCH_CHECK(dropout >= 0 && dropout < 1, "attention: dropout must be in [0, 1), got ", dropout);
  const auto acc = acc_type(st);
  Masks mk;
  if (key_padding_mask.has_value() && key_padding_mask->defined()) {
    const auto& m = *key_padding_mask;
    TORCH_CHECK(m.dim() == 2 && m.size(0) == B && m.size(1) == S, "attention: key_padding_mask must be (", B, ", ",
                S, "), got shape ", m.sizes());
    TORCH_CHECK(m.device().is_cpu(), "attention: key_padding_mask on ", m.device());
    mk.kpm = additive(m, acc).contiguous();
  }
  if (attn_mask.has_value() && attn_mask->defined()) {
    const auto& m = *attn_mask;
    TORCH_CHECK(m.dim() >= 2 && m.dim() <= 4 && m.size(-1) == S && m.size(-2) == L,
                "attention: attn_mask must broadcast to (", B, ", ", H, ", ", L, ", ", S, "), got shape ", m.sizes());
    TORCH_CHECK(m.device().is_cpu(), "attention: attn_mask on ", m.device());
    auto a = additive(m, acc);
    TORCH_CHECK(a.dim() < 3 || ((a.dim() == 3 && (a.size(0) == H || a.size(0) == 1)) ||
                                (a.dim() == 4 && (a.size(0) == B || a.size(0) == 1) &&
                                 (a.size(1) == H || a.size(1) == 1))),
                "attention: attn_mask must broadcast to (", B, ", ", H, ", ", L, ", ", S, "), got shape ", m.sizes());
    mk.am = a.expand({B, H, L, S});
  }
  const double sc = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(D));
  int64_t sd = seed;
  if (dropout > 0 && sd < 0) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    sd = static_cast<int64_t>(at::check_generator<at::CPUGeneratorImpl>(gen)->random64() >> 1);
  }
  if (dropout == 0) sd = 0;
  auto cq = rows_last(q), ck = rows_last(k), cv = rows_last(v);
  const bool grad =
      c10::GradMode::is_enabled() && (cq.requires_grad() || ck.requires_grad() || cv.requires_grad());
  auto r = Attention::apply(cq, ck, cv, mk, causal, causal_offset, sc, dropout, sd, grad);
  return {r[0], r[1]};
}

}  // namespace

TORCH_LIBRARY(torchfit_nn, m) {
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, Tensor? key_padding_mask=None, Tensor? attn_mask=None, "
      "bool causal=False, int causal_offset=0, float dropout=0.0, float? scale=None, int seed=-1) "
      "-> (Tensor, Tensor)",
      TORCH_FN(attention));
}

#include "parwidth.h"
TF_PARALLEL_WIDTH(tf_attn_parallel_width)
