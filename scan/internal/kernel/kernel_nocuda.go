//go:build !cuda

package kernel

// CUDABuilt says whether the CUDA kernel is compiled in (the cuda tag).
const CUDABuilt = false

// CUDAImage is the CUDA kernels' fat binary: none without the cuda tag.
func CUDAImage() []byte { return nil }
