// The per-op floor: libtorch called from C++ with no binding at all.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// tf_opfloor times n calls of at::add(x, y) (inplace 0; each result
// released) or x.add_(y) (inplace 1) on 1-element float32 tensors of the
// device (device_type: c10's, 0 CPU, 1 CUDA), and sets *ns to the best of
// runs repetitions, nanoseconds per call. On CUDA each repetition ends
// with a copy of x to the host, which waits for the device: a repetition
// takes as long as the host's calls or the device's kernels, whichever is
// slower, as a training step does. Returns NULL, or an error message the
// caller frees.
char* tf_opfloor(int32_t device_type, int32_t device_index, int32_t inplace, int64_t n, int32_t runs, double* ns);

#ifdef __cplusplus
}
#endif
