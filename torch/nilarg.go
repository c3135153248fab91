package torch

import (
	"errors"
	"fmt"

	"github.com/torchfit/torchfit/torch/internal/capi"
	"github.com/torchfit/torchfit/torch/internal/schema"
)

// ErrNilTensor is wrapped by the error raised when a nil *Tensor is used
// where a tensor is required: as the receiver of a method that reads it, or
// as an operator's argument that its schema does not let be None (a batch
// field that is not there, say). The error names the operator's argument.
var ErrNilTensor = errors.New("nil *Tensor")

// requiredTensor says whether a schema argument must be a tensor:
// "Tensor" or an aliased "Tensor(a!)", not "Tensor?" nor a list.
func requiredTensor(a schema.Arg) bool {
	t := a.Type
	return t.Base == "Tensor" && !t.Optional && !t.List
}

// checkNils panics with an *Error wrapping ErrNilTensor when a position in
// nils (a nil *Tensor passed, which goes to libtorch as None) is one where
// the operator's schema requires a tensor: libtorch would say only
// "Expected Tensor but got None", without the argument.
func (d *opDef) checkNils(op capi.Op, nils uint32) {
	d.argsOnce.Do(func() {
		if s, err := schema.Parse(capi.Schema(op)); err == nil {
			d.args = s.Args // a schema it cannot read: libtorch's own message
		}
	})
	for k, a := range d.args {
		if k >= maxArgs {
			break
		}
		if nils&(1<<k) != 0 && requiredTensor(a) {
			panic(&Error{Op: d.name, Msg: fmt.Sprintf("argument %d (%s) is a nil *Tensor; the operator needs a tensor there (a missing batch field or an unset parameter?)", k, a.Name),
				wrapped: ErrNilTensor})
		}
	}
}
