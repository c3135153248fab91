package train_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// tokenModel predicts a value per token of padded sequences; its loss is
// the mean over the micro-batch's real tokens (padding masked out), as a
// language model's or a TTS model's is.
type tokenModel struct {
	nn.Base
	l1, l2 *nn.Linear
}

func newTokenModel() *tokenModel {
	torch.ManualSeed(21)
	m := &tokenModel{}
	m.l1 = nn.RegisterModule(&m.Base, "l1", nn.NewLinear(6, 16, true))
	m.l2 = nn.RegisterModule(&m.Base, "l2", nn.NewLinear(16, 1, true))
	nn.To(m, torch.CPU, torch.Float64)
	return m
}

// mask is [B, L]: 1 for real tokens.
func mask(b *data.Batch) *torch.Tensor {
	l := b.Fields["x"].Size(1)
	pos := torch.Arange(0, float64(l), 1, torch.CPU).Unsqueeze(0)     // [1, L]
	return pos.Lt(b.Lengths["x"].Unsqueeze(1)).ToDType(torch.Float64) // [B, L]
}

func (m *tokenModel) loss(b *data.Batch) *torch.Tensor {
	y := m.l2.Forward(m.l1.Forward(b.Fields["x"]).Tanh()).SqueezeDim(-1) // [B, L]
	target := b.Fields["x"].MeanDim([]int64{-1}, false).Sin()            // [B, L]
	mk := mask(b)
	return y.Sub(target).Square().Mul(mk).Sum().Div(mk.Sum())
}

func tokens(b *data.Batch) float64 { return float64(b.Lengths["x"].Sum().ItemInt()) }

// Four micro-batches of ragged sequences (different token counts each)
// accumulate the gradient of the whole batch's mean over its tokens: the
// parameters after 5 AdamW steps equal those of one batch of 16, within
// 1e-6 in float64. Weighting by samples instead (the default) does not.
func TestTokenWeightedMeans(t *testing.T) {
	torch.ManualSeed(4)
	var samples []data.Sample
	for i := 0; i < 16; i++ {
		n := int64(1 + (i*7)%13) // 1..13 tokens
		samples = append(samples, data.Sample{"x": torch.Randn([]int64{n, 6}).ToDType(torch.Float64).Keep()})
	}
	b, err := data.PadCollate(map[string]data.Pad{"x": {Dim: 0}})(samples)
	require.NoError(t, err)
	defer b.Free()
	run := func(micro int, count train.CountFunc) []float64 {
		m := newTokenModel()
		defer nn.Free(m)
		opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-2))
		defer opt.Free()
		tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: micro, Accum: 16 / micro, Device: torch.CPU, Count: count})
		require.NoError(t, err)
		for s := 0; s < 5; s++ {
			info, err := tr.Step(b)
			require.NoError(t, err)
			if count != nil {
				require.Equal(t, tokens(b), info.Count)
			}
		}
		var out []float64
		for _, p := range nn.Parameters(m) {
			out = append(out, p.T.Float64s()...)
		}
		return out
	}
	whole := run(16, tokens)
	byTokens := run(4, tokens)
	bySamples := run(4, nil)
	require.InDeltaSlice(t, whole, byTokens, 1e-6, "token-weighted micro-batches = one batch")
	var d float64
	for i := range whole {
		d = max(d, abs(whole[i]-bySamples[i]))
	}
	t.Logf("max |Δparam| after 5 steps: token-weighted 4×4 vs batch 16 %.1e; sample-weighted %.1e", maxAbs(whole, byTokens), d)
	require.Greater(t, d, 1e-4, "weighting micro-batches by samples is a different mean")
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func maxAbs(a, b []float64) float64 {
	var d float64
	for i := range a {
		d = max(d, abs(a[i]-b[i]))
	}
	return d
}
