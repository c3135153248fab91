// Package kernel is the fused selective scan's native code: a libtorch
// operator, torchfit_scan::selective_scan, registered with the dispatcher
// when the package is linked (scan.cc), and called through torch.CallOp.
//
// It is its own cgo package, apart from the op shim, so that its C++ builds
// (and rebuilds) alone; it uses the shim's compiler and linker flags and
// libtorch version switch.
package kernel

/*
#cgo CXXFLAGS: -std=c++17 -O3 -fopenmp-simd -fPIC -Wno-deprecated-declarations -Wno-unused-parameter
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++
#include <stdlib.h>
#include "kernel.h"
*/
import "C"

import (
	"errors"
	"strings"
	"sync"
	"unsafe"
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
	Auto   = 0 // the native kernel on the CPU, the ATen-op path elsewhere
	Native = 1 // the native kernel (CPU tensors only)
	ATen   = 2 // the same chunked algorithm in ATen ops (any device)
)

var (
	once   sync.Once
	schema string
	err    error
)

// Check reports whether the operator is registered and returns its schema.
func Check() (string, error) {
	once.Do(func() {
		var s *C.char
		if e := C.tfs_check(&s); e != nil {
			msg := C.GoString(e)
			C.tfs_free_error(e)
			err = errors.New("scan: " + strings.TrimPrefix(msg, "E:"))
			return
		}
		schema = C.GoString(s)
		C.free(unsafe.Pointer(s))
	})
	return schema, err
}
