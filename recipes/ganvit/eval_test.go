package ganvit

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
)

// Eval's counts are bounded before anything is loaded or generated: a
// batch in [1, recipes.MaxBatch], at most MaxGenerated spectrograms per
// genre and no more than MaxGeneratedBytes of them for the checkpoint's
// shape (1,000,000,000 per genre grew to 4.4 GB before it died).
func TestEvalCountsBounded(t *testing.T) {
	seed := Shape{Mels: 128, Frames: 1292} // 661 KB a spectrogram
	small := Shape{Mels: 16, Frames: 44}
	for _, c := range []struct {
		name             string
		batch, generated int
		shape            Shape
		field            string // "": accepted
	}{
		{"defaults", 12, 100, seed, ""},
		{"none generated", 1, 0, seed, ""},
		{"batch 0", 0, 100, seed, "batch-size"},
		{"batch 1e9", 1_000_000_000, 100, seed, "batch-size"},
		{"generated -1", 12, -1, seed, "generated"},
		{"generated 1e9", 12, 1_000_000_000, small, "generated"},
		{"generated past memory", 12, 2000, seed, "generated"},
		{"generated within memory", 12, 1600, seed, ""},
		{"generated 300000 of small", 12, 300_000, small, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := EvalConfig{Batch: c.batch, Generated: c.generated}.check(c.shape)
			if c.field == "" {
				require.NoError(t, err)
				return
			}
			var ce *recipes.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, c.field, ce.Field)
			require.True(t, recipes.IsUserError(err))
		})
	}
}
