package torch

import (
	"runtime"
	"unsafe"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// For other cgo packages of torchfit (package distributed: c10d collectives), which
// hand tensors to their own C++ translation units. The handle is the shim's
// tf_tensor (torch/internal/capi/capi.h): a pointer to a struct holding one
// at::Tensor (shim.h: struct tf_tensor_s).

// CHandle returns t's tf_tensor handle, borrowed: it stays valid while t is
// neither freed nor collected (keep t alive, runtime.KeepAlive, until the C
// call returns). It panics with ErrFreed when t was released.
func (t *Tensor) CHandle() unsafe.Pointer {
	h := t.handle("CHandle")
	runtime.KeepAlive(t)
	return unsafe.Pointer(h)
}

// FromCHandle takes ownership of a tf_tensor handle that C++ code created
// (new tf_tensor_s{...}): the Tensor frees it, and it joins the calling
// thread's scope as any new tensor does. nil gives nil.
func FromCHandle(p unsafe.Pointer) *Tensor {
	return wrapNew(capi.Tensor(p))
}

// WrapError returns an *Error for op that wraps err (errors.Is and
// errors.As reach err through it), for code outside this package whose
// tensor work fails with an error of its own and must panic as tensor math
// does (a collective inside an optimizer's Step, say). nil gives nil.
func WrapError(op string, err error) *Error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Msg: err.Error(), wrapped: err}
}
