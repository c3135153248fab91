package tts

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// A GPT run holds its model, not the codec's file: the codec's weights
// are copied into the model and the file (the codec's optimizer state
// with it) is released before training starts. It was once held to the
// end of the run (13 MiB for the CPU codec).
func TestBuildGPTHoldsOnlyTheModel(t *testing.T) {
	cfg := gptConfig(t, t.TempDir())
	var built, model int64
	torch.Main().Do(func() {
		before := torch.MustMemoryStats(torch.CPU).Allocated
		g, err := buildGPT(&cfg)
		require.NoError(t, err)
		defer g.close()
		built = torch.MustMemoryStats(torch.CPU).Allocated - before

		before = torch.MustMemoryStats(torch.CPU).Allocated
		m, err := NewModel(g.ccfg, g.gcfg)
		require.NoError(t, err)
		model = torch.MustMemoryStats(torch.CPU).Allocated - before
		nn.Free(m)
	})
	t.Logf("allocated by the build: %d B; by the same model alone: %d B", built, model)
	require.Equal(t, model, built)
}
