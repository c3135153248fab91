// Package kernel is the fused selective scan's native code: a libtorch
// operator, torchfit_scan::selective_scan, registered with the dispatcher
// when the package is linked (scan.cc), and called through torch.CallOp.
// With the cuda build tag, cuda.cc adds a CUDA kernel (scan_cuda.cu, a fat
// binary nvcc makes and kernel_cuda.go embeds); see the scan package doc.
//
// It is its own cgo package, apart from the op shim, so that its C++ builds
// (and rebuilds) alone; it uses the shim's compiler and linker flags and
// libtorch version switch.
package kernel

/*
// -fopenmp: libtorch's at::parallel_for runs in parallel only in a file
// compiled with it (package internal/parwidth).
#cgo CXXFLAGS: -std=c++17 -O3 -fopenmp -fPIC -Wno-deprecated-declarations -Wno-unused-parameter
#cgo CXXFLAGS: -I${SRCDIR}/../../../internal/parwidth
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++ -fopenmp
#include <stdlib.h>
#include "kernel.h"
#include <stdint.h>
int32_t tf_scan_parallel_width(void);
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/torchfit/torchfit/torch"
)

// Op is the operator's name for torch.CallOp. Its schema:
//
//	selective_scan(Tensor x, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor D,
//	               int chunk=64, int impl=0) -> (Tensor, Tensor)
//
// returning y and the last state.
const Op = "torchfit_scan::selective_scan"

// Implementations (the op's impl argument).
const (
	Auto   = 0 // the native kernel where there is one for the case, else the ATen-op path
	Native = 1 // the native kernel: the CPU's, or CUDA's with the cuda tag (float32, ≤ 256 states); an error elsewhere
	ATen   = 2 // the same chunked algorithm in ATen ops (any device)
)

// What runs the scan (Implementation's answers).
const (
	UsesATen = 0 // the chunked algorithm in ATen ops
	UsesCPU  = 1 // the CPU kernel (scan.cc)
	UsesCUDA = 2 // the CUDA kernel (cuda.cc, scan_cuda.cu; the cuda tag)
)

var (
	once     sync.Once
	schema   string
	err      error
	imageErr error // kernel_cuda.go: the fat binary could not be handed over
)

// Implementation reports what runs the scan (UsesATen, UsesCPU or UsesCUDA)
// for inputs of dtype dt on dev with state states per channel and the op's
// impl argument: the operator's own decision (torchfit_scan::implementation).
// Float16 and bfloat16 inputs are computed in float32 and answer as float32.
// It needs no device: a CUDA device's answer is what its tensors would get.
func Implementation(dev torch.Device, dt torch.DType, state int64, impl int) (uses int, err error) {
	if _, err := Check(); err != nil {
		return 0, err
	}
	err = torch.Try(func() {
		uses = int(torch.CallOp("torchfit_scan::implementation", "", dev.String(), dt, state, impl)[0].(int64))
	})
	if err != nil {
		return 0, fmt.Errorf("scan: which implementation for %v %v with %d states: %w", dt, dev, state, err)
	}
	return uses, nil
}

// Check reports whether the operator is registered and returns its schema.
func Check() (string, error) {
	once.Do(func() {
		if imageErr != nil {
			err = imageErr
			return
		}
		if schema, err = torch.OpSchema(Op, ""); err != nil {
			err = fmt.Errorf("scan: %w", err)
		}
	})
	return schema, err
}

// parallelWidth is the number of threads at::parallel_for runs on in this
// package's native code (parwidth.h; tested with parwidth.Check).
func parallelWidth() int32 { return int32(C.tf_scan_parallel_width()) }
