package nn_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

func seqModel() *nn.Sequential {
	return nn.NewSequential(nn.NewLinear(5, 4, true), nn.NewBatchNorm1d(4), nn.NewReLU())
}

func TestLoadStateDict(t *testing.T) {
	torch.Tidy(func() {
		src, dst := seqModel(), seqModel()
		full := nn.StateDict(src)
		require.Equal(t, []string{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"}, full.Names())
		w, ok := full.Get("0.weight")
		require.True(t, ok)
		require.Same(t, src.Layers[0].(*nn.Linear).Weight, w)
		_, ok = full.Get("2.weight")
		require.False(t, ok)

		var missing torch.StateDict
		for _, p := range full {
			if p.Name != "1.running_var" {
				missing = append(missing, p)
			}
		}
		extra := append(torch.StateDict{{Name: "2.weight", T: torch.Ones([]int64{4})}}, full...)
		badShape := append(torch.StateDict(nil), full...)
		badShape[0].T = torch.Zeros([]int64{4, 6})

		cases := []struct {
			name       string
			sd         torch.StateDict
			strict     bool
			wantErr    string
			missing    []string
			unexpected []string
		}{
			{name: "exact/strict", sd: full, strict: true},
			{name: "missing/strict", sd: missing, strict: true, wantErr: "missing keys [1.running_var]", missing: []string{"1.running_var"}},
			{name: "missing/lenient", sd: missing, missing: []string{"1.running_var"}},
			{name: "unexpected/strict", sd: extra, strict: true, wantErr: "unexpected keys [2.weight]", unexpected: []string{"2.weight"}},
			{name: "unexpected/lenient", sd: extra, unexpected: []string{"2.weight"}},
			{name: "shape/lenient", sd: badShape, wantErr: "size mismatch for 0.weight"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				rep, err := nn.LoadStateDict(dst, c.sd, c.strict)
				if c.wantErr != "" {
					require.ErrorContains(t, err, c.wantErr)
				} else {
					require.NoError(t, err)
				}
				require.Equal(t, c.missing, rep.Missing)
				require.Equal(t, c.unexpected, rep.Unexpected)
			})
		}
		// After the successful loads dst equals src.
		want := full.Map()
		for _, p := range nn.StateDict(dst) {
			require.True(t, p.T.Equal(want[p.Name]), p.Name)
		}
	})
}

func TestTrainSwitchesDropoutAndBatchNorm(t *testing.T) {
	torch.Tidy(func() {
		torch.ManualSeed(0)
		drop := nn.NewDropout(0.5)
		bn := nn.NewBatchNorm1d(3)
		m := nn.NewSequential(bn, drop)
		x := torch.Randn([]int64{400, 3}).AddScalar(2)

		// training: dropout zeroes about half, batch norm updates its statistics
		y := m.Forward(x)
		zeros := y.EqScalar(0).ToDType(torch.Float32).Mean().Item()
		require.InDelta(t, 0.5, zeros, 0.06)
		require.Equal(t, int64(1), bn.NumBatchesTracked.ItemInt())
		rm := bn.RunningMean.Clone()
		require.InDelta(t, 0.2, rm.Mean().Item(), 0.03) // 0.9·0 + 0.1·≈2

		nn.SetTraining(m, false)
		require.False(t, drop.Training())
		require.False(t, bn.Training())
		y1, y2 := m.Forward(x), m.Forward(x)
		require.True(t, y1.Equal(y2), "eval is deterministic")
		require.Equal(t, int64(1), bn.NumBatchesTracked.ItemInt(), "eval does not count batches")
		require.True(t, rm.Equal(bn.RunningMean), "eval leaves running statistics")
		// eval normalises with the running statistics
		want := x.Sub(bn.RunningMean).Div(bn.RunningVar.AddScalar(bn.Eps).Sqrt())
		require.True(t, y1.AllClose(want, 1e-5, 1e-5))

		nn.SetTraining(m, true)
		require.True(t, drop.Training())
		require.False(t, m.Forward(x).Equal(m.Forward(x)))
	})
}

// Forward and backward inside Tidy leave no tensor behind, and layers own
// only their parameters and buffers.
func TestLayersDoNotLeak(t *testing.T) {
	c := nn.DefaultTransformerConfig(8, 2)
	c.DimFeedforward, c.NormFirst, c.BatchFirst = 16, true, true
	enc := nn.NewTransformerEncoder(c, 2, true)
	dec := nn.NewTransformerDecoderLayer(c)
	seq := nn.NewSequential(nn.NewConv1d(3, 4, 3, torch.ConvOpts{}, true), nn.NewBatchNorm1d(4), nn.NewGELU("tanh"), nn.NewDropout(0.1))
	rms, pe, pos := nn.NewRMSNorm(8), nn.NewSinusoidalPositionalEncoding(8, 16, false), nn.NewLearnedPositionalEmbedding(16, 8)
	patch, clip := nn.NewPatchEmbedding(2, 3, 8), nn.NewCLIPLoss()
	step := func() {
		torch.Tidy(func() {
			x := torch.Randn([]int64{2, 5, 8}, torch.RequiresGrad)
			kpm := torch.Zeros([]int64{2, 5}, torch.Bool)
			h := enc.Forward(pos.Forward(pe.Forward(x)), nn.AttnOpts{KeyPaddingMask: kpm, Causal: true})
			h = dec.Forward(rms.Forward(h), x, nn.AttnOpts{Causal: true}, nn.AttnOpts{})
			s := seq.Forward(torch.Randn([]int64{2, 3, 7}))
			p := patch.Forward(torch.Randn([]int64{2, 3, 4, 4}))
			loss := h.Sum().Add(s.Sum()).Add(p.Sum()).Add(clip.Forward(h.MeanDim([]int64{1}, false), p.MeanDim([]int64{1}, false)))
			loss.Backward()
		})
	}
	step() // first call: lazily created state (gradients) appears
	for _, m := range []nn.Module{enc, dec, seq, rms, pos, patch, clip} {
		torch.ZeroGrad(nn.Tensors(nn.Parameters(m)))
	}
	torch.CollectGarbage()
	before := torch.LiveTensors()
	step()
	for _, m := range []nn.Module{enc, dec, seq, rms, pos, patch, clip} {
		torch.ZeroGrad(nn.Tensors(nn.Parameters(m)))
	}
	require.Equal(t, before, torch.LiveTensors())

	// constructors keep only what they register
	before = torch.LiveTensors()
	var l *nn.TransformerEncoderLayer
	torch.Tidy(func() { l = nn.NewTransformerEncoderLayer(c) })
	require.Equal(t, before+int64(len(nn.StateDict(l))), torch.LiveTensors())
	before = torch.LiveTensors()
	s := nn.NewSinusoidalPositionalEncoding(8, 16, true)
	require.Equal(t, before+1, torch.LiveTensors())
	require.Len(t, nn.StateDict(s), 1)
}
