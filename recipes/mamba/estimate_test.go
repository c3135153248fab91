package mamba

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
)

// The memory formula is within 15 % of what the counting allocator
// measures on a dry step (two micro-batches and an AdamW update), with and
// without per-block checkpointing, in float32 and under bf16 autocast.
func TestFormulaMatchesMeasured(t *testing.T) {
	for _, c := range []struct {
		name   string
		layers int
		batch  int
		prec   amp.Precision
		ckpt   bool
	}{
		{"fp32", 2, 8, amp.FP32, false},
		{"fp32 checkpointed", 4, 16, amp.FP32, true},
		{"bf16 checkpointed", 4, 16, amp.BF16, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mc := ModelConfig{DModel: 128, NLayers: c.layers, DState: 16, Expand: 2, VocabSize: VocabSize}.withDefaults()
			p := EstimatePreset{Model: mc, Batch: c.batch, Seq: 128, Checkpointing: c.ckpt}
			var m Breakdown
			var err error
			torch.Main().Do(func() { m, err = measure(torch.CPU, mc, p, c.prec, "fused", 64) })
			require.NoError(t, err)
			f := Formula(mc, c.batch, 128, c.prec, c.ckpt, "fused", 64)
			rel := float64(f.Total()-m.Total()) / float64(m.Total())
			t.Logf("formula %d bytes (activations %d), measured %d (activations %d): %+.1f %%", f.Total(), f.Activations,
				m.Total(), m.Activations, 100*rel)
			require.InDelta(t, 0, rel, 0.15)
			require.InDelta(t, float64(m.Optimizer), float64(f.Optimizer), 0.1*float64(f.Optimizer), "AdamW: two moments")
		})
	}
}
