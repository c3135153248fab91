package torch

import (
	"runtime"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// SetRequiresGrad turns gradient recording on or off for a leaf tensor.
func (t *Tensor) SetRequiresGrad(on bool) *Tensor {
	err := capi.SetRequiresGrad(t.handle("SetRequiresGrad"), on)
	runtime.KeepAlive(t)
	check("SetRequiresGrad", err)
	return t
}

// Backward computes the gradients of t (a scalar) with respect to the leaves
// that require grad, accumulating into their Grad.
func (t *Tensor) Backward() { t.BackwardWith(nil, false, false) }

// BackwardWith is Backward with an explicit output gradient (needed for
// non-scalar t), retain_graph and create_graph.
func (t *Tensor) BackwardWith(grad *Tensor, retainGraph, createGraph bool) {
	var g capi.Tensor
	if grad != nil {
		g = grad.handle("Backward")
	}
	err := capi.Backward(t.handle("Backward"), g, retainGraph, createGraph)
	runtime.KeepAlive(t)
	runtime.KeepAlive(grad)
	check("Backward", err)
}

// Grad returns a new reference to t's accumulated gradient, or nil when none.
func (t *Tensor) Grad() *Tensor {
	h, err := capi.Grad(t.handle("Grad"))
	runtime.KeepAlive(t)
	check("Grad", err)
	return wrapNew(h)
}

// SetGrad replaces t's gradient; nil sets it to none (PyTorch's zero_grad(set_to_none=True)).
func (t *Tensor) SetGrad(g *Tensor) {
	var gh capi.Tensor
	if g != nil {
		gh = g.handle("SetGrad")
	}
	err := capi.SetGrad(t.handle("SetGrad"), gh)
	runtime.KeepAlive(t)
	runtime.KeepAlive(g)
	check("SetGrad", err)
}

// ZeroGrad sets the gradients of ts to none.
func ZeroGrad(ts []*Tensor) {
	for _, t := range ts {
		t.SetGrad(nil)
	}
}

// Gradients computes d(outputs)/d(inputs) without touching .grad, like
// torch.autograd.grad. gradOutputs may be nil for scalar outputs. Inputs
// that do not influence the outputs get nil.
func Gradients(outputs, inputs, gradOutputs []*Tensor, retainGraph, createGraph bool) []*Tensor {
	hs := func(ts []*Tensor) []capi.Tensor {
		out := make([]capi.Tensor, len(ts))
		for k, t := range ts {
			if t != nil {
				out[k] = t.handle("Gradients")
			}
		}
		return out
	}
	res, err := capi.AutogradGrad(hs(outputs), hs(gradOutputs), hs(inputs), retainGraph, createGraph, true)
	runtime.KeepAlive(outputs)
	runtime.KeepAlive(inputs)
	runtime.KeepAlive(gradOutputs)
	check("Gradients", err)
	out := make([]*Tensor, len(res))
	for k, h := range res {
		out[k] = wrapNew(h)
	}
	return out
}

// NoGrad runs fn with gradient recording off on this goroutine. It locks the
// goroutine to its OS thread for fn's extent (grad mode is per thread in
// libtorch) and restores the previous mode afterwards, also on panic.
func NoGrad(fn func()) { withGradMode(false, fn) }

// EnableGrad runs fn with gradient recording on (inside a NoGrad, say).
func EnableGrad(fn func()) { withGradMode(true, fn) }

func withGradMode(on bool, fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	set := 0
	if on {
		set = 1
	}
	prev, err := capi.GradMode(set)
	check("NoGrad", err)
	defer func() {
		p := 0
		if prev {
			p = 1
		}
		capi.GradMode(p)
	}()
	fn()
}

// GradEnabled reports the calling thread's grad mode. Outside NoGrad and
// EnableGrad the goroutine may move threads, so only the answer inside
// those regions is meaningful.
func GradEnabled() bool {
	on, _ := capi.GradMode(-1)
	return on
}

// InferenceMode runs fn in libtorch's inference mode (no autograd
// bookkeeping at all; tensors created inside can never require grad).
func InferenceMode(fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g, err := capi.InferenceModeEnter()
	check("InferenceMode", err)
	defer capi.InferenceModeExit(g)
	fn()
}
