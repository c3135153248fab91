package scan

import (
	"github.com/torchfit/torchfit/scan/internal/kernel"
	"github.com/torchfit/torchfit/torch"
)

type fused struct {
	k    int64
	impl int
}

// Fused is the native kernel with chunks of k steps (0: DefaultChunk): see
// the package doc. On CUDA tensors it runs the same chunked algorithm in
// ATen ops.
func Fused(k int) Scan { return fused{chunkOr(k), kernel.Auto} }

func (f fused) Name() string { return "fused" }

func (f fused) Apply(x, delta, A, B, C, D *torch.Tensor) (y, last *torch.Tensor) {
	if _, err := kernel.Check(); err != nil {
		panic(&torch.Error{Op: "scan.Fused", Msg: err.Error()})
	}
	check("scan.Fused", x, delta, A, B, C, D) // the same checks and messages as the others
	out := torch.CallOp(kernel.Op, "", x, delta, A, B, C, D, f.k, f.impl)
	return out[0].(*torch.Tensor), out[1].(*torch.Tensor)
}
