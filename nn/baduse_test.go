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
