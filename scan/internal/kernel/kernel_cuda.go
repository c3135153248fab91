//go:build cuda

package kernel

// The CUDA kernels (cuda.cc, scan_cuda.cu). nvcc compiles scan_cuda.cu into
// cudabin/scan_cuda.fatbin (make scan-kernel, which every make target that
// builds with the cuda tag runs first; make -s env too); the fat binary is
// embedded here and handed to cuda.cc when the package initialises. A
// cuda-tagged build without it (go build without make) still builds and
// runs: the operator then takes the ATen-op path on CUDA, and
// TestCUDAImage fails.

/*
#cgo CXXFLAGS: -DTF_CUDA -DPYTORCH_C10_DRIVER_API_SUPPORTED=1
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed -ldl
#include <stdlib.h>
#include "kernel.h"
*/
import "C"

import (
	"embed"
	"errors"
	"strings"
)

//go:embed cudabin
var cudabin embed.FS

// imageName is the fat binary's path in cudabin.
const imageName = "cudabin/scan_cuda.fatbin"

// fatbin is the embedded fat binary, nil when the build had none.
var fatbin, _ = cudabin.ReadFile(imageName)

// CUDABuilt says whether the CUDA kernel is compiled in (the cuda tag).
const CUDABuilt = true

// CUDAImage is the CUDA kernels' fat binary as embedded: nil when the build
// had none (make scan-kernel did not run), and then the kernel does not run.
func CUDAImage() []byte { return fatbin }

func init() {
	if len(fatbin) == 0 {
		return
	}
	p := C.CBytes(fatbin)
	defer C.free(p)
	if e := C.tfs_cuda_set_image(p, C.size_t(len(fatbin))); e != nil {
		msg := C.GoString(e)
		C.tfs_free_error(e)
		imageErr = errors.New("scan: " + strings.TrimPrefix(msg, "E:"))
	}
}
