// dropout.h: the C interface of the fused dropout.
//
// The dropout itself is an operator registered with libtorch's dispatcher
// (torchfit_nn::dropout, see dropout.cc), reached from Go through
// torch.CallOp like any ATen operator; its errors come back through the op
// shim's error protocol. This header declares the one C entry point Go
// calls directly: a check that the operator is registered. Errors follow
// the shim's convention (torch/internal/capi/capi.h): NULL on success, else
// a malloc'd "E:message" the caller frees with tfd_free_error.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef char* tfd_err;

// tfd_check reports whether the operator is registered with the dispatcher
// (the static registration in dropout.cc ran) and returns its schema.
tfd_err tfd_check(char** schema);

void tfd_free_error(tfd_err e);

#ifdef __cplusplus
}
#endif
