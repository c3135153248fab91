package nn_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// The PyTorch comparison harness. Each refCase builds a module in Go (in
// float64), perturbs its state so that no parameter is trivial, runs a
// forward pass and the backward pass of Σ outᵢ·Rᵢ (Rᵢ random), and sends
// the state dict, inputs and Rᵢ to Python, which builds the same module,
// loads the state dict with strict=True, and does the same. All cases of a
// test run in one Python process.

// jt is a tensor as JSON: flat data, shape and dtype.
type jt struct {
	Data  []float64 `json:"data"`
	Shape []int64   `json:"shape"`
	DType string    `json:"dtype,omitempty"`
	Grad  bool      `json:"grad,omitempty"`
}

func enc(t *torch.Tensor) jt {
	if t == nil {
		return jt{}
	}
	shape := append([]int64{}, t.Shape()...) // 0-d: [] rather than null
	return jt{Data: t.Detach().Float64s(), Shape: shape, DType: t.DType().String()}
}

type refCase struct {
	name  string
	build func() nn.Module
	// fwd runs the Go forward pass; nil: the module is an nn.Layer.
	fwd func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor
	// py defines m (the PyTorch module) and optionally fwd(m, *xs).
	py string
	// inputs returns the inputs; float64 ones get requires_grad.
	inputs func() []*torch.Tensor
	train  bool
	// keepState skips the perturbation of parameters and buffers.
	keepState bool
	tol       float64 // relative tolerance (default 1e-9, float64 math)
}

type pyIn struct {
	Name  string        `json:"name"`
	Py    string        `json:"py"`
	Train bool          `json:"train"`
	SD    map[string]jt `json:"sd"`
	Xs    []jt          `json:"xs"`
	Rs    []jt          `json:"rs"`
}

type pyOut struct {
	Keys   [][]any       `json:"keys"`
	Outs   []*jt         `json:"outs"`
	XGrads []*jt         `json:"xgrads"`
	Grads  map[string]jt `json:"grads"`
	After  map[string]jt `json:"after"`
}

type goResult struct {
	keys   []string
	shapes [][]int64
	outs   []jt
	xgrads []*jt
	grads  map[string]jt
	after  map[string]jt
}

const refScript = `
import torch.nn as nn
import torch.nn.functional as F
def dec(j, dtype=None):
    dt = dtype or getattr(torch, j['dtype'])
    return torch.tensor(j['data'], dtype=torch.float64).reshape(j['shape']).to(dt)
def enc(t):
    if t is None:
        return None
    return {'data': t.detach().double().flatten().tolist(), 'shape': list(t.shape)}
res = []
for c in inp:
    ns = {'torch': torch, 'nn': nn, 'F': F, 'math': math}
    exec(c['py'], ns)
    m = ns['m'].double()
    fwd = ns.get('fwd', lambda m, *xs: m(*xs))
    cur = m.state_dict()
    keys = [[k, list(v.shape)] for k, v in cur.items()]
    m.load_state_dict({k: dec(v, cur[k].dtype if k in cur else None) for k, v in c['sd'].items()}, strict=True)
    m.train(c['train'])
    xs = []
    for j in c['xs']:
        x = dec(j)
        if j.get('grad'):
            x.requires_grad_(True)
        xs.append(x)
    outs = fwd(m, *xs)
    if not isinstance(outs, (tuple, list)):
        outs = [outs]
    loss = sum((o * dec(r)).sum() for o, r in zip(outs, c['rs']) if o is not None)
    loss.backward()
    res.append({'keys': keys, 'outs': [enc(o) for o in outs],
                'xgrads': [enc(x.grad) if x.requires_grad else None for x in xs],
                'grads': {n: enc(p.grad) for n, p in m.named_parameters() if p.grad is not None},
                'after': {k: enc(v) for k, v in m.state_dict().items()}})
emit(res)
`

// perturb moves every floating-point state entry away from its default
// (ones, zeros) so that gradients and outputs test every parameter.
func perturb(m nn.Module) {
	torch.NoGrad(func() {
		torch.Tidy(func() {
			for _, p := range nn.StateDict(m) {
				if !p.T.DType().IsFloat() {
					continue
				}
				if strings.HasSuffix(p.Name, "running_var") {
					p.T.CopyFrom(torch.Rand(p.T.Shape(), p.T.DType()).AddScalar(0.5))
					continue
				}
				p.T.AddIn(torch.RandnLike(p.T), 0.3)
			}
		})
	})
}

func runGo(t *testing.T, c refCase) (pyIn, goResult) {
	t.Helper()
	var in pyIn
	var res goResult
	err := torch.TidyErr(func() error {
		torch.ManualSeed(1)
		m := c.build()
		nn.To(m, torch.CPU, torch.Float64)
		if !c.keepState {
			perturb(m)
		}
		nn.SetTraining(m, c.train)
		in = pyIn{Name: c.name, Py: c.py, Train: c.train, SD: map[string]jt{}}
		for _, p := range nn.StateDict(m) {
			in.SD[p.Name] = enc(p.T)
			res.keys = append(res.keys, p.Name)
			res.shapes = append(res.shapes, p.T.Shape())
		}
		xs := c.inputs()
		for _, x := range xs {
			j := enc(x)
			if x.DType() == torch.Float64 {
				x.SetRequiresGrad(true)
				j.Grad = true
			}
			in.Xs = append(in.Xs, j)
		}
		var outs []*torch.Tensor
		if c.fwd != nil {
			outs = c.fwd(m, xs)
		} else {
			outs = []*torch.Tensor{m.(nn.Layer).Forward(xs[0])}
		}
		loss := torch.Scalar(0, torch.Float64)
		for _, o := range outs {
			if o == nil {
				in.Rs = append(in.Rs, jt{})
				continue
			}
			r := torch.RandnLike(o)
			in.Rs = append(in.Rs, enc(r))
			res.outs = append(res.outs, enc(o))
			loss = loss.Add(o.Mul(r).Sum())
		}
		loss.Backward()
		for _, x := range xs {
			if x.DType() != torch.Float64 {
				res.xgrads = append(res.xgrads, nil)
				continue
			}
			g := enc(x.Grad())
			res.xgrads = append(res.xgrads, &g)
		}
		res.grads = map[string]jt{}
		for _, p := range nn.Parameters(m) {
			if g := p.T.Grad(); g != nil {
				res.grads[p.Name] = enc(g)
			}
		}
		res.after = map[string]jt{}
		for _, p := range nn.StateDict(m) {
			res.after[p.Name] = enc(p.T)
		}
		return nil
	})
	require.NoError(t, err, c.name)
	return in, res
}

// requireClose checks shapes and |got − want| ≤ tol·(1 + max|want|).
func requireClose(t *testing.T, what string, got, want jt, tol float64) {
	t.Helper()
	require.Equal(t, fmt.Sprint(want.Shape), fmt.Sprint(got.Shape), "%s: shape", what)
	require.Len(t, got.Data, len(want.Data), what)
	scale, worst := 0.0, 0.0
	for k := range want.Data {
		scale = math.Max(scale, math.Abs(want.Data[k]))
	}
	for k := range want.Data {
		d := math.Abs(got.Data[k] - want.Data[k])
		if math.IsNaN(got.Data[k]) != math.IsNaN(want.Data[k]) {
			d = math.Inf(1)
		}
		worst = math.Max(worst, d)
	}
	require.LessOrEqual(t, worst, tol*(1+scale), "%s: max abs difference %g (scale %g)", what, worst, scale)
}

// runRefCases runs every case in Go, then all of them in one Python
// process, and compares names, shapes, outputs, input gradients, parameter
// gradients and the state after the forward pass (running statistics).
func runRefCases(t *testing.T, cases []refCase) {
	t.Helper()
	ins := make([]pyIn, len(cases))
	gos := make([]goResult, len(cases))
	for k, c := range cases {
		ins[k], gos[k] = runGo(t, c)
	}
	var outs []pyOut
	pyref.Run(t, refScript, ins, &outs)
	require.Len(t, outs, len(cases))
	for k, c := range cases {
		g, p := gos[k], outs[k]
		tol := c.tol
		if tol == 0 {
			tol = 1e-9
		}
		t.Run(c.name, func(t *testing.T) {
			// state_dict names, order and shapes
			var pk []string
			var ps []string
			for _, kv := range p.Keys {
				pk = append(pk, kv[0].(string))
				ps = append(ps, fmt.Sprint(kv[1]))
			}
			require.Equal(t, pk, g.keys, "state_dict keys and order")
			for i := range ps {
				require.Equal(t, ps[i], fmt.Sprint(g.shapes[i]), "shape of %s", pk[i])
			}
			var nonNil []*jt
			for _, o := range p.Outs {
				if o != nil {
					nonNil = append(nonNil, o)
				}
			}
			require.Len(t, g.outs, len(nonNil), "outputs")
			for i := range g.outs {
				requireClose(t, fmt.Sprintf("output %d", i), g.outs[i], *nonNil[i], tol)
			}
			require.Len(t, g.xgrads, len(p.XGrads))
			for i := range g.xgrads {
				if p.XGrads[i] == nil {
					continue
				}
				require.NotNil(t, g.xgrads[i], "grad of input %d", i)
				requireClose(t, fmt.Sprintf("grad of input %d", i), *g.xgrads[i], *p.XGrads[i], tol)
			}
			require.Equal(t, len(p.Grads), len(g.grads), "parameters with gradients")
			for n, pg := range p.Grads {
				gg, ok := g.grads[n]
				require.True(t, ok, "no Go gradient for %s", n)
				requireClose(t, "grad of "+n, gg, pg, tol)
			}
			for n, pa := range p.After {
				requireClose(t, "state after forward: "+n, g.after[n], pa, tol)
			}
		})
	}
}

// randn returns a float64 standard-normal tensor.
func randn(shape ...int64) *torch.Tensor { return torch.Randn(shape, torch.Float64) }

func layerIn(shapes ...[]int64) func() []*torch.Tensor {
	return func() []*torch.Tensor {
		var out []*torch.Tensor
		for _, s := range shapes {
			out = append(out, randn(s...))
		}
		return out
	}
}

func shp(s ...int64) []int64 { return s }
