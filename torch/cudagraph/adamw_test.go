package cudagraph

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// fusedCPU reports whether this libtorch has _fused_adamw_ for CPU
// tensors (PyTorch 2.4 and later).
func fusedCPU() bool {
	maj, min, _ := torch.LibtorchVersion()
	return maj > 2 || maj == 2 && min >= 4
}

func adamParams(seed uint64) []nn.Named {
	torch.ManualSeed(seed)
	return []nn.Named{
		{Name: "w", T: torch.Randn([]int64{4, 3}).SetRequiresGrad(true).Keep()},
		{Name: "b", T: torch.Randn([]int64{3}).SetRequiresGrad(true).Keep()},
	}
}

func freeNamed(ps []nn.Named) {
	for _, p := range ps {
		p.T.Free()
	}
}

// The fused AdamW on the CPU (where libtorch has it) follows nn's AdamW,
// the step counter on its tensor; on an older libtorch Step reports the
// missing operator.
func TestAdamWMatchesNN(t *testing.T) {
	a, b, init := adamParams(3), adamParams(3), adamParams(3)
	defer freeNamed(a)
	defer freeNamed(b)
	defer freeNamed(init)
	cfg := nn.AdamWDefaults(0.05)
	groups := func(ps []nn.Named) []nn.ParamGroup { return nn.DecayGroups(ps, 0.1) }
	fused, err := NewAdamW(groups(a), cfg)
	require.NoError(t, err)
	defer fused.Free()
	ref := nn.NewAdamWGroups(groups(b), cfg)
	defer ref.Free()
	const steps = 5
	for s := 0; s < steps; s++ {
		torch.Tidy(func() {
			for k := range a {
				g := torch.Randn(a[k].T.Shape()).MulScalar(float64(s + 1))
				a[k].T.SetGrad(g.Clone())
				b[k].T.SetGrad(g.Clone())
			}
		})
		err := fused.Step()
		if !fusedCPU() {
			require.ErrorContains(t, err, "_fused_adamw_")
			return
		}
		require.NoError(t, err)
		ref.Step()
	}
	n, err := fused.StepCount()
	require.NoError(t, err)
	require.Equal(t, float64(steps), n)
	for k := range a {
		torch.Tidy(func() {
			d := a[k].T.Sub(b[k].T).Abs().Max().Item()
			require.Less(t, d, 1e-5, a[k].Name)
			moved := a[k].T.Sub(init[k].T).Abs().Max().Item()
			require.Greater(t, moved, 0.05, "%s: the weights moved", a[k].Name)
		})
	}
	fused.ZeroGrad()
	require.Nil(t, a[0].T.Grad())
}

func TestAdamWErrors(t *testing.T) {
	ps := adamParams(1)
	defer freeNamed(ps)
	cases := []struct {
		name   string
		groups []nn.ParamGroup
		cfg    nn.AdamConfig
	}{
		{"AMSGrad", []nn.ParamGroup{{Params: ps}}, nn.AdamConfig{LR: 1e-3, AMSGrad: true}},
		{"no parameters", nil, nn.AdamWDefaults(1e-3)},
		{"beta1 1", []nn.ParamGroup{{Params: ps}}, nn.AdamConfig{LR: 1e-3, Beta1: 1, Beta2: 0.999, Eps: 1e-8}},
		{"negative lr", []nn.ParamGroup{{Params: ps}}, nn.AdamWDefaults(-1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := NewAdamW(c.groups, c.cfg)
			require.ErrorIs(t, err, ErrArg)
			require.Nil(t, o)
		})
	}
	o, err := NewAdamW([]nn.ParamGroup{{Params: ps}}, nn.AdamWDefaults(1e-3))
	require.NoError(t, err)
	defer o.Free()
	ps[0].T.SetGrad(torch.OnesLike(ps[0].T))
	ps[1].T.SetGrad(nil)
	before := ps[0].T.Clone().Keep()
	defer before.Free()
	require.ErrorIs(t, o.Step(), ErrNoGrad)
	torch.Tidy(func() {
		require.Zero(t, ps[0].T.Sub(before).Abs().Max().Item(), "nothing is updated when a gradient is missing")
	})
	n, err := o.StepCount()
	require.NoError(t, err)
	require.Zero(t, n)
}

// StepUnlessInf with found_inf 0 is Step, to the bit; with found_inf 1
// it changes no parameter, no moment and no step counter.
func TestAdamWStepUnlessInf(t *testing.T) {
	if !fusedCPU() {
		t.Skip("this libtorch has no _fused_adamw_ for CPU tensors")
	}
	a, b := adamParams(5), adamParams(5)
	defer freeNamed(a)
	defer freeNamed(b)
	cfg := nn.AdamWDefaults(0.05)
	oa, err := NewAdamW([]nn.ParamGroup{{Params: a}}, cfg)
	require.NoError(t, err)
	defer oa.Free()
	ob, err := NewAdamW([]nn.ParamGroup{{Params: b}}, cfg)
	require.NoError(t, err)
	defer ob.Free()
	found := torch.Zeros([]int64{}, torch.Float32).Keep()
	defer found.Free()
	snapshot := func(ps []nn.Named, o *AdamW) [][]float32 {
		var out [][]float32
		for _, p := range ps {
			out = append(out, p.T.Float32s())
		}
		for _, g := range o.groups {
			for k := range g.params {
				out = append(out, g.expAvg[k].Float32s(), g.expAvgSq[k].Float32s(), g.steps[k].Float32s())
			}
		}
		return out
	}
	for s, inf := range []bool{false, false, true, false, true} {
		torch.Tidy(func() {
			for k := range a {
				g := torch.Randn(a[k].T.Shape())
				a[k].T.SetGrad(g.Clone())
				b[k].T.SetGrad(g.Clone())
			}
		})
		before := snapshot(b, ob)
		if inf {
			found.FillIn(1)
		} else {
			found.FillIn(0)
			require.NoError(t, oa.Step())
		}
		require.NoError(t, ob.StepUnlessInf(found))
		if inf {
			require.Equal(t, before, snapshot(b, ob), "step %d: skipped", s)
		} else {
			require.Equal(t, snapshot(a, oa), snapshot(b, ob), "step %d", s)
		}
	}
	n, err := ob.StepCount()
	require.NoError(t, err)
	require.Equal(t, 3.0, n)
	require.ErrorIs(t, ob.StepUnlessInf(nil), ErrArg)
}
