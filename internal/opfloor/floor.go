package opfloor

/*
#cgo CXXFLAGS: -std=c++17 -O2 -fPIC -Wno-deprecated-declarations -Wno-unused-parameter
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++
#include <stdlib.h>
#include "floor.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/torchfit/torchfit/torch"
)

// ErrArg is a call with a count below 1 or a device torch cannot use
// here (a CUDA device on a machine without one).
var ErrArg = errors.New("opfloor: invalid argument")

// Op is the operation timed: at::add(x, y) with its result released, or
// x.add_(y).
type Op int

const (
	Add        Op = iota // x + y, a new tensor each call (torch's (*Tensor).Add then Free)
	AddInPlace           // x += y ((*Tensor).AddIn)
)

func (o Op) String() string {
	if o == AddInPlace {
		return "x.add_(y)"
	}
	return "x + y"
}

// PerCall returns the best of runs repetitions of n calls of op on
// 1-element float32 tensors of dev, called from C++ with no binding:
// nanoseconds per call. On CUDA each repetition ends with a wait for the
// device, so the figure is the slower of the host's calls and the
// device's kernels. It runs on torch.Main()'s thread, as torchfit's ops
// do, at the caller's thread count.
func PerCall(dev torch.Device, op Op, n, runs int) (float64, error) {
	if n < 1 || runs < 1 {
		return 0, fmt.Errorf("%w: n %d, runs %d", ErrArg, n, runs)
	}
	if err := torch.CheckDevice(dev); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrArg, err)
	}
	var ns C.double
	var msg *C.char
	inplace := C.int32_t(0)
	if op == AddInPlace {
		inplace = 1
	}
	idx := -1 // the CPU
	if dev.IsCUDA() {
		idx = max(dev.Index, 0)
	}
	torch.Main().Do(func() {
		msg = C.tf_opfloor(C.int32_t(dev.Type), C.int32_t(idx), inplace, C.int64_t(n), C.int32_t(runs), &ns)
	})
	if msg != nil {
		defer C.free(unsafe.Pointer(msg))
		return 0, errors.New(C.GoString(msg))
	}
	return float64(ns), nil
}
