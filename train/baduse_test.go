package train_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// linearTrainer is a trainer of a 4 → 1 linear layer on fields x and y.
func linearTrainer(t *testing.T) *train.Trainer {
	t.Helper()
	l := nn.NewLinear(4, 1, true)
	tr, err := train.New(l, nn.NewSGD(nn.Parameters(l), nn.SGDConfig{LR: 0.1}), func(b *data.Batch) *torch.Tensor {
		return torch.MSELoss(l.Forward(b.Field("x")), b.Field("y"), torch.ReduceMean)
	}, train.Config{MicroBatch: 2, Accum: 2})
	require.NoError(t, err)
	return tr
}

func xyBatch(n int64) *data.Batch {
	return &data.Batch{Fields: map[string]*torch.Tensor{"x": torch.Randn([]int64{n, 4}), "y": torch.Randn([]int64{n, 1})}}
}

// New refuses what cannot train: it accepted a nil model, optimizer or
// loss (a nil dereference at the first step), a NaN or negative ClipNorm
// (no clipping, silently) and an unknown precision (a misleading
// autocast error at the first step).
func TestNewRejectsBadArguments(t *testing.T) {
	l := nn.NewLinear(4, 1, true)
	opt := nn.NewSGD(nn.Parameters(l), nn.SGDConfig{LR: 0.1})
	loss := func(b *data.Batch) *torch.Tensor { return l.Forward(b.Field("x")).Mean() }
	ok := train.Config{MicroBatch: 2, Accum: 1}
	for _, tc := range []struct {
		name  string
		model nn.Module
		opt   nn.Optimizer
		loss  func(*data.Batch) *torch.Tensor
		cfg   func(c train.Config) train.Config
	}{
		{name: "nil model", opt: opt, loss: loss},
		{name: "nil optimizer", model: l, loss: loss},
		{name: "nil loss", model: l, opt: opt},
		{name: "nan clip", model: l, opt: opt, loss: loss, cfg: func(c train.Config) train.Config { c.ClipNorm = math.NaN(); return c }},
		{name: "negative clip", model: l, opt: opt, loss: loss, cfg: func(c train.Config) train.Config { c.ClipNorm = -1; return c }},
		{name: "unknown precision", model: l, opt: opt, loss: loss, cfg: func(c train.Config) train.Config { c.Precision = amp.Precision("fp8"); return c }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			if tc.cfg != nil {
				cfg = tc.cfg(cfg)
			}
			tr, err := train.New(tc.model, tc.opt, tc.loss, cfg)
			require.Error(t, err)
			require.Nil(t, tr)
		})
	}
}

// Step is a per-step boundary: a batch it cannot read is an error, not a
// panic (a nil batch was a nil dereference, a freed field a *torch.Error
// panic).
func TestStepBadBatchIsError(t *testing.T) {
	tr := linearTrainer(t)
	freed := xyBatch(4)
	freed.Fields["x"].Free()
	freed.Fields["y"].Free()
	for _, tc := range []struct {
		name string
		b    *data.Batch
	}{
		{"nil", nil},
		{"freed fields", freed},
		{"no fields", &data.Batch{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { _, err = tr.Step(tc.b) })
			require.Error(t, err)
		})
	}
	b := xyBatch(4)
	defer b.Free()
	_, err := tr.Step(b)
	require.NoError(t, err)
}

// Fit returns an error for missing arguments; it dereferenced them.
func TestFitNilArguments(t *testing.T) {
	tr := linearTrainer(t)
	nilLoader := func(*data.State) (train.Loader, error) { return nil, nil }
	for _, tc := range []struct {
		name      string
		tr        *train.Trainer
		newLoader func(*data.State) (train.Loader, error)
	}{
		{"nil trainer", nil, nilLoader},
		{"nil newLoader", tr, nil},
		{"nil loader", tr, nilLoader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() {
				_, err = train.Fit(context.Background(), tc.tr, tc.newLoader, train.FitConfig{Epochs: 1})
			})
			require.Error(t, err)
		})
	}
	// Negative counts did nothing and returned no error.
	for _, fc := range []train.FitConfig{{Epochs: -1}, {Epochs: 1, MaxSteps: -5}, {Epochs: 1, CheckpointEvery: -1}} {
		_, err := train.Fit(context.Background(), tr, nilLoader, fc)
		require.ErrorContains(t, err, "negative", "%+v", fc)
	}
}

// FindBatchSize's batch function may not be nil nor give a nil batch.
func TestFindBatchSizeNilBatch(t *testing.T) {
	tr := linearTrainer(t)
	for _, tc := range []struct {
		name  string
		batch func(int) (*data.Batch, error)
	}{
		{"nil function", nil},
		{"nil batch", func(int) (*data.Batch, error) { return nil, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { _, err = tr.FindBatchSize(8, tc.batch) })
			require.Error(t, err)
		})
	}
}

// Accum left zero is no accumulation, as a PyTorch loop without it; a
// negative one is refused.
func TestNewAccumDefault(t *testing.T) {
	l := nn.NewLinear(4, 1, true)
	defer nn.Free(l)
	opt := nn.NewSGD(nn.Parameters(l), nn.SGDConfig{LR: 0.1})
	defer opt.Free()
	loss := func(b *data.Batch) *torch.Tensor { return l.Forward(b.Field("x")).Mean() }
	tr, err := train.New(l, opt, loss, train.Config{MicroBatch: 2})
	require.NoError(t, err)
	require.Equal(t, 1, tr.Accum())
	_, err = train.New(l, opt, loss, train.Config{MicroBatch: 2, Accum: -1})
	require.Error(t, err)
}
