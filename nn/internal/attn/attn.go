package attn

/*
// -fopenmp: libtorch's at::parallel_for runs in parallel only in a file
// compiled with it (package internal/parwidth).
#cgo CXXFLAGS: -std=c++17 -O3 -fopenmp -fPIC -Wno-deprecated-declarations -Wno-unused-parameter
#cgo CXXFLAGS: -I${SRCDIR}/../../../internal/parwidth
#cgo CXXFLAGS: -I${SRCDIR}/../../../internal/philox
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++ -fopenmp
#include <stdlib.h>
#include <stdint.h>
int32_t tf_attn_parallel_width(void);
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/torchfit/torchfit/torch"
)

// Op is the operator's name for torch.CallOp. Its schema:
//
//	attention(Tensor q, Tensor k, Tensor v, Tensor? key_padding_mask=None,
//	          Tensor? attn_mask=None, bool causal=False, int causal_offset=0,
//	          float dropout=0.0, float? scale=None, int seed=-1) -> (Tensor, Tensor)
//
// returning the output and the rows' log-sum-exp (no gradient).
const Op = "torchfit_nn::attention"

// Opts are Attention's optional arguments.
type Opts struct {
	// KeyPaddingMask (N, S): bool (true: ignore that key) or float (added).
	KeyPaddingMask *torch.Tensor
	// AttnMask broadcastable to (N, heads, L, S) from (L, S), (heads, L, S)
	// or (N or 1, heads or 1, L, S): bool (true: masked) or float (added).
	AttnMask *torch.Tensor
	// Causal lets query i see keys j ≤ i + CausalOffset only (0: triu(1),
	// PyTorch's is_causal; S−L: the queries are the last L of S positions).
	Causal       bool
	CausalOffset int64
	// Dropout is the probability of dropping an attention weight, in [0, 1).
	Dropout float64
	// Scale multiplies q·kᵀ; 0 means 1/√D.
	Scale float64
	// Seed is the dropout's Philox seed; 0 draws one from the default CPU
	// generator.
	Seed int64
}

// Attention attends q (N, H, L, D) to k (N, H, S, D) and v (N, H, S, Dv)
// on the CPU: it returns the output (N, H, L, Dv), laid out as (N, L, H,
// Dv) so that a transpose(1, 2) and reshape to (N, L, H·Dv) copy nothing,
// and the rows' log-sum-exp (N, H, L), float32 or float64. It panics with
// *torch.Error on bad shapes, dtypes or devices.
func Attention(q, k, v *torch.Tensor, o Opts) (out, lse *torch.Tensor) {
	if _, err := Check(); err != nil {
		panic(&torch.Error{Op: "attn.Attention", Msg: err.Error()})
	}
	var scale any
	if o.Scale != 0 {
		scale = o.Scale
	}
	seed := o.Seed
	if seed == 0 {
		seed = -1
	}
	var kpm, am any
	if o.KeyPaddingMask != nil {
		kpm = o.KeyPaddingMask
	}
	if o.AttnMask != nil {
		am = o.AttnMask
	}
	r := torch.CallOp(Op, "", q, k, v, kpm, am, o.Causal, o.CausalOffset, o.Dropout, scale, seed)
	return r[0].(*torch.Tensor), r[1].(*torch.Tensor)
}

// Supports reports whether the kernel takes tensors of dtype dt on dev.
func Supports(dev torch.Device, dt torch.DType) bool {
	return dev == torch.CPU && (dt == torch.Float32 || dt == torch.Float64 || dt == torch.BFloat16)
}

var (
	once   sync.Once
	schema string
	err    error
)

// Check reports whether the operator is registered and returns its schema.
func Check() (string, error) {
	once.Do(func() {
		if schema, err = torch.OpSchema(Op, ""); err != nil {
			err = fmt.Errorf("attn: %w", err)
		}
	})
	return schema, err
}

// parallelWidth is the number of threads at::parallel_for runs on in this
// package's native code (parwidth.h; tested with parwidth.Check).
func parallelWidth() int32 { return int32(C.tf_attn_parallel_width()) }
