// kernel.h: the C interface of the fused selective-scan kernel.
//
// The kernel itself is an operator registered with libtorch's dispatcher
// (torchfit_scan::selective_scan, see scan.cc), reached from Go through
// torch.CallOp like any ATen operator; its errors come back through the op
// shim's error protocol, and Check looks its schema up with torch.OpSchema.
// This header declares what the cuda build's Go side calls directly. Errors
// follow the shim's convention (torch/internal/capi/capi.h): NULL on
// success, else a malloc'd "E:message" the caller frees with tfs_free_error.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef char* tfs_err;

void tfs_free_error(tfs_err e);

// ---- the CUDA kernel (cuda build tag) ----

// The most states per channel the CUDA kernel takes (32 lanes × 8 per lane);
// larger states run the ATen-op path.
#define TFS_CUDA_MAX_STATE 256

// tfs_cuda_args is the one argument of every CUDA kernel (scan_cuda.cu),
// passed by value: float32, contiguous, all on one device. Forward reads
// x..Dv and writes y, last and (when not null) starts; backward reads
// x..Dv, starts and gy, uses hs as scratch (one chunk's states,
// min(K, L) × B × D × N) and writes gx and gdt, and adds into gA, gB, gC
// and gD, which it expects zeroed.
typedef struct {
  const float *x, *dt, *A, *Bm, *Cm, *Dv;  // (B, L, D) ×2, (D, N), (B, L, N) ×2, (D)
  float *y, *last, *starts;                // (B, L, D), (B, D, N), (B, nc, D, N)
  const float* gy;                         // (B, L, D)
  float *gx, *gdt, *gA, *gB, *gC, *gD, *hs;
  int64_t B, L, D, N, K, nc;  // batch, length, channels, state, chunk, chunks
} tfs_cuda_args;

// tfs_cuda_set_image hands the kernels' fat binary (embedded by the Go
// package) to cuda.cc, which copies it and loads it on each device at first
// use. Defined only with the cuda build tag.
tfs_err tfs_cuda_set_image(const void* image, size_t len);

// tfs_cuda_ready is nonzero once cuda.cc has the fat binary: the CUDA
// kernel is used only then (scan.cc's choice). Defined in scan.cc.
extern int tfs_cuda_ready;

#ifdef __cplusplus
}
#endif
