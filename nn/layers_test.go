package nn_test

import (
	"testing"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

func act(a *nn.Activation) func() nn.Module { return func() nn.Module { return a } }

func TestLayersMatchPyTorch(t *testing.T) {
	co := func(stride, pad, dil, outPad []int64, groups int64) torch.ConvOpts {
		return torch.ConvOpts{Stride: stride, Padding: pad, Dilation: dil, OutputPadding: outPad, Groups: groups}
	}
	cases := []refCase{
		{name: "Linear", build: func() nn.Module { return nn.NewLinear(5, 3, true) },
			py: `m = nn.Linear(5, 3)`, inputs: layerIn(shp(4, 5))},
		{name: "Linear/nobias/3d", build: func() nn.Module { return nn.NewLinear(5, 3, false) },
			py: `m = nn.Linear(5, 3, bias=False)`, inputs: layerIn(shp(2, 3, 5))},
		{name: "Bilinear", build: func() nn.Module { return nn.NewBilinear(4, 3, 2, true) },
			fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{m.(*nn.Bilinear).Forward(xs[0], xs[1])}
			},
			py: `m = nn.Bilinear(4, 3, 2)`, inputs: layerIn(shp(5, 4), shp(5, 3))},
		{name: "Conv1d", build: func() nn.Module { return nn.NewConv1d(4, 6, 3, co(shp(2), shp(1), nil, nil, 0), true) },
			py: `m = nn.Conv1d(4, 6, 3, stride=2, padding=1)`, inputs: layerIn(shp(2, 4, 9))},
		{name: "Conv1d/groups/dilation", build: func() nn.Module { return nn.NewConv1d(4, 6, 3, co(nil, shp(2), shp(2), nil, 2), false) },
			py: `m = nn.Conv1d(4, 6, 3, padding=2, dilation=2, groups=2, bias=False)`, inputs: layerIn(shp(2, 4, 7))},
		{name: "Conv2d", build: func() nn.Module { return nn.NewConv2d(3, 4, shp(3, 2), co(nil, shp(1, 0), nil, nil, 0), true) },
			py: `m = nn.Conv2d(3, 4, (3, 2), padding=(1, 0))`, inputs: layerIn(shp(2, 3, 6, 5))},
		{name: "Conv2d/depthwise", build: func() nn.Module { return nn.NewConv2d(4, 4, shp(3), co(shp(2), shp(2), shp(2), nil, 4), true) },
			py: `m = nn.Conv2d(4, 4, 3, stride=2, padding=2, dilation=2, groups=4)`, inputs: layerIn(shp(2, 4, 7, 6))},
		{name: "ConvTranspose1d", build: func() nn.Module {
			return nn.NewConvTranspose1d(4, 3, 3, co(shp(2), shp(1), nil, shp(1), 0), true)
		}, py: `m = nn.ConvTranspose1d(4, 3, 3, stride=2, padding=1, output_padding=1)`, inputs: layerIn(shp(2, 4, 5))},
		{name: "ConvTranspose2d/groups", build: func() nn.Module {
			return nn.NewConvTranspose2d(4, 6, shp(3, 2), co(shp(2), nil, nil, nil, 2), true)
		}, py: `m = nn.ConvTranspose2d(4, 6, (3, 2), stride=2, groups=2)`, inputs: layerIn(shp(2, 4, 3, 4))},
		{name: "BatchNorm1d/train/twice", build: func() nn.Module { return nn.NewBatchNorm1d(4) }, train: true,
			fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
				b := m.(*nn.BatchNorm)
				return []*torch.Tensor{b.Forward(xs[0]), b.Forward(xs[0].MulScalar(2))}
			},
			py:     "m = nn.BatchNorm1d(4)\ndef fwd(m, x):\n    return m(x), m(2 * x)",
			inputs: layerIn(shp(6, 4))},
		{name: "BatchNorm1d/3d/cumulative", build: func() nn.Module { b := nn.NewBatchNorm1d(4); b.Momentum = -1; return b }, train: true,
			fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
				b := m.(*nn.BatchNorm)
				return []*torch.Tensor{b.Forward(xs[0]), b.Forward(xs[0].AddScalar(1))}
			},
			py:     "m = nn.BatchNorm1d(4, momentum=None)\ndef fwd(m, x):\n    return m(x), m(x + 1)",
			inputs: layerIn(shp(3, 4, 5))},
		{name: "BatchNorm2d/train", build: func() nn.Module { return nn.NewBatchNorm2d(3) }, train: true,
			py: `m = nn.BatchNorm2d(3)`, inputs: layerIn(shp(2, 3, 4, 4))},
		{name: "BatchNorm2d/eval", build: func() nn.Module { b := nn.NewBatchNorm2d(3); b.Eps = 1e-3; return b },
			py: `m = nn.BatchNorm2d(3, eps=1e-3)`, inputs: layerIn(shp(2, 3, 4, 4))},
		{name: "LayerNorm", build: func() nn.Module { return nn.NewLayerNorm(5) },
			py: `m = nn.LayerNorm(5)`, inputs: layerIn(shp(2, 3, 5))},
		{name: "LayerNorm/2d", build: func() nn.Module { return nn.NewLayerNorm(3, 5) },
			py: `m = nn.LayerNorm((3, 5))`, inputs: layerIn(shp(2, 3, 5))},
		{name: "GroupNorm", build: func() nn.Module { return nn.NewGroupNorm(2, 6) },
			py: `m = nn.GroupNorm(2, 6)`, inputs: layerIn(shp(2, 6, 4))},
		{name: "RMSNorm", build: func() nn.Module { return nn.NewRMSNorm(5) },
			py: `
class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
m = RMSNorm(5)`, inputs: layerIn(shp(2, 3, 5))},
		{name: "Embedding/padding", build: func() nn.Module { return nn.NewEmbedding(10, 4, 2) },
			py: `m = nn.Embedding(10, 4, padding_idx=2)`,
			inputs: func() []*torch.Tensor {
				return []*torch.Tensor{torch.FromSlice([]int64{1, 2, 3, 2, 9, 0, 2, 5}, shp(2, 4))}
			}},
		{name: "ReLU", build: act(nn.NewReLU()), py: `m = nn.ReLU()`, inputs: layerIn(shp(3, 6))},
		{name: "GELU", build: act(nn.NewGELU("none")), py: `m = nn.GELU()`, inputs: layerIn(shp(3, 6))},
		{name: "GELU/tanh", build: act(nn.NewGELU("tanh")), py: `m = nn.GELU(approximate='tanh')`, inputs: layerIn(shp(3, 6))},
		{name: "SiLU", build: act(nn.NewSiLU()), py: `m = nn.SiLU()`, inputs: layerIn(shp(3, 6))},
		{name: "Tanh", build: act(nn.NewTanh()), py: `m = nn.Tanh()`, inputs: layerIn(shp(3, 6))},
		{name: "Sigmoid", build: act(nn.NewSigmoid()), py: `m = nn.Sigmoid()`, inputs: layerIn(shp(3, 6))},
		{name: "LeakyReLU", build: act(nn.NewLeakyReLU(0.2)), py: `m = nn.LeakyReLU(0.2)`, inputs: layerIn(shp(3, 6))},
		{name: "GLU", build: act(nn.NewGLU(-1)), py: `m = nn.GLU()`, inputs: layerIn(shp(3, 6))},
		{name: "Dropout/eval", build: func() nn.Module { return nn.NewDropout(0.5) },
			py: `m = nn.Dropout(0.5)`, inputs: layerIn(shp(3, 6))},
		{name: "Sequential/train", train: true, build: func() nn.Module {
			return nn.NewSequential(nn.NewLinear(5, 4, true), nn.NewBatchNorm1d(4), nn.NewReLU(), nn.NewLinear(4, 2, true))
		}, py: `m = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))`, inputs: layerIn(shp(6, 5))},
		{name: "SinusoidalPositionalEncoding", build: func() nn.Module { return nn.NewSinusoidalPositionalEncoding(6, 20, false) },
			py: `
class PE(nn.Module):
    def __init__(self, d, max_len):
        super().__init__()
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer('pe', pe, persistent=False)
    def forward(self, x):
        return x + self.pe[:x.size(1)]
m = PE(6, 20)`, inputs: layerIn(shp(2, 7, 6)), tol: 1e-6}, // the table is float32 in both
		{name: "LearnedPositionalEmbedding", build: func() nn.Module { return nn.NewLearnedPositionalEmbedding(10, 4) },
			py: `
class LPE(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, d))
    def forward(self, x):
        return x + self.weight[:x.size(1)]
m = LPE(10, 4)`, inputs: layerIn(shp(2, 7, 4))},
		{name: "PatchEmbedding", build: func() nn.Module { return nn.NewPatchEmbedding(4, 3, 8) },
			py: `
class PatchEmbed(nn.Module):
    def __init__(self, patch, c, d):
        super().__init__()
        self.proj = nn.Conv2d(c, d, patch, stride=patch)
    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)
m = PatchEmbed(4, 3, 8)`, inputs: layerIn(shp(2, 3, 8, 12))},
	}
	runRefCases(t, cases)
}
