package scan

import "github.com/torchfit/torchfit/torch"

type logDepth struct{ k int64 }

// LogDepth computes each chunk of k steps (0: DefaultChunk) with a
// Hillis–Steele inclusive scan of the pairs (exp(Δ_t·A), Δ_t·x_t·B_t)
// under (a₁, b₁)∘(a₂, b₂) = (a₁a₂, a₂b₁ + b₂): ⌈log₂k⌉ rounds of ops over
// the whole chunk, then the chunk's states from its starting state; chunks
// follow one another. Each round's tensors are kept for backward.
func LogDepth(k int) Scan { return logDepth{chunkOr(k)} }

func (s logDepth) Name() string { return "parallel" }

func (s logDepth) Apply(x, delta, A, B, C, D *torch.Tensor) (y, last *torch.Tensor) {
	o := prepare("scan.LogDepth", x, delta, A, B, C, D)
	h := torch.Zeros([]int64{o.b, o.d, o.n}, o.x.DType(), o.x.Device())
	var ys []*torch.Tensor
	for t0 := int64(0); t0 < o.l; t0 += s.k {
		k := min(s.k, o.l-t0)
		var yc *torch.Tensor
		torch.Tidy(func() {
			dtc := o.dt.Narrow(1, t0, k)
			a := dtc.Unsqueeze(-1).Mul(o.A).Exp()                                                   // (b, k, d, n)
			b := dtc.Mul(o.x.Narrow(1, t0, k)).Unsqueeze(-1).Mul(o.B.Narrow(1, t0, k).Unsqueeze(2)) // (b, k, d, n)
			for off := int64(1); off < k; off *= 2 {
				aHi, aLo := a.Narrow(1, off, k-off), a.Narrow(1, 0, k-off)
				b = torch.Cat([]*torch.Tensor{b.Narrow(1, 0, off), aHi.Mul(b.Narrow(1, 0, k-off)).Add(b.Narrow(1, off, k-off))}, 1)
				a = torch.Cat([]*torch.Tensor{a.Narrow(1, 0, off), aHi.Mul(aLo)}, 1)
			}
			// a_t = Π_{j≤t} exp(Δ_j·A), b_t = h_t from a zero start.
			hs := a.Mul(h.Unsqueeze(1)).Add(b)                                       // (b, k, d, n)
			yc = hs.Matmul(o.C.Narrow(1, t0, k).Unsqueeze(-1)).SqueezeDim(-1).Keep() // (b, k, d)
			next := hs.Select(1, k-1).Keep()
			h.Free()
			h = next
		})
		ys = append(ys, yc)
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
