package ganvit

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
)

// test-memory at the configured sizes says the configuration is
// memory-safe, in the seed's words; under a CPU cap that the GAN step
// does not fit in, it prints the seed's OOM advice and returns an
// *OOMError wrapping torch's out-of-memory error.
func TestTestMemory(t *testing.T) {
	torch.CollectGarbage()
	var out strings.Builder
	c := MemoryTestConfig{Preset: testPreset, Device: torch.CPU, Precision: amp.FP32, GANAccum: 2, DAccum: 1, GAccum: 2, Accum: 1,
		Unfreeze: Schedule{0: {1}}, Out: &out}
	res, err := TestMemory(c)
	require.NoError(t, err)
	text := out.String()
	for _, want := range []string{"✅ GAN config OK - 0.00 GB used", "✅ ViT config OK - 0.00 GB used", "🎉 Configuration is memory-safe!",
		"micro-batch 8 × 1 (D), 4 × 2 (G)"} {
		require.Contains(t, text, want)
	}
	require.Greater(t, res.GANPeak, res.GANHeld)
	require.Greater(t, res.ViTPeak, res.ViTHeld)

	// A cap below the GAN iteration's peak.
	before := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, before+res.GANPeak/2))
	defer torch.SetMemoryLimit(torch.CPU, 0)
	out.Reset()
	_, err = TestMemory(c)
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0))
	var oe *OOMError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "GAN", oe.Stage)
	require.True(t, errors.Is(err, torch.ErrOutOfMemory))
	var te *torch.Error
	require.ErrorAs(t, err, &te)
	require.True(t, te.OOM, "a command line exits 3")
	text = out.String()
	require.Contains(t, text, "❌ OOM Error: ")
	require.Contains(t, text, "💡 Try reducing batch sizes:")
	require.Contains(t, text, "   Current: GAN_BATCH_SIZE=4, BATCH_SIZE=4")
	require.Contains(t, text, "   Suggested: GAN_BATCH_SIZE=2, BATCH_SIZE=2")
	require.NotContains(t, text, "memory-safe")
	require.Equal(t, before, torch.MustMemoryStats(torch.CPU).Allocated, "nothing left allocated")
}

func TestMemoryReading(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		s, prev torch.MemStats
		want    string
	}{
		{torch.MemStats{Allocated: 100 * mib, Reserved: 100 * mib}, torch.MemStats{Allocated: 100 * mib}, ""},
		{torch.MemStats{Allocated: 100 * mib, Reserved: 90 * mib}, torch.MemStats{}, "cannot happen"},
		{torch.MemStats{Allocated: 100 * mib, Reserved: 400 * mib}, torch.MemStats{}, "reserved ≫ allocated: 300.00 MiB is held by the caching allocator"},
		{torch.MemStats{Allocated: 100 * mib, Reserved: 120 * mib}, torch.MemStats{}, ""},
		{torch.MemStats{Allocated: 150 * mib, Reserved: 150 * mib}, torch.MemStats{Allocated: 100 * mib}, "allocated grew by 50.00 MiB since the last line"},
	} {
		var prev *torch.MemStats
		if c.prev.Allocated > 0 {
			prev = &c.prev
		}
		got := Reading(c.s, prev)
		if c.want == "" {
			require.Empty(t, got)
			continue
		}
		require.Contains(t, got, c.want)
	}
}
