package nn_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

func stats(t *torch.Tensor) (mean, std, lo, hi float64) {
	v := t.Float64s()
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		std += (x - mean) * (x - mean)
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return mean, math.Sqrt(std / float64(len(v)-1)), lo, hi
}

func TestInitStatistics(t *testing.T) {
	shape := []int64{256, 128, 3} // fan_in 384, fan_out 768
	fanIn, fanOut := 384.0, 768.0
	relu := math.Sqrt(2)
	cases := []struct {
		name     string
		init     func(x *torch.Tensor)
		std      float64 // expected standard deviation
		bound    float64 // expected bound (0: unbounded)
		mean     float64
		tightLow bool // samples should come close to the bound
	}{
		{"KaimingUniform/relu/fan_in", func(x *torch.Tensor) { nn.KaimingUniform(x, 0, nn.FanIn, "relu") },
			relu / math.Sqrt(fanIn), math.Sqrt(3) * relu / math.Sqrt(fanIn), 0, true},
		{"KaimingUniform/a=sqrt5", func(x *torch.Tensor) { nn.KaimingUniform(x, math.Sqrt(5), nn.FanIn, "leaky_relu") },
			1 / math.Sqrt(3*fanIn), 1 / math.Sqrt(fanIn), 0, true},
		{"KaimingNormal/fan_out", func(x *torch.Tensor) { nn.KaimingNormal(x, 0, nn.FanOut, "relu") },
			relu / math.Sqrt(fanOut), 0, 0, false},
		{"XavierUniform/tanh", func(x *torch.Tensor) { nn.XavierUniform(x, nn.CalculateGain("tanh", 0)) },
			5.0 / 3 * math.Sqrt(2/(fanIn+fanOut)), 5.0 / 3 * math.Sqrt(6/(fanIn+fanOut)), 0, true},
		{"XavierNormal", func(x *torch.Tensor) { nn.XavierNormal(x, 1) }, math.Sqrt(2 / (fanIn + fanOut)), 0, 0, false},
		{"Normal", func(x *torch.Tensor) { nn.Normal(x, 1.5, 0.02) }, 0.02, 0, 1.5, false},
		{"Uniform", func(x *torch.Tensor) { nn.Uniform(x, -0.5, 0.5) }, 1 / math.Sqrt(12), 0.5, 0, true},
		// N(0,1) cut at ±2 has standard deviation 0.8796.
		{"TruncNormal", func(x *torch.Tensor) { nn.TruncNormal(x, 0, 1, -2, 2) }, 0.87962566, 2, 0, true},
		// std 0.02 cut at ±2 (timm's usage): effectively untruncated.
		{"TruncNormal/narrow", func(x *torch.Tensor) { nn.TruncNormal(x, 0, 0.02, -2, 2) }, 0.02, 0, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			torch.Tidy(func() {
				torch.ManualSeed(3)
				x := torch.Empty(shape, torch.RequiresGrad) // in place on a leaf: needs NoGrad inside
				c.init(x)
				require.True(t, x.RequiresGrad())
				mean, std, lo, hi := stats(x)
				require.InDelta(t, c.mean, mean, 4*c.std/math.Sqrt(98304)+1e-12)
				require.InEpsilon(t, c.std, std, 0.01)
				if c.bound > 0 {
					require.GreaterOrEqual(t, lo, c.mean-c.bound)
					require.LessOrEqual(t, hi, c.mean+c.bound)
					if c.tightLow {
						require.Less(t, lo, c.mean-0.99*c.bound)
						require.Greater(t, hi, c.mean+0.99*c.bound)
					}
				}
			})
		})
	}
	torch.Tidy(func() {
		nn.Zeros(torch.Ones([]int64{3}))
		o := nn.Ones(torch.Zeros([]int64{2, 2}))
		require.Equal(t, []float32{1, 1, 1, 1}, o.Float32s())
		require.Equal(t, []float32{0}, nn.Zeros(torch.Ones([]int64{1})).Float32s())
	})
}

func TestCalculateGainAndFans(t *testing.T) {
	require.Equal(t, 1.0, nn.CalculateGain("linear", 0))
	require.InDelta(t, math.Sqrt(2), nn.CalculateGain("relu", 0), 1e-15)
	require.InDelta(t, math.Sqrt(2/(1+0.01*0.01)), nn.CalculateGain("leaky_relu", math.NaN()), 1e-15)
	require.InDelta(t, 5.0/3, nn.CalculateGain("tanh", 0), 1e-15)
	in, out := nn.Fans([]int64{8, 4, 3, 3})
	require.Equal(t, int64(36), in)
	require.Equal(t, int64(72), out)
	require.Panics(t, func() { nn.Fans([]int64{5}) })
	require.Panics(t, func() { nn.CalculateGain("swish", 0) })
}

// With the same seed, the constructors draw exactly PyTorch's initial
// weights (same generator, same draws in the same order).
func TestDefaultInitMatchesPyTorch(t *testing.T) {
	cases := []struct {
		name  string
		build func() nn.Module
		py    string
	}{
		{"Linear", func() nn.Module { return nn.NewLinear(7, 5, true) }, "nn.Linear(7, 5)"},
		{"Bilinear", func() nn.Module { return nn.NewBilinear(3, 4, 2, true) }, "nn.Bilinear(3, 4, 2)"},
		{"Conv1d", func() nn.Module { return nn.NewConv1d(4, 6, 3, torch.ConvOpts{Groups: 2}, true) }, "nn.Conv1d(4, 6, 3, groups=2)"},
		{"Conv2d", func() nn.Module { return nn.NewConv2d(3, 4, []int64{3, 2}, torch.ConvOpts{}, true) }, "nn.Conv2d(3, 4, (3, 2))"},
		{"ConvTranspose2d", func() nn.Module { return nn.NewConvTranspose2d(4, 6, []int64{3}, torch.ConvOpts{Groups: 2}, true) }, "nn.ConvTranspose2d(4, 6, 3, groups=2)"},
		{"Embedding", func() nn.Module { return nn.NewEmbedding(10, 3, 1) }, "nn.Embedding(10, 3, padding_idx=1)"},
		{"BatchNorm1d", func() nn.Module { return nn.NewBatchNorm1d(3) }, "nn.BatchNorm1d(3)"},
		{"GroupNorm", func() nn.Module { return nn.NewGroupNorm(2, 4) }, "nn.GroupNorm(2, 4)"},
		{"MultiheadAttention", func() nn.Module { return nn.NewMultiheadAttention(8, 2, 0, false) }, "nn.MultiheadAttention(8, 2)"},
		{"TransformerEncoderLayer", func() nn.Module {
			c := nn.DefaultTransformerConfig(8, 2)
			c.DimFeedforward = 16
			return nn.NewTransformerEncoderLayer(c)
		}, "nn.TransformerEncoderLayer(8, 2, 16)"},
		{"TransformerDecoderLayer", func() nn.Module {
			c := nn.DefaultTransformerConfig(8, 2)
			c.DimFeedforward = 16
			return nn.NewTransformerDecoderLayer(c)
		}, "nn.TransformerDecoderLayer(8, 2, 16)"},
	}
	var pys []string
	var gos []map[string]jt
	for _, c := range cases {
		pys = append(pys, c.py)
		torch.Tidy(func() {
			torch.ManualSeed(42)
			sd := map[string]jt{}
			for _, p := range nn.StateDict(c.build()) {
				sd[p.Name] = enc(p.T)
			}
			gos = append(gos, sd)
		})
	}
	var out []map[string]jt
	pyref.Run(t, `
import torch.nn as nn
res = []
for src in inp:
    torch.manual_seed(42)
    m = eval(src)
    res.append({k: {'data': v.double().flatten().tolist(), 'shape': list(v.shape)} for k, v in m.state_dict().items()})
emit(res)
`, pys, &out)
	for k, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, len(out[k]), len(gos[k]))
			for name, want := range out[k] {
				got, ok := gos[k][name]
				require.True(t, ok, name)
				requireClose(t, name, got, want, 0) // bit for bit
			}
		})
	}
}
