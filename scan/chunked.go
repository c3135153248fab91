package scan

import "github.com/torchfit/torchfit/torch"

type chunked struct{ k int64 }

// Chunked runs the reference loop in chunks of k steps (0: DefaultChunk),
// each chunk under torch.Recompute: the forward keeps only the state at
// each chunk's start, and backward recomputes the chunk it is in.
func Chunked(k int) Scan { return chunked{chunkOr(k)} }

func (c chunked) Name() string { return "chunked" }

func (c chunked) Apply(x, delta, A, B, C, D *torch.Tensor) (y, last *torch.Tensor) {
	o := prepare("scan.Chunked", x, delta, A, B, C, D)
	h := torch.Zeros([]int64{o.b, o.d, o.n}, o.x.DType(), o.x.Device())
	var ys []*torch.Tensor
	for t0 := int64(0); t0 < o.l; t0 += c.k {
		k := min(c.k, o.l-t0)
		xc, dtc := o.x.Narrow(1, t0, k), o.dt.Narrow(1, t0, k)
		Bc, Cc := o.B.Narrow(1, t0, k), o.C.Narrow(1, t0, k)
		out := torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
			ys, hl := loop(in[0], in[1], in[2], in[3], in[4], in[5])
			return []*torch.Tensor{ys, hl}
		}, xc, dtc, o.A, Bc, Cc, h) // A as an input (not captured): its gradient flows back through the graph
		h.Free()
		xc.Free()
		dtc.Free()
		Bc.Free()
		Cc.Free()
		ys = append(ys, out[0])
		h = out[1]
	}
	cy := torch.Cat(ys, 1)
	for _, t := range ys {
		t.Free()
	}
	y = cy.Add(o.x.Mul(o.D))
	cy.Free()
	last = h.Detach()
	h.Free()
	return o.result(y), last
}
