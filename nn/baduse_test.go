package nn

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// A hyperparameter changed after construction to one that cannot make a
// step (a schedule's NaN multiplier, a caller's assignment) panics with
// *torch.Error before any parameter changes; the parameters became NaN.
func TestOptimizerStepChecksHyperparameters(t *testing.T) {
	newAdamW := func(ps []Named) Optimizer { return NewAdamW(ps, AdamWDefaults(1e-3)) }
	newSGD := func(ps []Named) Optimizer { return NewSGD(ps, SGDConfig{LR: 0.1, Momentum: 0.9}) }
	for _, tc := range []struct {
		name string
		opt  func([]Named) Optimizer
		set  func(g *Group)
	}{
		{"adamw nan lr", newAdamW, func(g *Group) { g.LR = math.NaN() }},
		{"adamw inf lr", newAdamW, func(g *Group) { g.LR = math.Inf(1) }},
		{"adamw negative lr", newAdamW, func(g *Group) { g.LR = -1 }},
		{"adamw nan weight decay", newAdamW, func(g *Group) { g.WeightDecay = math.NaN() }},
		{"adamw beta1 1", newAdamW, func(g *Group) { g.Beta1 = 1 }},
		{"adamw nan eps", newAdamW, func(g *Group) { g.Eps = math.NaN() }},
		{"sgd nan lr", newSGD, func(g *Group) { g.LR = math.NaN() }},
		{"sgd nan momentum", newSGD, func(g *Group) { g.Momentum = math.NaN() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			torch.Tidy(func() {
				l := NewLinear(3, 1, true)
				defer Free(l)
				o := tc.opt(Parameters(l))
				defer o.Free()
				before := l.Weight.Clone()
				l.Forward(torch.Randn([]int64{2, 3})).Sum().Backward()
				tc.set(o.Groups()[0])
				err := torch.Try(o.Step)
				var te *torch.Error
				require.True(t, errors.As(err, &te), "%v", err)
				require.True(t, l.Weight.Equal(before), "the step changed the parameters")
			})
		})
	}
	// A schedule whose multiplier is NaN: the next step refuses.
	torch.Tidy(func() {
		l := NewLinear(3, 1, true)
		defer Free(l)
		o := NewSGD(Parameters(l), SGDConfig{LR: 0.1})
		defer o.Free()
		s := NewSchedule(o, func(step int) float64 { return []float64{1, math.NaN()}[min(step, 1)] })
		defer s.Free()
		l.Forward(torch.Randn([]int64{2, 3})).Sum().Backward()
		require.NoError(t, torch.Try(o.Step))
		s.Step()
		require.Error(t, torch.Try(o.Step))
		require.False(t, l.Weight.IsNan().Any().Item() != 0)
	})
}

// Free is idempotent, as torch.Tensor.Free is; the second call panicked.
func TestFreeTwice(t *testing.T) {
	l := NewLinear(3, 2, true)
	Free(l)
	require.NotPanics(t, func() { Free(l) })
	require.True(t, l.Weight.Freed())
}

// A constructor's argument it cannot take panics with *torch.Error, as
// tensor math does, so torch.Try turns it into an error (they panicked
// with strings, which torch.Try passes on).
func TestConstructorsPanicWithTorchError(t *testing.T) {
	p := Named{Name: "w", T: torch.Zeros([]int64{2}).Keep()}
	defer p.T.Free()
	for _, tc := range []struct {
		name string
		fn   func()
	}{
		{"dropout 2", func() { NewDropout(2) }},
		{"heads not dividing the width", func() { NewMultiheadAttention(10, 3, 0, true) }},
		{"groups not dividing channels", func() { NewGroupNorm(3, 10) }},
		{"GELU approximation", func() { NewGELU("erf") }},
		{"odd sinusoidal dimension", func() { NewSinusoidalPositionalEncoding(5, 10, false) }},
		{"conv groups", func() { NewConv1d(3, 4, 3, torch.ConvOpts{Groups: 2}, true) }},
		{"embedding padding index", func() { NewEmbedding(4, 2, 9) }},
		{"AdamW NaN lr", func() { NewAdamW([]Named{p}, AdamWDefaults(math.NaN())) }},
		{"AdamW beta 1", func() { c := AdamWDefaults(1e-3); c.Beta2 = 1; NewAdamW([]Named{p}, c) }},
		{"SGD nesterov without momentum", func() { NewSGD([]Named{p}, SGDConfig{LR: 0.1, Nesterov: true}) }},
		{"StepLR 0", func() { StepLR(0, 0.5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := torch.Try(tc.fn)
			var te *torch.Error
			require.ErrorAs(t, err, &te)
			require.Equal(t, "nn", te.Op)
		})
	}
}
