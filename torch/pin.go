package torch

var (
	opPinMemory = defOp("aten::pin_memory", "")
	opIsPinned  = defOp("aten::is_pinned", "")
)

// errNoCUDAPin is the message PinMemory returns on a CPU-only build.
const errNoCUDAPin = "pinned memory needs CUDA (torch.CUDAAvailable() is false: " +
	"this libtorch build or machine has no CUDA device); keep the tensor in ordinary memory"

// PinMemory returns a copy of the CPU tensor t in page-locked (pinned) host
// memory, from which ToAsync to a CUDA device is a non-blocking copy that
// overlaps with compute. t is left as it is; a tensor already pinned is
// returned as a new reference to the same data.
//
// Pinning needs the CUDA runtime: when CUDAAvailable is false PinMemory
// returns an *Error without calling libtorch. Errors raised by libtorch (t
// not on the CPU, out of pinned memory) are returned, not panicked.
func (t *Tensor) PinMemory() (*Tensor, error) {
	t.handle("PinMemory")
	if !CUDAAvailable() {
		return nil, &Error{Op: "PinMemory", Msg: errNoCUDAPin}
	}
	var p *Tensor
	if err := Try(func() {
		var c call
		p = c.t(t).none().out1(opPinMemory)
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// IsPinned reports whether t lives in pinned host memory. It is always false
// when CUDA is not available (nothing can be pinned then).
func (t *Tensor) IsPinned() bool {
	t.handle("IsPinned")
	if !CUDAAvailable() {
		return false
	}
	var c call
	return c.t(t).none().outScalar(opIsPinned).I != 0
}
