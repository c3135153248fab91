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
	for _, mode := range clipMulModes(t) {
		restore := mode.force()
		for _, fn := range clipFuncs {
			for ci, c := range clipCases {
				t.Run(mode.name+"/"+fn.name+"/"+c.name, func(t *testing.T) {
					ps := clipParams(clipGrads(c))
					defer clipFree(ps)
					torch.CollectGarbage()
					live := torch.LiveTensors()
					total, err := fn.clip(ps, c.maxNorm, c.normType)
					require.NoError(t, err)
					require.Equal(t, live, torch.LiveTensors(), "%s leaves no tensors behind", fn.name)
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
		restore()
	}
}

// clipFuncs are the two clipping functions, each returning the total norm
// as a number (ClipGradNormOnDevice's read after it returns).
var clipFuncs = []struct {
	name string
	clip func(ps []*torch.Tensor, maxNorm, normType float64) (float64, error)
}{
	{"host", ClipGradNorm},
	{"on-device", func(ps []*torch.Tensor, maxNorm, normType float64) (float64, error) {
		total, err := ClipGradNormOnDevice(ps, maxNorm, normType)
		if err != nil || total == nil {
			return 0, err
		}
		defer total.Free()
		return total.Item(), nil
	}},
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

// clipMode is one way ClipGradNorm scales the gradients.
type clipMode struct {
	name    string
	foreach bool
}

// force makes ClipGradNorm take the mode's path and returns what undoes it.
func (m clipMode) force() (restore func()) {
	prev := foreachMulTensor
	foreachMulTensor = func() bool { return m.foreach }
	return func() { foreachMulTensor = prev }
}

// clipMulModes is every path this libtorch can take: one mul_ per gradient
// always, and _foreach_mul_.Tensor where libtorch has it (2.1 and later;
// the suite's libtorch 2.x run takes it).
func clipMulModes(t *testing.T) []clipMode {
	modes := []clipMode{{name: "mul-each"}}
	if _, err := torch.OpSchema("aten::_foreach_mul_", "Tensor"); err == nil {
		modes = append(modes, clipMode{name: "foreach-mul", foreach: true})
	} else {
		maj, min, _ := torch.LibtorchVersion()
		t.Logf("libtorch %d.%d has no _foreach_mul_.Tensor: the per-gradient path only", maj, min)
	}
	return modes
}

// TestClipGradNormCallsPerModel checks that the number of calls into
// libtorch does not grow with the number of parameters on the foreach
// path (on CUDA each call is at least one kernel launch, the host time a
// small model's step is bound by): 4 gradients or 40, the same calls.
func TestClipGradNormCallsPerModel(t *testing.T) {
	for _, mode := range clipMulModes(t) {
		t.Run(mode.name, func(t *testing.T) {
			defer mode.force()()
			calls := func(n int) map[string]int64 {
				ps := make([]*torch.Tensor, n)
				for k := range ps {
					ps[k] = torch.Zeros([]int64{3}).Keep().SetRequiresGrad(true)
					g := torch.Full([]int64{3}, float64(k+1), torch.Float32)
					ps[k].SetGrad(g)
					g.Free()
				}
				defer clipFree(ps)
				out := map[string]int64{}
				for _, s := range torch.CountCalls(func() {
					_, err := ClipGradNorm(ps, 1, 2)
					require.NoError(t, err)
				}) {
					if s.Name[0] != '(' { // operators, not handles and tensor facts
						out[s.Name] = s.Calls
					}
				}
				return out
			}
			few, many := calls(4), calls(40)
			require.Equal(t, int64(1), few["aten::_foreach_norm.Scalar"], "%v", few)
			require.Equal(t, int64(1), few["aten::item"], "ClipGradNorm reads the total once: %v", few)
			if mode.foreach {
				require.Equal(t, few, many)
				require.Equal(t, int64(1), many["aten::_foreach_mul_.Tensor"], "%v", many)
				return
			}
			require.Equal(t, int64(4), few["aten::mul_.Tensor"], "%v", few)
			require.Equal(t, int64(40), many["aten::mul_.Tensor"], "%v", many)
		})
	}
}

const clipMixedScript = `
ps = []
for g, dt in zip(inp["grads"], inp["dtypes"]):
    p = torch.zeros(len(g), dtype=getattr(torch, dt), requires_grad=True)
    p.grad = torch.tensor(g, dtype=p.dtype)
    ps.append(p)
total = torch.nn.utils.clip_grad_norm_(ps, inp["max"], 2.0)
emit({"total": total.item(), "grads": [p.grad.double().tolist() for p in ps]})
`

// TestClipGradNormMixedDTypes: float32 and float64 gradients form two
// groups; the total is their stacked norms' (in float64, by promotion),
// as PyTorch's.
func TestClipGradNormMixedDTypes(t *testing.T) {
	grads := [][]float64{{0.5, -1.25, 3}, {2, 0.125}, {1.0 / 3, -7}, {0.1}}
	dtypes := []string{"float32", "float32", "float64", "float64"}
	var want struct {
		Total float64     `json:"total"`
		Grads [][]float64 `json:"grads"`
	}
	pyref.Run(t, clipMixedScript, map[string]any{"grads": grads, "dtypes": dtypes, "max": 1.5}, &want)
	for _, mode := range clipMulModes(t) {
		t.Run(mode.name, func(t *testing.T) {
			defer mode.force()()
			ps := make([]*torch.Tensor, len(grads))
			for k, g := range grads {
				dt := torch.Float32
				if dtypes[k] == "float64" {
					dt = torch.Float64
				}
				ps[k] = torch.Zeros([]int64{int64(len(g))}, dt).Keep().SetRequiresGrad(true)
				gt := torch.FromSlice(g, []int64{int64(len(g))}).ToDType(dt)
				ps[k].SetGrad(gt)
				gt.Free()
			}
			defer clipFree(ps)
			total, err := ClipGradNorm(ps, 1.5, 2)
			require.NoError(t, err)
			require.Equal(t, want.Total, total)
			for k, p := range ps {
				g := p.Grad()
				got := g.Float64s()
				g.Free()
				require.Equal(t, want.Grads[k], got, "gradient %d (%s)", k, dtypes[k])
			}
		})
	}
}

// TestClipGradNormOnDevice: no value crosses to the host (on a GPU: no
// synchronisation, so the clip can be captured in a CUDA graph), where
// ClipGradNorm reads its total once; a non-finite norm scales the
// gradients by nan as PyTorch's default does; no gradients give a nil
// norm; a negative max norm is refused.
func TestClipGradNormOnDevice(t *testing.T) {
	ps := clipParams(clipGrads(clipCases[0]))
	var total *torch.Tensor
	stats := torch.CountCalls(func() {
		var err error
		total, err = ClipGradNormOnDevice(ps, 1, 2)
		require.NoError(t, err)
	})
	require.Empty(t, torch.HostTransfers(stats), "%v", stats)
	require.NotNil(t, total)
	total.Free()
	stats = torch.CountCalls(func() {
		_, err := ClipGradNorm(ps, 1, 2)
		require.NoError(t, err)
	})
	require.Equal(t, []torch.CallStat{{Name: "aten::item", Calls: 1}}, zeroTimes(torch.HostTransfers(stats)))
	clipFree(ps)

	grads := clipGrads(clipCases[0])
	grads[2][1] = float32(math.NaN())
	ps = clipParams(grads)
	total, err := ClipGradNormOnDevice(ps, 1, 2)
	require.NoError(t, err)
	require.True(t, math.IsNaN(total.Item()))
	total.Free()
	g := ps[0].Grad()
	require.True(t, math.IsNaN(float64(g.Float32s()[0])), "scaled by nan, as torch.nn.utils.clip_grad_norm_")
	g.Free()
	clipFree(ps)

	ps = clipParams(make([][]float32, len(optimShapes)))
	defer clipFree(ps)
	total, err = ClipGradNormOnDevice(ps, 1, 2)
	require.NoError(t, err)
	require.Nil(t, total)
	_, err = ClipGradNormOnDevice(ps, -1, 2)
	require.Error(t, err)
}

func zeroTimes(stats []torch.CallStat) []torch.CallStat {
	for k := range stats {
		stats[k].Time = 0
	}
	return stats
}
