package nn

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

// clipCase is one clip_grad_norm_ call. Gradients are optimGrad(k, step)
// times scale; "b" has none at step 4.
type clipCase struct {
	name     string
	step     int
	scale    float32
	maxNorm  float64
	normType float64
}

var clipCases = []clipCase{
	{"l2-clips", 0, 1, 1, 2},
	{"l2-no-clip", 1, 0.01, 1, 2},
	{"l2-near-limit", 2, 1, 4.16, 2},
	{"l1", 3, 1, 0.5, 1},
	{"inf", 5, 1, 0.3, math.Inf(1)},
	{"p3.5", 6, 2, 0.7, 3.5},
	{"skips-nil-grad", 4, 3, 2, 2},
	{"max-norm-0", 7, 1, 0, 2},
}

const clipPyScript = `
out = []
for c in inp["cases"]:
    ps = []
    for shape, g in zip(inp["shapes"], c["grads"]):
        p = torch.zeros(shape, requires_grad=True)
        p.grad = None if g is None else T(g).reshape(shape)
        ps.append(p)
    nt = float("inf") if c["norm"] == "inf" else c["norm"]
    total = torch.nn.utils.clip_grad_norm_(ps, c["max"], nt)
    out.append({"total": total.item(), "grads": [None if p.grad is None else p.grad.reshape(-1).double().tolist() for p in ps]})
emit(out)
`

func clipGrads(c clipCase) [][]float32 {
	out := make([][]float32, len(optimShapes))
	for k := range optimShapes {
		g := optimGrad(k, c.step)
		for i := range g {
			g[i] *= c.scale
		}
		out[k] = g
	}
	return out
}

func clipParams(grads [][]float32) []*torch.Tensor {
	ps := make([]*torch.Tensor, len(optimShapes))
	for k, s := range optimShapes {
		ps[k] = torch.Zeros(s.shape).Keep().SetRequiresGrad(true)
		if grads[k] != nil {
			g := torch.FromSlice(grads[k], s.shape)
			ps[k].SetGrad(g)
			g.Free()
		}
	}
	return ps
}

func clipFree(ps []*torch.Tensor) {
	for _, p := range ps {
		p.Free()
	}
}

func TestClipGradNormMatchesPyTorch(t *testing.T) {
	var shapes [][]int64
	for _, s := range optimShapes {
		shapes = append(shapes, s.shape)
	}
	var cases []map[string]any
	for _, c := range clipCases {
		norm := any(c.normType)
		if math.IsInf(c.normType, 1) {
			norm = "inf"
		}
		cases = append(cases, map[string]any{"grads": clipGrads(c), "max": c.maxNorm, "norm": norm})
	}
	var want []struct {
		Total float64     `json:"total"`
		Grads [][]float64 `json:"grads"`
	}
	pyref.Run(t, clipPyScript, map[string]any{"shapes": shapes, "cases": cases}, &want)
	require.Len(t, want, len(clipCases))
	for ci, c := range clipCases {
		t.Run(c.name, func(t *testing.T) {
			ps := clipParams(clipGrads(c))
			defer clipFree(ps)
			torch.CollectGarbage()
			live := torch.LiveTensors()
			total, err := ClipGradNorm(ps, c.maxNorm, c.normType)
			require.NoError(t, err)
			require.Equal(t, live, torch.LiveTensors(), "ClipGradNorm leaves no tensors behind")
			require.Equal(t, want[ci].Total, total, "total norm (bitwise, float32)")
			for k, p := range ps {
				g := p.Grad()
				if want[ci].Grads[k] == nil {
					require.Nil(t, g)
					continue
				}
				got := g.Float32s()
				g.Free()
				for i := range got {
					require.Equal(t, want[ci].Grads[k][i], float64(got[i]), "%s[%d]", optimShapes[k].name, i)
				}
			}
		})
	}
}

func TestClipGradNormNonFinite(t *testing.T) {
	for _, bad := range []float32{float32(math.Inf(1)), float32(math.NaN())} {
		grads := clipGrads(clipCases[0])
		grads[2][1] = bad
		ps := clipParams(grads)
		total, err := ClipGradNorm(ps, 1, 2)
		require.True(t, errors.Is(err, ErrNonFiniteNorm), "%v", err)
		require.True(t, math.IsNaN(total) || math.IsInf(total, 1), "total %v reported", total)
		for k, p := range ps { // unchanged
			g := p.Grad()
			got := g.Float32s()
			g.Free()
			for i := range got {
				if k == 2 && i == 1 {
					continue
				}
				require.Equal(t, grads[k][i], got[i])
			}
		}
		clipFree(ps)
	}
	// No gradients at all: norm 0.
	ps := clipParams(make([][]float32, len(optimShapes)))
	defer clipFree(ps)
	total, err := ClipGradNorm(ps, 1, 2)
	require.NoError(t, err)
	require.Equal(t, 0.0, total)
	_, err = ClipGradNorm(ps, -1, 2)
	require.Error(t, err)
}

func TestClipGradValue(t *testing.T) {
	grads := clipGrads(clipCases[6]) // "b" has no gradient
	ps := clipParams(grads)
	defer clipFree(ps)
	torch.CollectGarbage()
	live := torch.LiveTensors()
	ClipGradValue(ps, 0.5)
	require.Equal(t, live, torch.LiveTensors())
	for k, p := range ps {
		g := p.Grad()
		if grads[k] == nil {
			require.Nil(t, g)
			continue
		}
		got := g.Float32s()
		g.Free()
		for i, v := range got {
			require.Equal(t, float32(math.Max(-0.5, math.Min(0.5, float64(grads[k][i])))), v)
		}
	}
}
