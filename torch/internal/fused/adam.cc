// adam.cc: Adam and AdamW over all parameters in one call.
//
// PyTorch 1.13's CPU AdamW (the default, single-tensor path) runs, per
// parameter, nine ATen ops, each a pass over memory:
//
//   param.mul_(1 - lr * weight_decay)                       AdamW
//   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
//
// Here each element goes through the same float32 operations in one pass,
// rounding as those kernels do (measured against them on this libtorch's
// AVX2 kernels, element by element): a Python float becomes a float32
// scalar; add with alpha is fma(other, alpha, self); addcmul is
// fma(value·t1, t2, self); addcdiv is self + (value·t1)/t2; nothing else
// is fused (the pragma below keeps the compiler from contracting).
#include <ATen/Parallel.h>

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

// update_body runs elements [lo, hi) of one parameter. It is compiled
// three times, once per instruction set (update_avx512, update_avx2,
// update_default: fmaf is one instruction in the first two, a correct but
// slow library call in the last); tf_fused_isa picks the best the CPU has
// at start-up, or the one a test forces. All three compute the same
// roundings.
static inline __attribute__((always_inline)) void update_body(const Param& q, int64_t lo, int64_t hi) {
  const tf_adam_hyper& h = *q.h;
  const float decay = static_cast<float>(h.decay);
  const float wd = static_cast<float>(h.wd);
  const float b1 = static_cast<float>(h.beta1);
  const float a1 = static_cast<float>(1 - h.beta1);
  const float b2 = static_cast<float>(h.beta2);
  const float a2 = static_cast<float>(1 - h.beta2);
  const float eps = static_cast<float>(h.eps);
  const float bc2 = static_cast<float>(h.bc2_sqrt);
  const float neg_step = static_cast<float>(-h.step_size);
  const bool decoupled = h.decay != 1;
  const bool coupled = h.wd != 0;
  for (int64_t i = lo; i < hi; i++) {
    float g = q.g[i];
    if (h.maximize) g = -g;
    float p = q.p[i];
    if (coupled) g = std::fmaf(p, wd, g);  // grad.add(param, alpha=weight_decay)
    if (decoupled) p = p * decay;          // param.mul_(1 - lr * weight_decay)
    float m = q.m[i] * b1;
    m = std::fmaf(g, a1, m);  // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    float v = q.v[i] * b2;
    v = std::fmaf(a2 * g, g, v);  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    q.m[i] = m;
    q.v[i] = v;
    float s = v;
    if (q.vmax) {
      s = std::fmax(q.vmax[i], v);  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
      q.vmax[i] = s;
    }
    const float denom = std::sqrt(s) / bc2 + eps;  // (sqrt() / bias_correction2_sqrt).add_(eps)
    q.p[i] = p + neg_step * m / denom;              // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

__attribute__((target("avx512f"))) void update_avx512(const Param& q, int64_t lo, int64_t hi) { update_body(q, lo, hi); }
__attribute__((target("avx2,fma"))) void update_avx2(const Param& q, int64_t lo, int64_t hi) { update_body(q, lo, hi); }
void update_default(const Param& q, int64_t lo, int64_t hi) { update_body(q, lo, hi); }

using UpdateFn = void (*)(const Param&, int64_t, int64_t);
const UpdateFn kernels[] = {update_default, update_avx2, update_avx512};

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

UpdateFn kernel() {
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
  const UpdateFn update_fn = kernel();
  at::parallel_for(0, start[np], 32768, [&](int64_t lo, int64_t hi) {
    int32_t k = static_cast<int32_t>(std::upper_bound(start.begin(), start.end(), lo) - start.begin()) - 1;
    for (; k < np && start[k] < hi; k++) {
      const int64_t a = std::max(lo, start[k]) - start[k];
      const int64_t b = std::min(hi, start[k + 1]) - start[k];
      if (a < b) update_fn(ps[k], a, b);
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
