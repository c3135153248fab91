package tts

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// readMeta (a resume's, `tts train`'s codec) describes the weights it
// checks the description against: nothing is allocated. A description
// the weights disagree with, or a checkpoint of the other kind, is still
// the file's error.
func TestReadMetaReadsNoTensor(t *testing.T) {
	_, codec := tinyCorpus(t)
	torch.Main().Do(func() {
		torch.CollectGarbage()
		base := torch.MustMemoryStats(torch.CPU).Allocated
		require.NoError(t, torch.ResetPeakMemory(torch.CPU))
		meta, err := readMeta(codec, "codec")
		require.NoError(t, err)
		require.Equal(t, tinyCodecConfig().Codes, meta.Codec.Codes)
		require.Zero(t, torch.MustMemoryStats(torch.CPU).PeakAllocated-base, "bytes allocated to read the codec's description")

		// The same file with its codebook one code short.
		v, err := ptfile.Load(codec)
		require.NoError(t, err)
		defer ptfile.FreeAll(v)
		model, ok := v.(*ptfile.Dict).Get("model")
		require.True(t, ok)
		cb, ok := model.(*ptfile.Dict).Get("codebook")
		require.True(t, ok)
		model.(*ptfile.Dict).Set("codebook", cb.(*torch.Tensor).Narrow(0, 1, meta.Codec.Codes-1))
		bad := filepath.Join(t.TempDir(), "codec.pt")
		require.NoError(t, ptfile.Save(bad, v))

		for _, c := range []struct{ path, kind, msg string }{
			{bad, "codec", "codebook"},
			{codec, "gpt", "not a GPT checkpoint"},
			{filepath.Join(t.TempDir(), "none.pt"), "codec", "no such file"},
		} {
			_, err := readMeta(c.path, c.kind)
			var ce *recipes.CheckpointError
			require.True(t, errors.As(err, &ce), "%s as %s: %v", c.path, c.kind, err)
			require.ErrorContains(t, err, c.msg)
		}
	})
}
