package dropout

/*
// -fopenmp: libtorch's at::parallel_for runs in parallel only in a file
// compiled with it (package internal/parwidth).
#cgo CXXFLAGS: -std=c++17 -O3 -fopenmp -fPIC -Wno-deprecated-declarations -Wno-unused-parameter -I${SRCDIR}/../../../internal/philox
#cgo CXXFLAGS: -I${SRCDIR}/../../../internal/parwidth
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++ -fopenmp
#include <stdlib.h>
#include <stdint.h>
int32_t tf_dropout_parallel_width(void);
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/torchfit/torchfit/torch"
)

// Op is the operator's name for torch.CallOp. Its schema:
//
//	dropout(Tensor input, float p, bool train) -> Tensor
//
// ATen's dropout's: with train false, p = 0 or no elements it returns the
// input itself; p outside [0, 1] is an error.
const Op = "torchfit_dropout::dropout"

// ApplyOp is the kernel, without autograd: x times the mask of the stream
// (seed, offset) for drop probability p, scaled by 1/(1−p), as a new
// contiguous tensor (CPU only). The operator's forward is ApplyOp(x, seed,
// 0, p) and its backward ApplyOp(grad, seed, 0, p). Its schema:
//
//	apply(Tensor x, int seed, int offset, float p) -> Tensor
//
// The seed is a uint64 passed as its int64 bits.
const ApplyOp = "torchfit_dropout::apply"

// SeedOp draws a seed from the default CPU generator as Op does for each
// call (tests use it to know the seed of the next call). Its schema:
//
//	draw_seed() -> int
const SeedOp = "torchfit_dropout::draw_seed"

var (
	once   sync.Once
	schema string
	err    error
)

// Check reports whether the operator is registered and returns its schema.
func Check() (string, error) {
	once.Do(func() {
		if schema, err = torch.OpSchema(Op, ""); err != nil {
			err = fmt.Errorf("dropout: %w", err)
		}
	})
	return schema, err
}

// parallelWidth is the number of threads at::parallel_for runs on in this
// package's native code (parwidth.h; tested with parwidth.Check).
func parallelWidth() int32 { return int32(C.tf_dropout_parallel_width()) }
