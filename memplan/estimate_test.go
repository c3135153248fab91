package memplan_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// estModel is a small transformer classifier: encoder layers over
// (B, S, E) inputs, mean-pooled, then a linear head.
type estModel struct {
	nn.Base
	Layers *nn.ModuleList[*nn.TransformerEncoderLayer]
	Head   *nn.Linear
}

const estSeq, estDim, estClasses = 32, 64, 10

func newEstModel(layers int) *estModel {
	torch.ManualSeed(1)
	m := &estModel{}
	c := nn.DefaultTransformerConfig(estDim, 4)
	c.DimFeedforward, c.BatchFirst = 256, true
	m.Layers = nn.RegisterModule(&m.Base, "layers", nn.NewModuleList[*nn.TransformerEncoderLayer]())
	for k := 0; k < layers; k++ {
		m.Layers.Append(nn.NewTransformerEncoderLayer(c))
	}
	m.Head = nn.RegisterModule(&m.Base, "head", nn.NewLinear(estDim, estClasses, true))
	return m
}

func (m *estModel) loss(batch int) *torch.Tensor {
	x := torch.Randn([]int64{int64(batch), estSeq, estDim})
	y := torch.Randint(0, estClasses, []int64{int64(batch)})
	h := x
	for _, l := range m.Layers.Items {
		h = l.Forward(h, nn.AttnOpts{})
	}
	logits := m.Head.Forward(h.MeanDim([]int64{1}, false))
	return torch.CrossEntropy(logits, y, nil, torch.ReduceMean, -100, 0)
}

// TestEstimateMemoryMatchesTrainingStep: the estimate of a training step
// at batch 48 is within 10 % of the peak three real Adam steps reach.
func TestEstimateMemoryMatchesTrainingStep(t *testing.T) {
	const batch = 48
	base := torch.MustMemoryStats(torch.CPU).Allocated
	m := newEstModel(2)
	defer nn.Free(m)
	params := nn.Parameters(m)
	// A frozen parameter: no gradient, no optimizer state, flag restored.
	m.Head.Bias.SetRequiresGrad(false)

	before := torch.MustMemoryStats(torch.CPU).Allocated
	est, err := memplan.EstimateMemory(m, memplan.EstimateOptions{Optimizer: memplan.Adam, Batch: batch, Forward: m.loss})
	require.NoError(t, err)
	t.Logf("\n%s", est)
	require.Equal(t, before, torch.MustMemoryStats(torch.CPU).Allocated, "the estimate leaves nothing behind")
	for _, p := range params {
		require.Nil(t, p.T.Grad(), "%s: no gradient left", p.Name)
	}
	require.False(t, m.Head.Bias.RequiresGrad(), "frozen stays frozen")
	require.True(t, m.Head.Weight.RequiresGrad())
	require.Equal(t, amp.FP32, est.Precision, "the zero value is fp32")

	var weights, trainable int64
	for _, p := range params {
		weights += p.T.NBytes()
		if p.T.RequiresGrad() {
			trainable += p.T.NBytes()
		}
	}
	require.Equal(t, weights, est.Weights)
	require.Equal(t, trainable, est.Gradients)
	require.Equal(t, 2*trainable+4*int64(len(params)-1), est.OptimizerState, "Adam: exp_avg, exp_avg_sq, step")
	require.Equal(t, est.Weights+est.Gradients+est.OptimizerState+est.Activations, est.Total)
	require.Greater(t, est.ActivationPerSample, 0.0)

	// The real thing: three Adam steps at the batch asked about.
	var trainParams []nn.Named
	for _, p := range params {
		if p.T.RequiresGrad() {
			trainParams = append(trainParams, p)
		}
	}
	opt := nn.NewAdam(trainParams, nn.AdamDefaults(1e-3))
	defer opt.Free()
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	for s := 0; s < 3; s++ {
		torch.Tidy(func() {
			m.loss(batch).Backward()
			opt.Step()
			opt.ZeroGrad()
		})
	}
	measured := torch.MustMemoryStats(torch.CPU).PeakAllocated - base
	ratio := float64(est.Total) / float64(measured)
	t.Logf("batch %d: estimated %s, measured peak %s (estimate/measured %.3f)", batch,
		torch.FormatBytes(est.Total), torch.FormatBytes(measured), ratio)
	require.Less(t, math.Abs(ratio-1), 0.10, "the estimate is within 10%% of the measured peak")
	require.Greater(t, est.Activations, est.Weights+est.Gradients+est.OptimizerState,
		"at this batch activations dominate, so the check is about them")
}

func TestEstimateMemoryOptions(t *testing.T) {
	m := newEstModel(1)
	defer nn.Free(m)
	n := nn.ParamBytes(m)
	np := int64(len(nn.Parameters(m)))
	for kind, want := range map[memplan.OptimizerKind]int64{
		memplan.SGD: 0, memplan.SGDMomentum: n, memplan.Adam: 2*n + 4*np, memplan.AdamW: 2*n + 4*np,
	} {
		est, err := memplan.EstimateMemory(m, memplan.EstimateOptions{Optimizer: kind, Batch: 4, Forward: m.loss})
		require.NoError(t, err, kind)
		require.Equal(t, want, est.OptimizerState, kind)
		require.Equal(t, kind, est.Optimizer)
	}

	fp32, err := memplan.EstimateMemory(m, memplan.EstimateOptions{Batch: 64, Forward: m.loss})
	require.NoError(t, err)
	bf16, err := memplan.EstimateMemory(m, memplan.EstimateOptions{Batch: 64, Precision: amp.BF16, Forward: m.loss})
	require.NoError(t, err)
	t.Logf("activations at batch 64: fp32 %s, bf16 autocast %s", torch.FormatBytes(fp32.Activations), torch.FormatBytes(bf16.Activations))
	require.Less(t, bf16.ActivationPerSample, fp32.ActivationPerSample, "bf16 saves activation memory")
	require.Equal(t, fp32.Weights, bf16.Weights, "master weights stay float32")
	require.InDelta(t, 64, fp32.MaxBatch(fp32.Total), 1)

	bad := map[string]memplan.EstimateOptions{
		"Optimizer":    {Batch: 4, Optimizer: memplan.OptimizerKind(9), Forward: m.loss},
		"Step/Forward": {Batch: 4},
		"Batch":        {Batch: 0, Forward: m.loss},
		"Probes":       {Batch: 4, Forward: m.loss, Probes: []int{3, 3}},
	}
	if amp.CPUFloat16() { // libtorch 2.4+ autocasts to float16 on the CPU
		fp16, err := memplan.EstimateMemory(m, memplan.EstimateOptions{Batch: 64, Precision: amp.FP16, Forward: m.loss})
		require.NoError(t, err)
		require.Less(t, fp16.ActivationPerSample, fp32.ActivationPerSample, "fp16 saves activation memory")
	} else {
		bad["Precision"] = memplan.EstimateOptions{Batch: 4, Precision: amp.FP16, Forward: m.loss} // 1.13: CUDA only
	}
	for name, o := range bad {
		_, err := memplan.EstimateMemory(m, o)
		var oe *memplan.OptionError
		require.True(t, errors.As(err, &oe), "%s: %v", name, err)
		require.Equal(t, name, oe.Field)
	}
	_, err = memplan.EstimateMemory(m, memplan.EstimateOptions{Batch: 4, Precision: "fp8", Forward: m.loss})
	var oe *memplan.OptionError
	require.ErrorAs(t, err, &oe)

	var kept *torch.Tensor
	_, err = memplan.EstimateMemory(m, memplan.EstimateOptions{Batch: 4, Step: func(b int) error {
		if kept != nil {
			kept.Free()
		}
		kept = torch.Zeros([]int64{int64(b), 1000}).Keep()
		m.loss(b).Backward()
		return nil
	}})
	require.ErrorIs(t, err, memplan.ErrLeak)
	kept.Free()
	for _, p := range nn.Parameters(m) {
		require.Nil(t, p.T.Grad(), "no gradients after an error either")
	}
}
