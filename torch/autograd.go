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
//
// Like PyTorch's grad setter it refuses (panics with *Error) a gradient
// whose shape, dtype or device differs from t's: an optimizer would
// otherwise step with a gradient that does not match its parameter.
func (t *Tensor) SetGrad(g *Tensor) {
	var gh capi.Tensor
	if g != nil {
		gh = g.handle("SetGrad")
		checkGradLike(t, g)
	}
	err := capi.SetGrad(t.handle("SetGrad"), gh)
	runtime.KeepAlive(t)
	runtime.KeepAlive(g)
	check("SetGrad", err)
}

// checkGradLike panics with *Error unless g can be t's gradient (one
// Describe of each: ZeRO and the offload set every parameter's gradient
// each step).
func checkGradLike(t, g *Tensor) {
	ti, tshape := t.info("SetGrad")
	gi, gshape := g.info("SetGrad")
	if ti.NDim != gi.NDim || tshape != gshape {
		throwf("SetGrad", "assigned gradient has shape %v, the tensor %v", g.Shape(), t.Shape())
	}
	if ti.DType != gi.DType {
		throwf("SetGrad", "assigned gradient has dtype %v, the tensor %v", DType(gi.DType), DType(ti.DType))
	}
	if ti.DeviceType != gi.DeviceType || ti.DeviceIndex != gi.DeviceIndex {
		throwf("SetGrad", "assigned gradient is on %v, the tensor on %v", g.Device(), t.Device())
	}
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
//
// A nil output or input, or gradOutputs of another length than outputs
// (when given), panics with *Error; a nil element of gradOutputs is None.
func Gradients(outputs, inputs, gradOutputs []*Tensor, retainGraph, createGraph bool) []*Tensor {
	if len(gradOutputs) > 0 && len(gradOutputs) != len(outputs) {
		throwf("Gradients", "%d gradOutputs for %d outputs", len(gradOutputs), len(outputs))
	}
	hs := func(ts []*Tensor, nilOK bool) []capi.Tensor {
		out := make([]capi.Tensor, len(ts))
		for k, t := range ts {
			if t != nil || !nilOK {
				out[k] = t.handle("Gradients")
			}
		}
		return out
	}
	res, err := capi.AutogradGrad(hs(outputs, false), hs(gradOutputs, true), hs(inputs, false), retainGraph, createGraph, true)
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
