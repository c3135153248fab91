// kernel.h: the C interface of the fused selective-scan kernel.
//
// The kernel itself is an operator registered with libtorch's dispatcher
// (torchfit_scan::selective_scan, see scan.cc), reached from Go through
// torch.CallOp like any ATen operator; its errors come back through the op
// shim's error protocol. This header declares the one C entry point Go calls
// directly: a check that the operator is registered. Errors follow the
// shim's convention (torch/internal/capi/capi.h): NULL on success, else a
// malloc'd "E:message" the caller frees with tfs_free_error.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef char* tfs_err;

// tfs_check reports whether the operator is registered with the dispatcher
// (the static registration in scan.cc ran) and returns its schema.
tfs_err tfs_check(char** schema);

void tfs_free_error(tfs_err e);

#ifdef __cplusplus
}
#endif
