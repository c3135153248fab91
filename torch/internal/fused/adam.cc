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

// update runs elements [lo, hi) of one parameter. Several ISA versions are
// compiled; the loader picks the best the CPU has (fmaf is one instruction
// there, a correct but slow library call in the default version).
__attribute__((target_clones("avx512f", "avx2,fma", "default")))
void update(const Param& q, int64_t lo, int64_t hi) {
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
  at::parallel_for(0, start[np], 32768, [&](int64_t lo, int64_t hi) {
    int32_t k = static_cast<int32_t>(std::upper_bound(start.begin(), start.end(), lo) - start.begin()) - 1;
    for (; k < np && start[k] < hi; k++) {
      const int64_t a = std::max(lo, start[k]) - start[k];
      const int64_t b = std::min(hi, start[k + 1]) - start[k];
      if (a < b) update(ps[k], a, b);
    }
  });
  TF_CATCH
}

}  // extern "C"
