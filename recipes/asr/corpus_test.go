package asr_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes/asr"
)

// TestCorpus: a synthesised corpus's items are features of the manifest's
// length and the token ids of its text; SpecAugment's masks follow the
// epoch.
func TestCorpus(t *testing.T) {
	dir := smallCorpus(t)
	vocab, err := asr.BuildVocabFromManifest(filepath.Join(dir, "train.jsonl"))
	require.NoError(t, err)
	feat, err := asr.NewFeaturizer(16000, 400, 160, 80)
	require.NoError(t, err)
	defer feat.Close()
	c, err := asr.LoadCorpus(filepath.Join(dir, "train.jsonl"), vocab, feat)
	require.NoError(t, err)
	require.Positive(t, c.Len())
	for i := 0; i < c.Len(); i++ {
		x, ids, text, err := c.Get(i)
		require.NoError(t, err)
		require.Equal(t, int64(80), x.Size(1))
		require.InDelta(t, c.Frames(i), x.Size(0), 1, "frames from the manifest duration")
		require.Equal(t, text, vocab.Decode(ids))
		require.NotContains(t, ids, asr.UNKID)
		x.Free()
	}
	_, _, _, err = c.Get(c.Len())
	require.ErrorContains(t, err, "out of range")

	c.WithSpecAugment(asr.DefaultSpecAugment(), 3)
	a, _, _, err := c.Get(0)
	require.NoError(t, err)
	b, _, _, err := c.Get(0)
	require.NoError(t, err)
	require.True(t, a.Equal(b), "same epoch, same masks")
	c.SetEpoch(1)
	d, _, _, err := c.Get(0)
	require.NoError(t, err)
	require.False(t, a.Equal(d), "another epoch, other masks")
	a.Free()
	b.Free()
	d.Free()
}
