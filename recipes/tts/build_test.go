package tts

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
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

// The memory test's rows count the model and its training, not the
// codec's file: a codec file with 4 MiB more in it (another part, as a
// codec's optimizer state is) gives the same peaks. The file was once
// held through every row.
func TestMemoryTestLeavesOutTheCodecFile(t *testing.T) {
	cfg := gptConfig(t, t.TempDir())
	cfg.Accum = 1
	fat := filepath.Join(t.TempDir(), "fat-codec.pt")
	torch.Main().Do(func() {
		v, err := ptfile.Load(cfg.Codec)
		require.NoError(t, err)
		defer ptfile.FreeAll(v)
		d, ok := v.(*ptfile.Dict)
		require.True(t, ok)
		d.Set("extra", torch.Zeros([]int64{1 << 20}))
		require.NoError(t, ptfile.Save(fat, d))
	})
	peaks := func(codec string) []int64 {
		// The peaks are the process's: what earlier tests left to the
		// garbage collector goes first (TestModelBuildLeavesNoGarbage
		// checks that the model's build leaves none).
		torch.CollectGarbage()
		c := cfg
		c.Codec = codec
		res, err := RunMemoryTest(context.Background(), c, []int{1, 2}, time.Nanosecond)
		require.NoError(t, err)
		require.NoError(t, res.Failed())
		var out []int64
		for _, r := range res.Rows {
			out = append(out, r.PeakAllocated)
		}
		return out
	}
	plain, fatter := peaks(cfg.Codec), peaks(fat)
	t.Logf("peaks: %v with the codec's file, %v with 4 MiB more in it", plain, fatter)
	require.Equal(t, plain, fatter)
}
