package amp_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
)

// Options that cannot work panic with *torch.Error; they were taken, and a
// NaN or negative scale multiplied every loss.
func TestGradScalerBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    amp.ScalerOptions
	}{
		{"nan init", amp.ScalerOptions{InitScale: math.NaN()}},
		{"negative init", amp.ScalerOptions{InitScale: -1}},
		{"infinite init", amp.ScalerOptions{InitScale: math.Inf(1)}},
		{"growth below 1", amp.ScalerOptions{GrowthFactor: 0.5}},
		{"growth 1", amp.ScalerOptions{GrowthFactor: 1}},
		{"infinite growth", amp.ScalerOptions{GrowthFactor: math.Inf(1)}},
		{"backoff 1", amp.ScalerOptions{BackoffFactor: 1}},
		{"backoff above 1", amp.ScalerOptions{BackoffFactor: 3}},
		{"negative backoff", amp.ScalerOptions{BackoffFactor: -0.5}},
		{"nan backoff", amp.ScalerOptions{BackoffFactor: math.NaN()}},
		{"negative interval", amp.ScalerOptions{GrowthInterval: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := torch.Try(func() { amp.NewGradScaler(torch.CPU, tc.o) })
			var te *torch.Error
			require.True(t, errors.As(err, &te), "%v", err)
		})
	}
	s := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{InitScale: 1024, GrowthFactor: 4, BackoffFactor: 0.25, GrowthInterval: 1})
	require.Equal(t, 1024.0, s.ScaleValue())
}

// LoadState refuses values no scaler can hold and keeps its own.
func TestGradScalerLoadStateBadValues(t *testing.T) {
	s := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{InitScale: 1024})
	for _, tc := range []struct {
		name         string
		scale, track float64
	}{
		{"nan scale", math.NaN(), 0},
		{"zero scale", 0, 0},
		{"negative scale", -4, 0},
		{"infinite scale", math.Inf(1), 0},
		{"negative tracker", 8, -1},
		{"fractional tracker", 8, 2.5},
		{"nan tracker", 8, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, s.LoadState(map[string]float64{"scale": tc.scale, "growth_tracker": tc.track}))
			require.Equal(t, map[string]float64{"scale": 1024, "growth_tracker": 0}, pick(s.State(), "scale", "growth_tracker"))
		})
	}
	require.NoError(t, s.LoadState(map[string]float64{"scale": 8, "growth_tracker": 3}))
	require.Equal(t, map[string]float64{"scale": 8, "growth_tracker": 3}, pick(s.State(), "scale", "growth_tracker"))
}

func pick(m map[string]float64, keys ...string) map[string]float64 {
	out := map[string]float64{}
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

// sliceOpt is an optimizer of a type == cannot compare.
type sliceOpt []*torch.Tensor

func (o sliceOpt) Parameters() []*torch.Tensor { return o }
func (o sliceOpt) Step()                       {}

// The scaler tells optimizers apart by ==: one that cannot be compared is
// refused with a *torch.Error naming its type (it was Go's runtime error
// on the second optimizer call of an iteration), while the calls that
// only look a record up pass over it.
func TestGradScalerRefusesIncomparableOptimizer(t *testing.T) {
	p := torch.Ones([]int64{2}, torch.Float32).Keep()
	defer p.Free()
	for _, tc := range []struct {
		name string
		call func(s *amp.GradScaler, o amp.Optimizer)
	}{
		{"unscale", func(s *amp.GradScaler, o amp.Optimizer) { s.Unscale(o) }},
		{"step", func(s *amp.GradScaler, o amp.Optimizer) { s.Step(o) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{})
			defer s.Free()
			ptr := &sgd{params: []*torch.Tensor{p}}
			tc.call(s, ptr) // a comparable optimizer's record first
			err := torch.Try(func() { tc.call(s, sliceOpt{p}) })
			var te *torch.Error
			require.True(t, errors.As(err, &te), "%v", err)
			require.Contains(t, te.Msg, "amp_test.sliceOpt")
			require.Nil(t, s.FoundInf(sliceOpt{p}))
			require.NotPanics(t, func() { s.ResetOptimizer(sliceOpt{p}) })
			require.NotNil(t, s.FoundInf(ptr), "the pointer's record stays")
		})
	}
}
