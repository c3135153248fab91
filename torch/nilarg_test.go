package torch

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch/internal/schema"
)

// The arguments a nil *Tensor may not fill, read from schemas as libtorch
// prints them.
func TestRequiredTensorArguments(t *testing.T) {
	for _, tc := range []struct {
		schema string
		want   []string
	}{
		{"aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor", []string{"input", "weight"}},
		{"aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)", []string{"self", "other"}},
		{"aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=[1, 1], SymInt[2] padding=[0, 0]) -> Tensor", []string{"input", "weight"}},
		{"aten::gelu(Tensor self, *, str approximate='none, really') -> Tensor", []string{"self"}},
		{"aten::cat(Tensor[] tensors, int dim=0) -> Tensor", nil},
	} {
		t.Run(tc.schema, func(t *testing.T) {
			s, err := schema.Parse(tc.schema)
			require.NoError(t, err)
			var got []string
			for _, a := range s.Args {
				if requiredTensor(a) {
					got = append(got, a.Name)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// A nil *Tensor where an operator needs a tensor names the argument, not
// libtorch's "Expected Tensor but got None".
func TestNilTensorArgument(t *testing.T) {
	x := Ones([]int64{2, 3})
	defer x.Free()
	w := Ones([]int64{4, 3})
	defer w.Free()
	for _, tc := range []struct {
		name string
		fn   func()
		msg  string // "" for no error
	}{
		{"input", func() { Linear(nil, w, nil) }, "aten::linear: argument 0 (input) is a nil *Tensor"},
		{"weight", func() { Linear(x, nil, nil) }, "aten::linear: argument 1 (weight) is a nil *Tensor"},
		{"optional bias", func() { Linear(x, w, nil) }, ""},
		{"method argument", func() { x.Add(nil) }, "argument 1 (other) is a nil *Tensor"},
		{"receiver", func() { (*Tensor)(nil).Add(x) }, "argument 0 (self) is a nil *Tensor"},
		{"CallOp", func() { CallOp("aten::mul", "Tensor", x, (*Tensor)(nil)) }, "aten::mul: argument 1 (other) is a nil *Tensor"},
		{"metadata", func() { (*Tensor)(nil).Shape() }, "nil tensor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := TidyErr(func() error { tc.fn(); return nil })
			if tc.msg == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.msg)
			require.NotContains(t, err.Error(), "Expected Tensor but got None")
			require.ErrorIs(t, err, ErrNilTensor)
			var te *Error
			require.True(t, errors.As(err, &te))
		})
	}
}
