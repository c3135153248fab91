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
//
// The per-step slices come from one unbind per tensor, not a select per
// step: each select's backward would materialise a zero gradient of the
// whole (b, l, d, n) tensor, O(L²) work in all.
func loop(x, dt, A, B, C, h *torch.Tensor) (ys, last *torch.Tensor) {
	l := x.Size(1)
	dA := chain(dt.Unsqueeze(-1), func(t *torch.Tensor) *torch.Tensor { return t.Mul(A) }, (*torch.Tensor).Exp) // (b, l, d, n)
	bs := B.Unsqueeze(2)
	dBx := chain(dt.Mul(x), func(t *torch.Tensor) *torch.Tensor { return t.Unsqueeze(-1) }, func(t *torch.Tensor) *torch.Tensor { return t.Mul(bs) }) // (b, l, d, n)
	bs.Free()
	Cs := C.Unsqueeze(-1) // (b, l, n, 1)
	as, us, cs := unbind(dA, 1), unbind(dBx, 1), unbind(Cs, 1)
	dA.Free()
	dBx.Free()
	Cs.Free()
	out := make([]*torch.Tensor, l)
	for t := range l {
		ah := as[t].Mul(h)
		next := ah.Add(us[t])
		ah.Free()
		if t > 0 {
			h.Free() // the caller's initial state stays the caller's
		}
		h = next
		hc := h.Matmul(cs[t])
		out[t] = hc.SqueezeDim(-1) // (b, d)
		hc.Free()
		as[t].Free()
		us[t].Free()
		cs[t].Free()
	}
	ys = torch.Stack(out, 1)
	for _, t := range out {
		t.Free()
	}
	return ys, h
}

// unbind splits t along dim into views, one autograd node for all.
func unbind(t *torch.Tensor, dim int64) []*torch.Tensor {
	return torch.CallOp("aten::unbind", "int", t, dim)[0].([]*torch.Tensor)
}

// chain applies fns in turn to t, releasing each intermediate as soon as the
// next op has run (autograd keeps what backward needs; a Go reference held
// to the end of the scope would keep a whole (b, l, d, n) tensor alive).
func chain(t *torch.Tensor, fns ...func(*torch.Tensor) *torch.Tensor) *torch.Tensor {
	for _, f := range fns {
		next := f(t)
		t.Free()
		t = next
	}
	return t
}
