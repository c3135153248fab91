package data

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/torchfit/torchfit/torch"
)

func TestBatchField(t *testing.T) {
	x, y, lx := torch.Ones([]int64{2, 3}), torch.Zeros([]int64{2}), torch.FromSlice([]int64{3, 2}, []int64{2})
	defer freeAll(x, y, lx)
	b := &Batch{Fields: map[string]*torch.Tensor{"x": x, "y": y}, Lengths: map[string]*torch.Tensor{"x": lx}}
	for _, tc := range []struct {
		name  string
		b     *Batch
		get   func(*Batch) *torch.Tensor
		want  *torch.Tensor
		err   string
		field FieldError
	}{
		{name: "field", b: b, get: func(b *Batch) *torch.Tensor { return b.Field("x") }, want: x},
		{name: "lengths", b: b, get: func(b *Batch) *torch.Tensor { return b.Length("x") }, want: lx},
		{name: "misspelt field", b: b, get: func(b *Batch) *torch.Tensor { return b.Field("xx") },
			err:   `Batch.Field: batch has no field "xx" (its fields: "x", "y")`,
			field: FieldError{Name: "xx", Have: []string{"x", "y"}}},
		{name: "no lengths", b: b, get: func(b *Batch) *torch.Tensor { return b.Length("y") },
			err:   `Batch.Length: batch has no lengths for field "y" (it has lengths for: "x")`,
			field: FieldError{Name: "y", Lengths: true, Have: []string{"x"}}},
		{name: "empty batch", b: &Batch{}, get: func(b *Batch) *torch.Tensor { return b.Field("x") },
			err:   `Batch.Field: batch has no field "x" (its fields: none)`,
			field: FieldError{Name: "x", Have: []string{}}},
		{name: "nil batch", b: nil, get: func(b *Batch) *torch.Tensor { return b.Length("x") },
			err:   `Batch.Length: batch has no lengths for field "x" (it has lengths for: none)`,
			field: FieldError{Name: "x", Lengths: true, Have: []string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *torch.Tensor
			err := torch.Try(func() { got = tc.get(tc.b) })
			if tc.err == "" {
				require.NoError(t, err)
				require.Same(t, tc.want, got)
				return
			}
			require.EqualError(t, err, tc.err)
			require.ErrorIs(t, err, ErrNoField)
			var fe *FieldError
			require.True(t, errors.As(err, &fe))
			require.Equal(t, tc.field, *fe)
		})
	}
}
