package nn

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

// normMixedScript runs LayerNorm(6) and GroupNorm(2, 6) on a bfloat16
// input with float32 parameters, two ways: as casts around the norm (x to
// float32, the norm, the result to bfloat16: what mixedNorm does) and, on
// PyTorch 2.x, natively (its CPU kernels take the mix). For each it
// reports the output and, for the loss Σ y·r in float32, the gradients of
// x and of the parameters.
const normMixedScript = `
res = {}
for name, mk in [('layer', lambda: torch.nn.LayerNorm(6)), ('group', lambda: torch.nn.GroupNorm(2, 6))]:
    c = inp[name]
    out = {}
    for how in ['cast', 'native']:
        m = mk()
        with torch.no_grad():
            m.weight.copy_(T(c['w'], torch.float32))
            m.bias.copy_(T(c['b'], torch.float32))
        x = T(c['x'], torch.float32).to(torch.bfloat16).requires_grad_(True)
        r = T(c['r'], torch.float32)
        try:
            y = m(x.float()).to(torch.bfloat16) if how == 'cast' else m(x)
        except RuntimeError as e:
            out[how] = {'error': str(e)}
            continue
        (y.float() * r).sum().backward()
        out[how] = {'y': t2l(y.float()), 'dx': t2l(x.grad.float()),
                    'dw': t2l(m.weight.grad), 'db': t2l(m.bias.grad), 'dtype': str(y.dtype)}
    res[name] = out
emit(res)
`

// TestNormMixedPrecision checks LayerNorm and GroupNorm on a bfloat16
// input with float32 parameters (a norm after a convolution under CPU
// autocast) on both of mixedNorm's paths, each forced: the casts equal
// PyTorch's casts on the same libtorch bit for bit; the native kernel
// equals PyTorch's where it takes the mix (2.x), and where it refuses it
// (1.13, the fault the casts exist for) torchfit panics with a
// *torch.Error as PyTorch raises.
func TestNormMixedPrecision(t *testing.T) {
	type pyCase struct {
		X [][][]float64 `json:"x"`
		R [][][]float64 `json:"r"`
		W []float64     `json:"w"`
		B []float64     `json:"b"`
	}
	type pyRes struct {
		Y, DX  [][][]float64
		DW, DB []float64
		DType  string
		Error  string
	}
	torch.ManualSeed(3)
	layer, group := NewLayerNorm(6), NewGroupNorm(2, 6)
	defer Free(layer)
	defer Free(group)
	mods := map[string]interface {
		Forward(*torch.Tensor) *torch.Tensor
	}{"layer": layer, "group": group}
	params := map[string][2]*torch.Tensor{"layer": {layer.Weight, layer.Bias}, "group": {group.Weight, group.Bias}}
	in := map[string]pyCase{}
	xs, rs := map[string]*torch.Tensor{}, map[string]*torch.Tensor{}
	for name, p := range params {
		torch.NoGrad(func() {
			p[0].AddIn(torch.RandnLike(p[0]), 0.3)
			p[1].AddIn(torch.RandnLike(p[1]), 0.3)
		})
		// bfloat16 values, so that both sides start from the same input.
		x := torch.Randn([]int64{2, 6, 6}).MulScalar(3).AddScalar(1).ToDType(torch.BFloat16).ToDType(torch.Float32).Keep()
		r := torch.Randn([]int64{2, 6, 6}).Keep()
		defer x.Free()
		defer r.Free()
		xs[name], rs[name] = x, r
		in[name] = pyCase{X: rows3(x), R: rows3(r), W: p[0].Detach().Float64s(), B: p[1].Detach().Float64s()}
	}
	var py map[string]map[string]pyRes
	pyref.Run(t, normMixedScript, in, &py)

	run := func(name string) (pyRes, error) {
		var out pyRes
		err := torch.TidyErr(func() error {
			for _, p := range params[name] {
				p.SetGrad(nil)
			}
			x := xs[name].ToDType(torch.BFloat16).Detach()
			x.SetRequiresGrad(true)
			y := mods[name].Forward(x)
			y.ToDType(torch.Float32).Mul(rs[name]).Sum().Backward()
			out = pyRes{Y: rows3(y.ToDType(torch.Float32)), DX: rows3(x.Grad().ToDType(torch.Float32)),
				DW: params[name][0].Grad().Float64s(), DB: params[name][1].Grad().Float64s(), DType: y.DType().String()}
			return nil
		})
		return out, err
	}
	for _, cast := range []bool{true, false} {
		prev := castNorms
		castNorms = func() bool { return cast }
		for name := range params {
			how := map[bool]string{true: "cast", false: "native"}[cast]
			t.Run(name+"/"+how, func(t *testing.T) {
				want := py[name][how]
				got, err := run(name)
				if want.Error != "" {
					// PyTorch refuses the mix here (1.13): so does the kernel.
					var te *torch.Error
					require.ErrorAs(t, err, &te)
					t.Logf("libtorch refuses the mix natively, as PyTorch does: %v", err)
					return
				}
				require.NoError(t, err)
				require.Equal(t, "bfloat16", got.DType)
				require.Equal(t, "torch.bfloat16", want.DType)
				// The bfloat16 output and input gradient bit for bit; the
				// float32 parameter gradients are sums over the batch
				// whose order follows libtorch's threads (a float32 ulp
				// apart on 2.11 with the casts; the native kernel's
				// differ by up to a bfloat16 ulp).
				require.Equal(t, want.Y, got.Y, "output")
				require.Equal(t, want.DX, got.DX, "input gradient")
				tol := map[bool]float64{true: 1e-6, false: 1e-2}[cast]
				requireNear(t, want.DW, got.DW, tol, "weight gradient")
				requireNear(t, want.DB, got.DB, tol, "bias gradient")
			})
		}
		castNorms = prev
	}
}

// rows3 is a 3-d tensor as nested slices.
func rows3(t *torch.Tensor) [][][]float64 {
	s := t.Shape()
	v := t.Detach().Float64s()
	out := make([][][]float64, s[0])
	for i := range out {
		out[i] = make([][]float64, s[1])
		for j := range out[i] {
			k := (i*int(s[1]) + j) * int(s[2])
			out[i][j] = v[k : k+int(s[2])]
		}
	}
	return out
}

// requireNear checks |got − want| ≤ tol·(1 + max|want|) elementwise.
func requireNear(t *testing.T, want, got []float64, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	for i := range want {
		require.LessOrEqual(t, math.Abs(got[i]-want[i]), tol*(1+scale), "%s [%d]: %v, want %v", what, i, got[i], want[i])
	}
}
