package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

// The parameters the optimizer tests train: a matrix, a bias-like vector
// and a second vector.
var optimShapes = []struct {
	name  string
	shape []int64
}{
	{"w", []int64{3, 4}},
	{"b", []int64{4}},
	{"v", []int64{5}},
}

const optimSteps = 20

func optimNumel(shape []int64) int {
	n := 1
	for _, s := range shape {
		n *= int(s)
	}
	return n
}

// optimInit is the deterministic initial value of parameter k.
func optimInit(k int) []float32 {
	out := make([]float32, optimNumel(optimShapes[k].shape))
	for i := range out {
		out[i] = float32(math.Sin(float64(7*k+i)*0.9) * 0.5)
	}
	return out
}

// optimGrad is the deterministic gradient of parameter k at step (from 0);
// nil (no gradient, the parameter is skipped) for "b" at steps 4 and 11.
// Magnitudes vary over steps so that AMSGrad's max matters.
func optimGrad(k, step int) []float32 {
	if k == 1 && (step == 4 || step == 11) {
		return nil
	}
	out := make([]float32, optimNumel(optimShapes[k].shape))
	scale := 1 + 0.8*math.Sin(float64(step)*0.7)
	for i := range out {
		out[i] = float32(math.Cos(0.37*float64(step)+0.11*float64(i)+float64(k)) * scale)
	}
	return out
}

// optimParams makes fresh parameters (leaves that require grad).
func optimParams() []Named {
	ps := make([]Named, len(optimShapes))
	for k, s := range optimShapes {
		ps[k] = Named{Name: s.name, T: torch.FromSlice(optimInit(k), s.shape).Keep().SetRequiresGrad(true)}
	}
	return ps
}

func optimFree(ps []Named) {
	for _, p := range ps {
		p.T.Free()
	}
}

// optimGrads makes the gradient tensors of every step ([step][param], nil
// for none).
func optimGrads() [][]*torch.Tensor {
	out := make([][]*torch.Tensor, optimSteps)
	for s := range out {
		out[s] = make([]*torch.Tensor, len(optimShapes))
		for k, sh := range optimShapes {
			if g := optimGrad(k, s); g != nil {
				out[s][k] = torch.FromSlice(g, sh.shape).Keep()
			}
		}
	}
	return out
}

func optimFreeGrads(gs [][]*torch.Tensor) {
	for _, row := range gs {
		for _, g := range row {
			g.Free()
		}
	}
}

func optimSetGrads(ps []Named, gs []*torch.Tensor) {
	for k, p := range ps {
		p.T.SetGrad(gs[k])
	}
}

// optimGroupSpec is a parameter group as both sides build it.
type optimGroupSpec struct {
	Names []string           `json:"names"`
	Opts  map[string]float64 `json:"opts"` // lr, weight_decay overrides
}

func (s optimGroupSpec) build(ps []Named) ParamGroup {
	var g ParamGroup
	for _, n := range s.Names {
		for _, p := range ps {
			if p.Name == n {
				g.Params = append(g.Params, p)
			}
		}
	}
	if v, ok := s.Opts["lr"]; ok {
		g = g.WithLR(v)
	}
	if v, ok := s.Opts["weight_decay"]; ok {
		g = g.WithWeightDecay(v)
	}
	return g
}

var optimOneGroup = []optimGroupSpec{{Names: []string{"w", "b", "v"}}}

var optimTwoGroups = []optimGroupSpec{
	{Names: []string{"w"}, Opts: map[string]float64{"lr": 0.05, "weight_decay": 0.1}},
	{Names: []string{"b", "v"}, Opts: map[string]float64{"weight_decay": 0}},
}

type optimCase struct {
	name   string
	groups []optimGroupSpec
	py     string // the Python constructor over `groups`
	mk     func([]ParamGroup) Optimizer
}

var optimCases = []optimCase{
	{"SGD", optimOneGroup, "torch.optim.SGD(groups, lr=0.1)",
		func(g []ParamGroup) Optimizer { return NewSGDGroups(g, SGDConfig{LR: 0.1}) }},
	{"SGD/momentum", optimOneGroup, "torch.optim.SGD(groups, lr=0.05, momentum=0.9, dampening=0.1)",
		func(g []ParamGroup) Optimizer {
			return NewSGDGroups(g, SGDConfig{LR: 0.05, Momentum: 0.9, Dampening: 0.1})
		}},
	{"SGD/nesterov+wd", optimOneGroup, "torch.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)",
		func(g []ParamGroup) Optimizer {
			return NewSGDGroups(g, SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01})
		}},
	{"SGD/wd+maximize", optimOneGroup, "torch.optim.SGD(groups, lr=0.03, weight_decay=0.2, maximize=True)",
		func(g []ParamGroup) Optimizer {
			return NewSGDGroups(g, SGDConfig{LR: 0.03, WeightDecay: 0.2, Maximize: true})
		}},
	{"SGD/two-groups", optimTwoGroups, "torch.optim.SGD(groups, lr=0.1, momentum=0.5, weight_decay=0.05)",
		func(g []ParamGroup) Optimizer {
			return NewSGDGroups(g, SGDConfig{LR: 0.1, Momentum: 0.5, WeightDecay: 0.05})
		}},
	{"Adam", optimOneGroup, "torch.optim.Adam(groups, lr=0.01)",
		func(g []ParamGroup) Optimizer { return NewAdamGroups(g, AdamConfig{LR: 0.01}) }},
	{"Adam/betas+wd", optimOneGroup, "torch.optim.Adam(groups, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)",
		func(g []ParamGroup) Optimizer {
			return NewAdamGroups(g, AdamConfig{LR: 0.02, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.1})
		}},
	{"Adam/amsgrad", optimOneGroup, "torch.optim.Adam(groups, lr=0.01, amsgrad=True, weight_decay=0.01)",
		func(g []ParamGroup) Optimizer {
			c := AdamDefaults(0.01)
			c.AMSGrad, c.WeightDecay = true, 0.01
			return NewAdamGroups(g, c)
		}},
	{"Adam/maximize", optimOneGroup, "torch.optim.Adam(groups, lr=0.01, maximize=True)",
		func(g []ParamGroup) Optimizer { return NewAdamGroups(g, AdamConfig{LR: 0.01, Maximize: true}) }},
	{"AdamW", optimOneGroup, "torch.optim.AdamW(groups, lr=0.01)",
		func(g []ParamGroup) Optimizer { return NewAdamWGroups(g, AdamWDefaults(0.01)) }},
	{"AdamW/wd+amsgrad", optimOneGroup, "torch.optim.AdamW(groups, lr=0.02, betas=(0.85, 0.995), weight_decay=0.3, amsgrad=True)",
		func(g []ParamGroup) Optimizer {
			return NewAdamWGroups(g, AdamConfig{LR: 0.02, Beta1: 0.85, Beta2: 0.995, Eps: 1e-8, WeightDecay: 0.3, AMSGrad: true})
		}},
	{"AdamW/two-groups", optimTwoGroups, "torch.optim.AdamW(groups, lr=0.01, weight_decay=0.05)",
		func(g []ParamGroup) Optimizer {
			return NewAdamWGroups(g, AdamConfig{LR: 0.01, WeightDecay: 0.05})
		}},
	{"Adam/two-groups", optimTwoGroups, "torch.optim.Adam(groups, lr=0.01, weight_decay=0.05)",
		func(g []ParamGroup) Optimizer {
			return NewAdamGroups(g, AdamConfig{LR: 0.01, WeightDecay: 0.05})
		}},
}

func (c optimCase) build(ps []Named) Optimizer {
	gs := make([]ParamGroup, len(c.groups))
	for k, s := range c.groups {
		gs[k] = s.build(ps)
	}
	return c.mk(gs)
}

// optimPyScript runs a config in PyTorch on the same initial values and
// gradients and emits every parameter after every step.
const optimPyScript = `
def run(case):
    params = {}
    for p in inp["params"]:
        params[p["name"]] = T(p["init"]).reshape(p["shape"]).requires_grad_()
    groups = []
    for g in case["groups"]:
        d = {"params": [params[n] for n in g["names"]]}
        d.update(g["opts"] or {})
        groups.append(d)
    opt = eval(case["ctor"])
    for g in opt.param_groups:
        g["foreach"] = False
    out = []
    for step in inp["grads"]:
        for p, g in zip(inp["params"], step):
            params[p["name"]].grad = None if g is None else T(g).reshape(p["shape"])
        opt.step()
        out.append([params[p["name"]].detach().reshape(-1).double().tolist() for p in inp["params"]])
    return out
emit([run(c) for c in inp["cases"]])
`

type optimPyParam struct {
	Name  string    `json:"name"`
	Shape []int64   `json:"shape"`
	Init  []float32 `json:"init"`
}

func optimPyInput(cases []optimCase) map[string]any {
	var params []optimPyParam
	for k, s := range optimShapes {
		params = append(params, optimPyParam{s.name, s.shape, optimInit(k)})
	}
	grads := make([][][]float32, optimSteps)
	for s := range grads {
		grads[s] = make([][]float32, len(optimShapes))
		for k := range optimShapes {
			grads[s][k] = optimGrad(k, s)
		}
	}
	var cs []map[string]any
	for _, c := range cases {
		cs = append(cs, map[string]any{"groups": c.groups, "ctor": c.py})
	}
	return map[string]any{"params": params, "cases": cs, "grads": grads}
}

// TestOptimMatchesPyTorch runs every config for optimSteps steps in Go and
// in PyTorch and compares the parameters after each step.
func TestOptimMatchesPyTorch(t *testing.T) {
	var all [][][][]float64 // [case][step][param][element]
	pyref.Run(t, optimPyScript, optimPyInput(optimCases), &all)
	require.Len(t, all, len(optimCases))
	// Three paths: torchfit's fused CPU step, the ops one by one, and
	// libtorch's fused kernel (what CUDA parameters take), forced here on
	// the CPU, where libtorch has it from 2.4.
	maj, min, _ := torch.LibtorchVersion()
	cpuKernel := maj > 2 || maj == 2 && min >= 4
	for _, mode := range []string{"", "/unfused", "/libtorch-fused"} {
		defer SetFusedOptimizers(SetFusedOptimizers(mode != "/unfused"))
		if mode == "/libtorch-fused" {
			prev := libtorchFusedAdam
			libtorchFusedAdam = func(torch.Device) bool { return true }
			defer func() { libtorchFusedAdam = prev }()
		}
		for ci, c := range optimCases {
			want := all[ci]
			name := c.name + mode
			t.Run(name, func(t *testing.T) {
				if mode == "/libtorch-fused" && !cpuKernel {
					t.Skipf("libtorch %d.%d has no CPU kernel for _fused_adam(w)_ (2.4 and later); CUDA parameters take it from 2.1", maj, min)
				}
				require.Len(t, want, optimSteps)

				ps := optimParams()
				defer optimFree(ps)
				gs := optimGrads()
				defer optimFreeGrads(gs)
				refs := make([]*torch.Tensor, len(ps))
				for k, p := range ps {
					refs[k] = p.T.Ref()
					defer refs[k].Free()
				}
				opt := c.build(ps)
				defer opt.Free()

				exact, total := 0, 0
				for s := 0; s < optimSteps; s++ {
					optimSetGrads(ps, gs[s])
					opt.Step()
					opt.ZeroGrad()
					for k, p := range ps {
						got := p.T.Float32s()
						require.Len(t, got, len(want[s][k]))
						for i, g := range got {
							w := want[s][k][i]
							total++
							if float64(g) == w {
								exact++
							}
							require.InDelta(t, w, float64(g), 1e-6*math.Max(1, math.Abs(w)),
								"step %d %s[%d]", s+1, p.Name, i)
						}
						require.True(t, p.T.Same(refs[k]), "parameter %s lost its identity", p.Name)
						require.Nil(t, p.T.Grad(), "ZeroGrad leaves no gradient")
					}
				}
				t.Logf("%d of %d values bitwise equal to PyTorch", exact, total)
			})
		}
	}
}

// TestOptimStateRoundTrip checks that 10 steps, a checkpoint (copies of
// State and the parameters), a fresh optimizer loading it and 10 more
// steps give bitwise the parameters of 20 straight steps.
func TestOptimStateRoundTrip(t *testing.T) {
	gs := optimGrads()
	defer optimFreeGrads(gs)
	run := func(opt Optimizer, ps []Named, from, to int) {
		for s := from; s < to; s++ {
			optimSetGrads(ps, gs[s])
			opt.Step()
			opt.ZeroGrad()
		}
	}
	for _, c := range optimCases {
		t.Run(c.name, func(t *testing.T) {
			straight := optimParams()
			defer optimFree(straight)
			o1 := c.build(straight)
			defer o1.Free()
			run(o1, straight, 0, optimSteps)

			first := optimParams()
			defer optimFree(first)
			o2 := c.build(first)
			defer o2.Free()
			run(o2, first, 0, optimSteps/2)
			// Change a hyperparameter to see it travel too.
			o2.Groups()[0].LR *= 0.5
			o1lr := o2.Groups()[0].LR
			ckpt := map[string]*torch.Tensor{}
			for _, n := range o2.State() {
				ckpt[n.Name] = n.T.Clone().Keep()
			}
			defer func() {
				for _, v := range ckpt {
					v.Free()
				}
			}()
			require.Contains(t, ckpt, "param_groups.0.lr")
			if _, adam := o2.(*Adam); adam {
				require.Contains(t, ckpt, "state.w.exp_avg")
				require.Equal(t, float64(optimSteps/2), ckpt["state.w.step"].Item())
				require.Equal(t, torch.Float32, ckpt["state.w.step"].DType())
				// "b" had no gradient at step 4, so one step fewer.
				require.Equal(t, float64(optimSteps/2-1), ckpt["state.b.step"].Item())
			}

			resumed := optimParams()
			defer optimFree(resumed)
			for k := range resumed {
				torch.NoGrad(func() { resumed[k].T.CopyFrom(first[k].T) })
			}
			o3 := c.build(resumed)
			defer o3.Free()
			require.NoError(t, o3.LoadState(ckpt))
			require.Equal(t, o1lr, o3.Groups()[0].LR)
			o3.Groups()[0].LR *= 2 // back to the straight run's
			run(o3, resumed, optimSteps/2, optimSteps)
			for k := range straight {
				require.True(t, straight[k].T.Equal(resumed[k].T), "%s differs after resuming", straight[k].Name)
			}
		})
	}
}

// TestOptimLoadStateErrors checks that bad state is refused and leaves the
// optimizer untouched.
func TestOptimLoadStateErrors(t *testing.T) {
	ps := optimParams()
	defer optimFree(ps)
	gs := optimGrads()
	defer optimFreeGrads(gs)
	opt := NewAdam(ps, AdamConfig{LR: 0.01})
	defer opt.Free()
	optimSetGrads(ps, gs[0])
	opt.Step()
	good := map[string]*torch.Tensor{}
	for _, n := range opt.State() {
		good[n.Name] = n.T.Clone().Keep()
	}
	defer func() {
		for _, v := range good {
			v.Free()
		}
	}()
	bad := torch.Zeros([]int64{2}).Keep()
	defer bad.Free()
	cases := []struct {
		name   string
		mutate func(m map[string]*torch.Tensor)
		msg    string
	}{
		{"unexpected key", func(m map[string]*torch.Tensor) { m["state.w.momentum_buffer"] = good["state.w.exp_avg"] }, "unexpected key"},
		{"unknown param", func(m map[string]*torch.Tensor) { m["state.nope.exp_avg"] = good["state.w.exp_avg"] }, "no parameter"},
		{"extra group", func(m map[string]*torch.Tensor) { m["param_groups.1.lr"] = good["param_groups.0.lr"] }, "unexpected key"},
		{"shape", func(m map[string]*torch.Tensor) { m["state.w.exp_avg"] = bad }, "size mismatch"},
		{"missing optimHyper", func(m map[string]*torch.Tensor) { delete(m, "param_groups.0.eps") }, "missing key param_groups.0.eps"},
		{"missing buffer", func(m map[string]*torch.Tensor) { delete(m, "state.v.exp_avg_sq") }, "missing key state.v.exp_avg_sq"},
		{"missing step", func(m map[string]*torch.Tensor) { delete(m, "state.v.step") }, "missing key state.v.step"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]*torch.Tensor{}
			for k, v := range good {
				m[k] = v
			}
			m["param_groups.0.lr"] = torch.Scalar(123, torch.Float64).Keep()
			defer m["param_groups.0.lr"].Free()
			c.mutate(m)
			err := opt.LoadState(m)
			require.ErrorContains(t, err, c.msg)
			require.Equal(t, 0.01, opt.Groups()[0].LR, "a refused load changes nothing")
		})
	}
	// Loading state without a parameter's entries drops that parameter's state.
	m := map[string]*torch.Tensor{}
	for k, v := range good {
		if k != "state.v.step" && k != "state.v.exp_avg" && k != "state.v.exp_avg_sq" {
			m[k] = v
		}
	}
	require.NoError(t, opt.LoadState(m))
	for _, n := range opt.State() {
		require.NotContains(t, n.Name, "state.v.")
	}
}

// TestOptimMemoryFlat checks that steps leave no tensors or bytes behind
// once the state exists.
func TestOptimMemoryFlat(t *testing.T) {
	for _, c := range optimCases {
		t.Run(c.name, func(t *testing.T) {
			ps := optimParams()
			defer optimFree(ps)
			gs := optimGrads()
			defer optimFreeGrads(gs)
			opt := c.build(ps)
			defer opt.Free()
			step := func(s int) {
				optimSetGrads(ps, gs[s])
				opt.Step()
				opt.ZeroGrad()
			}
			step(0)
			step(1)
			torch.CollectGarbage()
			live := torch.LiveTensors()
			alloc := torch.MustMemoryStats(torch.CPU).Allocated
			for s := 2; s < optimSteps; s++ {
				step(s)
				require.Equal(t, live, torch.LiveTensors(), "live tensors after step %d", s)
				require.Equal(t, alloc, torch.MustMemoryStats(torch.CPU).Allocated, "allocated bytes after step %d", s)
			}
			// State is no leak either: repeated calls reuse the same tensors.
			opt.State()
			live = torch.LiveTensors()
			opt.State()
			require.Equal(t, live, torch.LiveTensors())
		})
	}
}

func TestDecayGroups(t *testing.T) {
	ps := []Named{
		{Name: "enc.weight", T: torch.Zeros([]int64{3, 3}).Keep()},
		{Name: "enc.bias", T: torch.Zeros([]int64{3}).Keep()},
		{Name: "norm.weight", T: torch.Ones([]int64{3}).Keep()},
		{Name: "emb.weight", T: torch.Zeros([]int64{5, 3}).Keep()},
		{Name: "proj.bias", T: torch.Zeros([]int64{1, 3}).Keep()}, // 2-d, but a bias
	}
	defer optimFree(ps)
	gs := DecayGroups(ps, 0.1)
	require.Len(t, gs, 2)
	names := func(g ParamGroup) []string {
		var out []string
		for _, p := range g.Params {
			out = append(out, p.Name)
		}
		return out
	}
	require.Equal(t, []string{"enc.weight", "emb.weight"}, names(gs[0]))
	require.Equal(t, []string{"enc.bias", "norm.weight", "proj.bias"}, names(gs[1]))
	opt := NewAdamWGroups(gs, AdamConfig{LR: 1e-3, WeightDecay: 0.5})
	defer opt.Free()
	require.Equal(t, 0.1, opt.Groups()[0].WeightDecay)
	require.Equal(t, 0.0, opt.Groups()[1].WeightDecay)
	require.Equal(t, 1e-3, opt.Groups()[1].LR)
}

func TestOptimConfigPanics(t *testing.T) {
	ps := []Named{{Name: "w", T: torch.Zeros([]int64{2}).Keep()}}
	defer optimFree(ps)
	for k, f := range []func(){
		func() { NewSGD(ps, SGDConfig{LR: 0.1, Nesterov: true}) },
		func() { NewSGD(ps, SGDConfig{LR: -1}) },
		func() { NewAdam(ps, AdamConfig{LR: 0.1, Beta1: 1, Beta2: 0.9}) },
		func() { NewAdam(append(ps, ps[0]), AdamConfig{LR: 0.1}) },
		// Non-finite hyperparameters.
		func() { NewSGD(ps, SGDConfig{LR: math.NaN()}) },
		func() { NewSGD(ps, SGDConfig{LR: math.Inf(1)}) },
		func() { NewSGD(ps, SGDConfig{LR: 0.1, Momentum: math.NaN()}) },
		func() { NewSGD(ps, SGDConfig{LR: 0.1, Dampening: math.Inf(1)}) },
		func() { NewSGD(ps, SGDConfig{LR: 0.1, WeightDecay: math.NaN()}) },
		func() { NewAdamW(ps, AdamWDefaults(math.NaN())) },
		func() { NewAdamW(ps, AdamWDefaults(math.Inf(1))) },
		func() { NewAdam(ps, AdamConfig{LR: 0.1, Beta1: math.NaN(), Beta2: 0.9, Eps: 1e-8}) },
		func() { NewAdam(ps, AdamConfig{LR: 0.1, Beta1: 0.9, Beta2: 0.9, Eps: math.Inf(1)}) },
		func() { NewAdam(ps, AdamConfig{LR: 0.1, WeightDecay: math.Inf(1)}) },
		func() {
			NewAdamWGroups([]ParamGroup{ParamGroup{Params: ps}.WithLR(math.NaN())}, AdamWDefaults(1e-3))
		},
	} {
		require.Panics(t, f, fmt.Sprint(k))
	}
}
