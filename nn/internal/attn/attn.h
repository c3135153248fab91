// attn.h: the C interface of the fused attention kernel.
//
// The kernel is an operator registered with libtorch's dispatcher
// (torchfit_nn::attention, see attn.cc), reached from Go through
// torch.CallOp like any ATen operator; its errors come back through the op
// shim's error protocol. This header declares the one C entry point Go
// calls directly: a check that the operator is registered. Errors follow
// the shim's convention (torch/internal/capi/capi.h): NULL on success, else
// a malloc'd "E:message" the caller frees with tfa_free_error.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef char* tfa_err;

// tfa_check reports whether the operator is registered with the dispatcher
// (the static registration in attn.cc ran) and returns its schema.
tfa_err tfa_check(char** schema);

void tfa_free_error(tfa_err e);

#ifdef __cplusplus
}
#endif
