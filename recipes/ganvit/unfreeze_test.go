package ganvit

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

func TestParseSchedule(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Schedule
		err  string
	}{
		{"{8: [11]}", Schedule{8: {11}}, ""},
		{"{8: [11], 10: [9, 10]}", Schedule{8: {11}, 10: {9, 10}}, ""},
		{`{"8": [11]}`, Schedule{8: {11}}, ""},
		{"{3: 5}", Schedule{3: {5}}, ""},
		{"{8:[11],10:[9,10]}", Schedule{8: {11}, 10: {9, 10}}, ""},
		{"", nil, ""},
		{"{}", nil, ""},
		{"{x: [1]}", nil, `epoch "x" is not an integer`},
		{"{-1: [1]}", nil, "not an integer >= 0"},
		{"{1: [a]}", nil, "layer a is not an integer"},
		{"{1: [1.5]}", nil, "layer 1.5 is not an integer"},
		{"{1: []}", nil, "lists no layers"},
		{"[1, 2]", nil, "want {epoch: [layer indices]}"},
	} {
		got, err := ParseSchedule(c.in)
		if c.err != "" {
			require.ErrorContains(t, err, c.err, c.in)
			require.True(t, recipes.IsUserError(err))
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
	s := Schedule{8: {11}, 10: {9, 10}}
	require.Equal(t, "{8: [11], 10: [9, 10]}", s.String())
	require.Equal(t, []int{11}, s.Until(9))
	require.Equal(t, []int{9, 10, 11}, s.Until(10))
	require.Empty(t, s.Until(7))
	require.NoError(t, s.Check(12, 11))
	err := s.Check(12, 10)
	require.ErrorContains(t, err, "epoch 10 is past the run's 10 epochs")
	err = Schedule{8: {11}}.Check(6, 10)
	require.ErrorContains(t, err, "names encoder layer 11; the ViT has 6 (0 to 5)")
	require.True(t, recipes.IsUserError(err))
}

// With the seed's schedule ({1: [1]} on a 2-layer ViT: the last layer
// later), frozen parameters get no gradient and no optimizer state; the
// bytes saved are measured by the counter against the same step with
// everything trainable, and unfreezing adds the layer's state at its first
// step.
func TestFrozenLayersHoldNoGradsNorState(t *testing.T) {
	cfg := ViTConfigs["cpu"]
	cfg.Image, cfg.Layers, cfg.Classes = 32, 4, 4
	batch := func() *data.Batch {
		return &data.Batch{Fields: map[string]*torch.Tensor{
			"spec":  torch.Randn([]int64{4, 1, 16, 44}).Keep(),
			"label": torch.FromSlice([]int64{0, 1, 2, 3}, []int64{4}).Keep(),
		}}
	}
	measure := func(schedule Schedule) (held, state, peak int64, c *Classifier) {
		torch.CollectGarbage()
		torch.ManualSeed(1)
		v, err := NewViT(cfg)
		require.NoError(t, err)
		if schedule != nil {
			v.FreezeBackbone()
			require.NoError(t, v.UnfreezeLayers(schedule.Until(0)))
		}
		base := torch.MustMemoryStats(torch.CPU).Allocated
		c, err = NewClassifier(v, ClassifierOptions{Device: torch.CPU, MicroBatch: 4, LR: 1e-3})
		require.NoError(t, err)
		b := batch()
		defer b.Free()
		torch.ResetPeakMemory(torch.CPU)
		_, err = c.Step(b)
		require.NoError(t, err)
		st := torch.MustMemoryStats(torch.CPU)
		for _, p := range nn.Parameters(v) {
			require.Nil(t, p.T.Grad(), "gradients set to none after the step")
		}
		return st.Allocated - base, stateBytes(c.Opt), st.PeakAllocated - base, c
	}
	heldAll, stateAll, peakAll, call := measure(nil)
	defer func() { call.Free(); nn.Free(call.V) }()
	heldF, stateF, peakF, cf := measure(Schedule{1: {3}})
	defer func() { cf.Free(); nn.Free(cf.V) }()

	var trainable, frozen int64
	for _, p := range nn.Parameters(cf.V) {
		if p.T.RequiresGrad() {
			trainable += p.T.NBytes()
		} else {
			frozen += p.T.NBytes()
		}
	}
	require.Equal(t, 2*trainable, stateF, "state only for the trainable parameters (head and encoder.ln)")
	require.Equal(t, 2*(trainable+frozen), stateAll)
	for _, s := range cf.Opt.State() {
		require.NotContains(t, s.Name, "encoder.layers.", "no state for frozen blocks")
		require.NotContains(t, s.Name, "conv_proj", "no state for the frozen embedding")
	}
	t.Logf("backbone frozen: optimizer state %s instead of %s (saved %s); held after the step %s instead of %s; step peak %s instead of %s",
		torch.FormatBytes(stateF), torch.FormatBytes(stateAll), torch.FormatBytes(stateAll-stateF),
		torch.FormatBytes(heldF), torch.FormatBytes(heldAll), torch.FormatBytes(peakF), torch.FormatBytes(peakAll))
	require.Equal(t, heldAll-heldF, stateAll-stateF, "what stays held differs by the optimizer state alone")
	require.Less(t, peakF, peakAll, "frozen blocks keep no activations for backward")

	// Unfreezing layer 3 (the schedule's epoch 1): its state appears at
	// its first step.
	require.NoError(t, cf.V.UnfreezeLayers(Schedule{1: {3}}.Until(1)))
	var layer int64
	for _, p := range nn.Parameters(cf.V.Encoder.Layers.Items[3]) {
		layer += p.T.NBytes()
	}
	b := batch()
	defer b.Free()
	_, err := cf.Step(b)
	require.NoError(t, err)
	require.Equal(t, stateF+2*layer, stateBytes(cf.Opt))
}
