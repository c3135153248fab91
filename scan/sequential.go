package scan

import "github.com/torchfit/torchfit/torch"

type sequential struct{}

// Sequential is the reference: exp(Δ·A) and Δ·x·B materialised for the
// whole sequence, then one step per time step in ATen ops, autograd
// through all of it (mamba-ssm's selective_scan_ref).
func Sequential() Scan { return sequential{} }

func (sequential) Name() string { return "sequential" }

func (sequential) Apply(x, delta, A, B, C, D *torch.Tensor) (y, last *torch.Tensor) {
	o := prepare("scan.Sequential", x, delta, A, B, C, D)
	h0 := torch.Zeros([]int64{o.b, o.d, o.n}, o.x.DType(), o.x.Device())
	ys, h := loop(o.x, o.dt, o.A, o.B, o.C, h0)
	y = ys.Add(o.x.Mul(o.D))
	ys.Free()
	last = h.Detach()
	h.Free()
	return o.result(y), last
}

// loop runs the recurrence from state h over x, dt (b, l, d) and B, C
// (b, l, n) one step at a time and returns C·h_t for every step (b, l, d)
// and the last state. Go references to intermediates are released as soon
// as their op has run; autograd keeps what backward needs.
func loop(x, dt, A, B, C, h *torch.Tensor) (ys, last *torch.Tensor) {
	l := x.Size(1)
	dA := dt.Unsqueeze(-1).Mul(A).Exp()                // (b, l, d, n)
	dBx := dt.Mul(x).Unsqueeze(-1).Mul(B.Unsqueeze(2)) // (b, l, d, n)
	Cs := C.Unsqueeze(-1)                              // (b, l, n, 1)
	out := make([]*torch.Tensor, l)
	for t := range l {
		a, u, c := dA.Select(1, t), dBx.Select(1, t), Cs.Select(1, t)
		ah := a.Mul(h)
		next := ah.Add(u)
		ah.Free()
		if t > 0 {
			h.Free() // the caller's initial state stays the caller's
		}
		h = next
		hc := h.Matmul(c)
		out[t] = hc.SqueezeDim(-1) // (b, d)
		hc.Free()
		a.Free()
		u.Free()
		c.Free()
	}
	dA.Free()
	dBx.Free()
	Cs.Free()
	ys = torch.Stack(out, 1)
	for _, t := range out {
		t.Free()
	}
	return ys, h
}
