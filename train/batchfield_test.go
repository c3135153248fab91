package train_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// A field misspelt in a loss function is the step's error, naming the
// field: with Batch.Field, the field and those the batch has; indexing
// Fields, the operator's argument that got nil.
func TestStepMissingField(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    func(*data.Batch) *torch.Tensor
		msg  string
		is   error
	}{
		{"Field", func(b *data.Batch) *torch.Tensor { return b.Field("inputs") },
			`batch has no field "inputs" (its fields: "x", "y")`, data.ErrNoField},
		{"Fields map", func(b *data.Batch) *torch.Tensor { return b.Fields["inputs"] },
			"aten::linear: argument 0 (input) is a nil *Tensor", torch.ErrNilTensor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			torch.ManualSeed(0)
			m := nn.NewLinear(4, 1, true)
			defer nn.Free(m)
			opt := nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.1})
			defer opt.Free()
			tr, err := train.New(m, opt, func(b *data.Batch) *torch.Tensor {
				return torch.MSELoss(m.Forward(tc.x(b)), b.Field("y"), torch.ReduceMean)
			}, train.Config{MicroBatch: 4, Accum: 1, Device: torch.CPU})
			require.NoError(t, err)
			b := &data.Batch{Fields: map[string]*torch.Tensor{
				"x": torch.Randn([]int64{4, 4}).Keep(), "y": torch.Randn([]int64{4, 1}).Keep()}}
			defer b.Free()
			_, err = tr.Step(b)
			require.ErrorContains(t, err, tc.msg)
			require.ErrorIs(t, err, tc.is)
			var te *torch.Error
			require.True(t, errors.As(err, &te))
		})
	}
}
