// dropout.h: the C interface of the fused dropout.
//
// The dropout itself is an operator registered with libtorch's dispatcher
// (torchfit_dropout::dropout, see dropout.cc), reached from Go through
// torch.CallOp like any ATen operator; its errors come back through the op
// shim's error protocol. This header declares the one C entry point Go
// calls directly: a check that the operator is registered. Errors follow
// the shim's convention (torch/internal/capi/capi.h): NULL on success, else
// a malloc'd "E:message" the caller frees with tfnd_free_error.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef char* tfnd_err;

// tfnd_check reports whether the operator is registered with the dispatcher
// (the static registration in dropout.cc ran) and returns its schema.
tfnd_err tfnd_check(char** schema);

void tfnd_free_error(tfnd_err e);

#ifdef __cplusplus
}
#endif
