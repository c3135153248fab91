// Package fused holds multi-tensor kernels: one native call where a loop of
// ATen ops would make one dispatcher call per op and per tensor (Adam and
// AdamW over all parameters). It is its own cgo package so that editing it
// does not recompile the shim (torch/internal/capi), whose tensor handles
// and error protocol it shares.
package fused

/*
// -fopenmp: libtorch's at::parallel_for runs in parallel only in a file
// compiled with it (package internal/parwidth).
#cgo CXXFLAGS: -std=c++17 -O3 -fopenmp -fPIC -Wno-deprecated-declarations -Wno-unused-parameter
#cgo CXXFLAGS: -I${SRCDIR}/../../../internal/parwidth
#cgo CPPFLAGS: -I${SRCDIR}/../capi
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++ -fopenmp
#cgo nocallback tf_fused_adam
#cgo nocallback tf_fused_isa
#include <stdlib.h>
#include "fused.h"
#include <stdint.h>
int32_t tf_fused_parallel_width(void);
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// AdamHyper mirrors tf_adam_hyper: one parameter's hyperparameters.
type AdamHyper struct {
	Decay    float64 // AdamW: p *= Decay (1 - lr·weight_decay); 1: none
	WD       float64 // Adam: g += WD·p; 0: none
	Beta1    float64
	Beta2    float64
	Eps      float64
	StepSize float64 // lr / (1 - beta1^step)
	BC2Sqrt  float64 // sqrt(1 - beta2^step)
	Maximize int32
	Lerp     int32 // 1: exp_avg.lerp_(grad, 1 - beta1) (PyTorch 2.1+); 0: mul_ then add_ (1.13)
}

// Adam runs tf_fused_adam: applied[k] reports whether params[k] had a
// gradient and was updated; supported is false when some tensor is not a
// dense contiguous float32 CPU tensor (then nothing changed). vmax is nil
// without AMSGrad. The slices hold handles (C pointers), which cgo may pass.
func Adam(params, m, v, vmax []capi.Tensor, h []AdamHyper, applied []int32) (supported bool, err error) {
	n := len(params)
	if n == 0 {
		return true, nil
	}
	var pv *C.tf_tensor
	if vmax != nil {
		pv = (*C.tf_tensor)(unsafe.Pointer(&vmax[0]))
	}
	var ok C.int32_t
	err = capi.Check(unsafe.Pointer(C.tf_fused_adam(
		(*C.tf_tensor)(unsafe.Pointer(&params[0])), (*C.tf_tensor)(unsafe.Pointer(&m[0])),
		(*C.tf_tensor)(unsafe.Pointer(&v[0])), pv, (*C.tf_adam_hyper)(unsafe.Pointer(&h[0])), C.int32_t(n),
		(*C.int32_t)(unsafe.Pointer(&applied[0])), &ok)))
	return ok != 0, err
}

// The update kernel's instruction sets, by name.
var isaNames = []string{"default", "avx2", "avx512"}

// Kernel returns the name of the update kernel in use ("avx512", "avx2"
// or "default": the best the CPU runs, unless one was forced).
func Kernel() string { return isaNames[int(C.tf_fused_isa(-1))] }

// ForceKernel selects the update kernel called name ("" selects the best
// again). It fails when the CPU cannot run it.
func ForceKernel(name string) error {
	if name == "" {
		C.tf_fused_isa(-2)
		return nil
	}
	for k, n := range isaNames {
		if n == name {
			if C.tf_fused_isa(C.int32_t(k)) < 0 {
				return fmt.Errorf("fused: this CPU cannot run the %s kernel", name)
			}
			return nil
		}
	}
	return fmt.Errorf("fused: no kernel %q (have %v)", name, isaNames)
}

// parallelWidth is the number of threads at::parallel_for runs on in this
// package's native code (parwidth.h; tested with parwidth.Check).
func parallelWidth() int32 { return int32(C.tf_fused_parallel_width()) }
