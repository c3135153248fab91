// fused.h: multi-tensor kernels that replace a loop of ATen ops with one
// native call (package fused). Same shape as the shim's functions (capi.h):
// NULL or an error string, every exception caught.
#ifndef TORCHFIT_FUSED_H
#define TORCHFIT_FUSED_H

#include <stdint.h>

#include "capi.h"

#ifdef __cplusplus
extern "C" {
#endif

// Per-parameter hyperparameters of tf_fused_adam, computed in double as
// torch.optim.Adam/AdamW computes its Python floats.
typedef struct {
  double decay;      // AdamW: p *= decay (1 - lr·weight_decay); 1: none
  double wd;         // Adam: g += wd·p; 0: none
  double beta1, beta2, eps;
  double step_size;  // lr / (1 - beta1^step)
  double bc2_sqrt;   // sqrt(1 - beta2^step)
  int32_t maximize;
  int32_t lerp;      // 1: exp_avg.lerp_(grad, 1 - beta1) (PyTorch 2.1 and later);
                     // 0: exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1) (1.13, 2.0)
} tf_adam_hyper;

// tf_fused_adam applies one Adam/AdamW step to the n parameters params[k]
// that have a gradient (applied[k] = 1; 0 for those without), with state
// exp_avg[k], exp_avg_sq[k] and, with AMSGrad, max_exp_avg_sq[k]
// (max_exp_avg_sq NULL: no AMSGrad). It applies only when every tensor
// involved is dense, float32, on the CPU and contiguous, with a
// parameter's tensors of equal sizes: otherwise *supported = 0 and nothing
// changes. Each element is updated with the float32 operations, in the
// order and with the roundings, of PyTorch's single-tensor loop (its 1.13
// or its 2.1+ first moment, by h[k].lerp); the work is split over
// libtorch's threads.
tf_err tf_fused_adam(const tf_tensor* params, const tf_tensor* exp_avg, const tf_tensor* exp_avg_sq,
                     const tf_tensor* max_exp_avg_sq, const tf_adam_hyper* h, int32_t n, int32_t* applied,
                     int32_t* supported);

// The instruction sets of the update kernel.
enum { TF_FUSED_ISA_DEFAULT = 0, TF_FUSED_ISA_AVX2 = 1, TF_FUSED_ISA_AVX512 = 2 };

// tf_fused_isa: force >= 0 selects that kernel (-1 when the CPU cannot
// run it); -1 reports the kernel in use; -2 selects the best one again.
// Returns the kernel in use.
int32_t tf_fused_isa(int32_t force);

#ifdef __cplusplus
}
#endif
#endif
