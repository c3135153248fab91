// adam.cc: Adam and AdamW over all parameters in one call.
//
// PyTorch's CPU AdamW (the default, single-tensor path) runs, per
// parameter, up to nine ATen ops, each a pass over memory:
//
//   param.mul_(1 - lr * weight_decay)                       AdamW
//   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)         1.13 and 2.0
//   exp_avg.lerp_(grad, 1 - beta1)                          2.1 and later
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
//
// Here each element goes through the same float32 operations in one call
// (two passes over each block of memory, below), rounding as those kernels
// do (measured against them on this libtorch's AVX2 kernels, element by
// element): a Python float becomes a float32
// scalar; add with alpha is fma(other, alpha, self); addcmul is
// fma(value·t1, t2, self); addcdiv is self + (value·t1)/t2; lerp with a
// weight w is fma(w, end - self, self) for |w| < 0.5, else fma(w - 1,
// end - self, end) (ATen's lerp_vec; its scalar tail contracts to the
// same); nothing else is fused (the pragma below keeps the compiler from
// contracting).
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/sqrt.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "fused.h"
#include "shim.h"

#pragma GCC optimize("fp-contract=off")

namespace {

struct Param {
  float* p;
  const float* g;
  float* m;
  float* v;
  float* vmax;
  int64_t n;
  const tf_adam_hyper* h;
};

// usable reports whether t is a dense contiguous float32 CPU tensor with
// like's number of elements.
bool usable(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat && t.device().is_cpu() &&
         t.is_contiguous() && t.numel() == like.numel();
}

// The update of one element is the float32 operations below, in two
// stages over blocks of at most kBlock elements (which may span
// parameters): moments_body updates the moments and leaves what the
// denominator takes the root of in a block buffer, at::sqrt_ takes the
// roots there, and apply_body updates the parameters. The roots are
// libtorch's own: where libtorch has MKL (PyTorch 2.x pip wheels) its float
// sqrt is MKL's vsSqrt, which does not always round correctly and whose
// roundings the kernel could not compute itself; and a square root inside
// the loop would keep GCC from vectorising it (it sets errno, and cgo
// refuses -fno-math-errno): the one-pass update with std::sqrt this
// replaced took 7.4 ms where the two stages take 3.2 on libtorch 1.13
// (BenchmarkAdamWStep, 2.1 M parameters, AVX-512).
//
// Each body is compiled three times, once per instruction set (avx512,
// avx2, default: fmaf is one instruction in the first two, a correct but
// slow library call in the last); tf_fused_isa picks the best the CPU has
// at start-up, or the one a test forces. All three compute the same
// roundings.
constexpr int64_t kBlock = 8192;

// Consts: one parameter's hyperparameters as the float32 scalars the ATen
// kernels take them as.
struct Consts {
  float decay, wd, b1, a1, lerp_coeff, b2, a2, eps, bc2, neg_step;
  bool lerp, lerp_small, decoupled, coupled, maximize;
};

static inline __attribute__((always_inline)) Consts consts(const tf_adam_hyper& h) {
  Consts c;
  c.decay = static_cast<float>(h.decay);
  c.wd = static_cast<float>(h.wd);
  c.b1 = static_cast<float>(h.beta1);
  c.a1 = static_cast<float>(1 - h.beta1);
  c.lerp = h.lerp != 0;
  c.lerp_small = std::fabs(c.a1) < 0.5f;  // at::native::is_lerp_weight_small
  c.lerp_coeff = c.lerp_small ? c.a1 : c.a1 - 1.0f;
  c.b2 = static_cast<float>(h.beta2);
  c.a2 = static_cast<float>(1 - h.beta2);
  c.eps = static_cast<float>(h.eps);
  c.bc2 = static_cast<float>(h.bc2_sqrt);
  c.neg_step = static_cast<float>(-h.step_size);
  c.decoupled = h.decay != 1;
  c.coupled = h.wd != 0;
  c.maximize = h.maximize != 0;
  return c;
}

// The general loops below (moment, step) handle every option, each a
// branch on a loop-invariant condition; GCC does not vectorise them. The
// common case (no maximize, no coupled weight decay, no amsgrad: AdamW and
// plain Adam as the recipes use them) runs fast loops instead, where the
// two choices left (lerp or mul/add, lerp's small weight) are template
// arguments and everything else is straight-line arithmetic on restrict
// pointers, which GCC vectorises at -O3 (fused.go). Vector lanes compute
// the same IEEE operations as the scalar code (fma and division are
// correctly rounded; nothing is contracted or reordered), so the
// roundings are the same whatever the vector width. The fast loops
// multiply every parameter by decay, 1 without decoupled weight decay:
// x · 1 is x for every float (a signalling NaN aside, which comes out
// quiet).

// moment updates exp_avg, exp_avg_sq and max_exp_avg_sq of element i and
// returns what the denominator takes the square root of.
static inline __attribute__((always_inline)) float moment(const Consts& c, const Param& q, int64_t i) {
  float g = q.g[i];
  if (c.maximize) g = -g;
  if (c.coupled) g = __builtin_fmaf(q.p[i], c.wd, g);  // grad.add(param, alpha=weight_decay)
  float m = q.m[i];
  if (c.lerp) {
    // exp_avg.lerp_(grad, 1 - beta1): ATen's lerp_vec, fmadd(w, end - self,
    // self) or fmadd(w - 1, end - self, end)
    m = __builtin_fmaf(c.lerp_coeff, g - m, c.lerp_small ? m : g);
  } else {
    m = __builtin_fmaf(g, c.a1, m * c.b1);  // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
  }
  float v = q.v[i] * c.b2;
  v = __builtin_fmaf(c.a2 * g, g, v);  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
  q.m[i] = m;
  q.v[i] = v;
  if (q.vmax) {
    v = __builtin_fmaxf(q.vmax[i], v);  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
    q.vmax[i] = v;
  }
  return v;
}

// step updates the parameter of element i, root the square root of what
// moment returned.
static inline __attribute__((always_inline)) void step(const Consts& c, const Param& q, int64_t i, float root) {
  float p = q.p[i];
  if (c.decoupled) p = p * c.decay;          // param.mul_(1 - lr * weight_decay)
  const float denom = root / c.bc2 + c.eps;  // (sqrt() / bias_correction2_sqrt).add_(eps)
  q.p[i] = p + c.neg_step * q.m[i] / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
}

// fast reports whether a parameter's update can run the fast loops.
static inline __attribute__((always_inline)) bool fast(const Consts& c, const Param& q) {
  return !c.maximize && !c.coupled && q.vmax == nullptr;
}

// fast_loop is the common case's stage one: the moments, and what the
// denominator takes the root of, into s.
template <bool kLerp, bool kSmall>
static inline __attribute__((always_inline)) void fast_loop(const Consts& c, int64_t lo, int64_t hi,
                                                            const float* __restrict gp, float* __restrict mp,
                                                            float* __restrict vp, float* __restrict s) {
  const float lc = c.lerp_coeff, a1 = c.a1, b1 = c.b1, b2 = c.b2, a2 = c.a2;
  for (int64_t i = lo; i < hi; i++) {
    const float g = gp[i];
    const float m0 = mp[i];
    const float m = kLerp ? __builtin_fmaf(lc, g - m0, kSmall ? m0 : g) : __builtin_fmaf(g, a1, m0 * b1);
    const float v = __builtin_fmaf(a2 * g, g, vp[i] * b2);
    mp[i] = m;
    vp[i] = v;
    s[i - lo] = v;
  }
}

// moments_body runs stage one on elements [lo, hi) of one parameter, into
// s[0, hi - lo).
static inline __attribute__((always_inline)) void moments_body(const Param& q, int64_t lo, int64_t hi, float* s) {
  const Consts c = consts(*q.h);
  if (!fast(c, q)) {
    for (int64_t i = lo; i < hi; i++) s[i - lo] = moment(c, q, i);
  } else if (!c.lerp) {
    fast_loop<false, false>(c, lo, hi, q.g, q.m, q.v, s);
  } else if (c.lerp_small) {
    fast_loop<true, true>(c, lo, hi, q.g, q.m, q.v, s);
  } else {
    fast_loop<true, false>(c, lo, hi, q.g, q.m, q.v, s);
  }
}

// apply_body runs stage two on elements [lo, hi) of one parameter, r[0,
// hi - lo) the square roots.
static inline __attribute__((always_inline)) void apply_body(const Param& q, int64_t lo, int64_t hi, const float* r) {
  const Consts c = consts(*q.h);
  if (!fast(c, q)) {
    for (int64_t i = lo; i < hi; i++) step(c, q, i, r[i - lo]);
    return;
  }
  float* __restrict p = q.p;
  const float* __restrict mp = q.m;
  const float* __restrict rr = r;
  const float decay = c.decay, bc2 = c.bc2, eps = c.eps, ns = c.neg_step;
  for (int64_t i = lo; i < hi; i++) p[i] = p[i] * decay + ns * mp[i] / (rr[i - lo] / bc2 + eps);
}

using MomentsFn = void (*)(const Param&, int64_t, int64_t, float*);
using ApplyFn = void (*)(const Param&, int64_t, int64_t, const float*);

#define TF_FUSED_KERNEL(name, target)                                                                               \
  target void moments_##name(const Param& q, int64_t lo, int64_t hi, float* s) { moments_body(q, lo, hi, s); }     \
  target void apply_##name(const Param& q, int64_t lo, int64_t hi, const float* r) { apply_body(q, lo, hi, r); }

TF_FUSED_KERNEL(avx512, __attribute__((target("avx512f"))))
TF_FUSED_KERNEL(avx2, __attribute__((target("avx2,fma"))))
TF_FUSED_KERNEL(default, )
#undef TF_FUSED_KERNEL

struct Kernel {
  MomentsFn moments;
  ApplyFn apply;
};
const Kernel kernels[] = {
    {moments_default, apply_default}, {moments_avx2, apply_avx2}, {moments_avx512, apply_avx512}};

// runs reports whether the CPU runs kernel isa.
bool runs(int32_t isa) {
  __builtin_cpu_init();
  switch (isa) {
    case TF_FUSED_ISA_DEFAULT:
      return true;
    case TF_FUSED_ISA_AVX2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case TF_FUSED_ISA_AVX512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
}

int32_t best() {
  for (int32_t isa = TF_FUSED_ISA_AVX512; isa > TF_FUSED_ISA_DEFAULT; isa--)
    if (runs(isa)) return isa;
  return TF_FUSED_ISA_DEFAULT;
}

std::atomic<int32_t> current{-1};

const Kernel& kernel() {
  int32_t isa = current.load(std::memory_order_relaxed);
  if (isa < 0) {
    isa = best();
    current.store(isa, std::memory_order_relaxed);
  }
  return kernels[isa];
}

}  // namespace

extern "C" {

tf_err tf_fused_adam(const tf_tensor* params, const tf_tensor* exp_avg, const tf_tensor* exp_avg_sq,
                     const tf_tensor* max_exp_avg_sq, const tf_adam_hyper* h, int32_t n, int32_t* applied,
                     int32_t* supported) {
  TF_TRY
  *supported = 0;
  std::vector<Param> ps;
  std::vector<at::Tensor> grads;  // references kept for the update
  ps.reserve(n);
  grads.reserve(n);
  for (int32_t k = 0; k < n; k++) {
    applied[k] = 0;
    const at::Tensor& p = tf::unwrap(params[k]);
    if (!p.defined()) return nullptr;
    at::Tensor g = p.grad();
    if (!g.defined()) continue;
    const at::Tensor& m = tf::unwrap(exp_avg[k]);
    const at::Tensor& v = tf::unwrap(exp_avg_sq[k]);
    if (!usable(p, p) || !usable(g, p) || !usable(m, p) || !usable(v, p)) return nullptr;
    Param q{};
    if (max_exp_avg_sq) {
      const at::Tensor& vm = tf::unwrap(max_exp_avg_sq[k]);
      if (!usable(vm, p)) return nullptr;
      q.vmax = vm.data_ptr<float>();
    }
    q.p = p.data_ptr<float>();
    q.g = g.data_ptr<float>();
    q.m = m.data_ptr<float>();
    q.v = v.data_ptr<float>();
    q.n = p.numel();
    q.h = &h[k];
    ps.push_back(q);
    grads.push_back(std::move(g));
    applied[k] = 1;
  }
  *supported = 1;
  const int32_t np = static_cast<int32_t>(ps.size());
  std::vector<int64_t> start(np + 1, 0);  // element offsets of the parameters, end to end
  for (int32_t k = 0; k < np; k++) start[k + 1] = start[k] + ps[k].n;
  // One range over every element of every parameter, split over the
  // threads: small parameters share a chunk, large ones are split.
  const Kernel& fn = kernel();
  // Each chunk runs in blocks of at most kBlock elements, both stages
  // over a block before the next.
  at::parallel_for(0, start[np], 32768, [&](int64_t lo, int64_t hi) {
    float buf[kBlock];
    int32_t first = static_cast<int32_t>(std::upper_bound(start.begin(), start.end(), lo) - start.begin()) - 1;
    for (int64_t b0 = lo; b0 < hi; b0 += kBlock) {
      const int64_t b1 = std::min(hi, b0 + kBlock);
      while (start[first + 1] <= b0) first++;
      // each calls f(parameter, from, to, its part of buf) for the
      // parameters' elements [from, to) in the block [b0, b1)
      auto each = [&](auto f) {
        for (int32_t k = first; k < np && start[k] < b1; k++) {
          const int64_t a = std::max(b0, start[k]) - start[k];
          const int64_t b = std::min(b1, start[k + 1]) - start[k];
          if (a < b) f(ps[k], a, b, buf + (start[k] + a - b0));
        }
      };
      each([&](const Param& q, int64_t a, int64_t b, float* s) { fn.moments(q, a, b, s); });
      at::Tensor t = at::from_blob(buf, {b1 - b0}, at::TensorOptions().dtype(at::kFloat));
      at::sqrt_(t);  // exp_avg_sq.sqrt(), as libtorch takes it
      each([&](const Param& q, int64_t a, int64_t b, float* r) { fn.apply(q, a, b, r); });
    }
  });
  TF_CATCH
}

int32_t tf_fused_isa(int32_t force) {
  if (force >= 0) {
    if (force > TF_FUSED_ISA_AVX512 || !runs(force)) return -1;
    current.store(force, std::memory_order_relaxed);
    return force;
  }
  if (force == -2) current.store(best(), std::memory_order_relaxed);
  kernel();
  return current.load(std::memory_order_relaxed);
}

}  // extern "C"

#include "parwidth.h"
TF_PARALLEL_WIDTH(tf_fused_parallel_width)
