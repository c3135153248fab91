package nn_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// noParams is an empty module for losses without state.
type noParams struct{ nn.Base }

func lossCase(name, py string, inputs func() []*torch.Tensor, f func(xs []*torch.Tensor) *torch.Tensor) refCase {
	return refCase{
		name:   name,
		build:  func() nn.Module { return &noParams{} },
		fwd:    func(_ nn.Module, xs []*torch.Tensor) []*torch.Tensor { return []*torch.Tensor{f(xs)} },
		py:     "m = nn.Module()\ndef fwd(m, *xs):\n    return " + py,
		inputs: inputs, keepState: true,
	}
}

func ints(v []int64, shape ...int64) *torch.Tensor { return torch.FromSlice(v, shape) }

func TestLossesMatchPyTorch(t *testing.T) {
	w := func() *torch.Tensor { return torch.FromSlice([]float64{0.5, 2, 1, 1.5}, nil) }
	const pyW = "torch.tensor([0.5, 2, 1, 1.5], dtype=torch.float64)"
	ceIn := func() []*torch.Tensor { return []*torch.Tensor{randn(6, 4), ints([]int64{0, 1, 3, 2, 1, 0}, 6)} }
	ce := func(mod func(l *nn.CrossEntropyLoss)) func(xs []*torch.Tensor) *torch.Tensor {
		return func(xs []*torch.Tensor) *torch.Tensor {
			l := nn.NewCrossEntropyLoss()
			mod(l)
			return l.Forward(xs[0], xs[1])
		}
	}
	// CTC: logits (T, N, C) → log_softmax in both; targets padded (N, S).
	ctcIn := func() []*torch.Tensor {
		return []*torch.Tensor{randn(8, 3, 5), ints([]int64{1, 2, 2, 3, 4, 1, 0, 0, 2, 0, 0, 0}, 3, 4),
			ints([]int64{8, 6, 7}, 3), ints([]int64{4, 2, 1}, 3)}
	}
	ctc := func(mod func(l *nn.CTCLoss)) func(xs []*torch.Tensor) *torch.Tensor {
		return func(xs []*torch.Tensor) *torch.Tensor {
			l := nn.NewCTCLoss()
			mod(l)
			return l.Forward(xs[0].LogSoftmax(2), xs[1], xs[2], xs[3])
		}
	}
	pair := func() []*torch.Tensor { return []*torch.Tensor{randn(4, 3), randn(4, 3)} }
	cases := []refCase{
		lossCase("CrossEntropy", "F.cross_entropy(xs[0], xs[1])", ceIn, ce(func(*nn.CrossEntropyLoss) {})),
		lossCase("CrossEntropy/weight/ignore/smoothing",
			"F.cross_entropy(xs[0], xs[1], weight="+pyW+", ignore_index=1, label_smoothing=0.1)", ceIn,
			ce(func(l *nn.CrossEntropyLoss) { l.Weight, l.IgnoreIndex, l.LabelSmoothing = w(), 1, 0.1 })),
		lossCase("CrossEntropy/sum/smoothing/weight",
			"F.cross_entropy(xs[0], xs[1], weight="+pyW+", reduction='sum', label_smoothing=0.2)", ceIn,
			ce(func(l *nn.CrossEntropyLoss) { l.Weight, l.Reduction, l.LabelSmoothing = w(), torch.ReduceSum, 0.2 })),
		lossCase("CrossEntropy/none/spatial", "F.cross_entropy(xs[0], xs[1], reduction='none')",
			func() []*torch.Tensor {
				return []*torch.Tensor{randn(2, 4, 3), ints([]int64{0, 1, 2, 3, 3, 2}, 2, 3)}
			}, ce(func(l *nn.CrossEntropyLoss) { l.Reduction = torch.ReduceNone })),
		lossCase("NLL/weight/ignore", "F.nll_loss(xs[0].log_softmax(1), xs[1], weight="+pyW+", ignore_index=0)", ceIn,
			func(xs []*torch.Tensor) *torch.Tensor {
				l := nn.NewNLLLoss()
				l.Weight, l.IgnoreIndex = w(), 0
				return l.Forward(xs[0].LogSoftmax(1), xs[1])
			}),
		lossCase("CTC/mean", "F.ctc_loss(xs[0].log_softmax(2), xs[1], xs[2], xs[3])", ctcIn, ctc(func(*nn.CTCLoss) {})),
		lossCase("CTC/sum/blank4", "F.ctc_loss(xs[0].log_softmax(2), xs[1].clamp(max=3), xs[2], xs[3], blank=4, reduction='sum')",
			ctcIn, func(xs []*torch.Tensor) *torch.Tensor {
				l := nn.NewCTCLoss()
				l.Blank, l.Reduction = 4, torch.ReduceSum
				return l.Forward(xs[0].LogSoftmax(2), xs[1].ClampMax(3), xs[2], xs[3])
			}),
		lossCase("CTC/none/zero_infinity", "F.ctc_loss(xs[0].log_softmax(2), xs[1], xs[2], xs[3], reduction='none', zero_infinity=True)",
			func() []*torch.Tensor {
				in := ctcIn()
				in[2] = ints([]int64{8, 1, 7}, 3) // sequence 1: 2 labels in 1 frame is impossible → inf → 0
				return in
			}, ctc(func(l *nn.CTCLoss) { l.Reduction, l.ZeroInfinity = torch.ReduceNone, true })),
		lossCase("BCEWithLogits/pos_weight/weight",
			"F.binary_cross_entropy_with_logits(xs[0], xs[1].sigmoid(), weight=torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64), pos_weight=torch.tensor([3.0, 1.0, 0.2], dtype=torch.float64))",
			pair, func(xs []*torch.Tensor) *torch.Tensor {
				l := nn.NewBCEWithLogitsLoss()
				l.Weight = torch.FromSlice([]float64{1, 0.5, 2}, nil)
				l.PosWeight = torch.FromSlice([]float64{3, 1, 0.2}, nil)
				return l.Forward(xs[0], xs[1].Sigmoid())
			}),
		lossCase("L1", "F.l1_loss(xs[0], xs[1])", pair, func(xs []*torch.Tensor) *torch.Tensor { return nn.NewL1Loss().Forward(xs[0], xs[1]) }),
		lossCase("MSE/sum", "F.mse_loss(xs[0], xs[1], reduction='sum')", pair, func(xs []*torch.Tensor) *torch.Tensor {
			l := nn.NewMSELoss()
			l.Reduction = torch.ReduceSum
			return l.Forward(xs[0], xs[1])
		}),
		lossCase("SmoothL1/beta", "F.smooth_l1_loss(xs[0], xs[1], beta=0.5)", pair, func(xs []*torch.Tensor) *torch.Tensor {
			l := nn.NewSmoothL1Loss()
			l.Beta = 0.5
			return l.Forward(xs[0], xs[1])
		}),
	}
	const clipPy = `
class CLIP(nn.Module):
    def __init__(self):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))
    def forward(self, img, txt):
        img = img / img.norm(dim=-1, keepdim=True)
        txt = txt / txt.norm(dim=-1, keepdim=True)
        lpi = self.logit_scale.exp().clamp(max=100) * img @ txt.t()
        labels = torch.arange(len(img))
        return (F.cross_entropy(lpi, labels) + F.cross_entropy(lpi.t(), labels)) / 2
m = CLIP()`
	clipFwd := func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
		return []*torch.Tensor{m.(*nn.CLIPLoss).Forward(xs[0], xs[1])}
	}
	cases = append(cases,
		refCase{name: "CLIP", build: func() nn.Module { return nn.NewCLIPLoss() }, fwd: clipFwd, py: clipPy,
			inputs: layerIn(shp(5, 6), shp(5, 6))},
		refCase{name: "CLIP/clamped", keepState: true, fwd: clipFwd, py: clipPy, inputs: layerIn(shp(5, 6), shp(5, 6)),
			build: func() nn.Module { c := nn.NewCLIPLoss(); nn.Constant(c.LogitScale, 5); return c }},
	)
	runRefCases(t, cases)
}

func TestCLIPLossInit(t *testing.T) {
	c := nn.NewCLIPLoss()
	sd := nn.StateDict(c)
	require.Len(t, sd, 1)
	require.Equal(t, "logit_scale", sd[0].Name)
	require.Empty(t, sd[0].T.Shape())
	require.InDelta(t, math.Log(1/0.07), sd[0].T.Item(), 1e-6)
	require.True(t, sd[0].T.RequiresGrad())
}
