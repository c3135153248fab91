package asr

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// craftCheckpoint saves the weights of a small conformer with a model
// description edited by edit (nil: the true one).
func craftCheckpoint(t *testing.T, edit func(*modelMeta)) string {
	t.Helper()
	v := BuildVocab([]string{"कोंकणी भास", "abc"})
	c, err := Preset("tiny", v.Size())
	require.NoError(t, err)
	c.DModel, c.EncoderLayers, c.DecoderLayers, c.FFDim, c.DecoderFFDim = 32, 2, 1, 64, 48
	torch.ManualSeed(1)
	m, err := NewConformer(c)
	require.NoError(t, err)
	defer nn.Free(m)
	meta := modelMeta{Preset: "tiny", Config: c, Vocab: v.Tokens()}
	if edit != nil {
		edit(&meta)
	}
	b, err := json.Marshal(meta)
	require.NoError(t, err)
	sd := nn.StateDict(m)
	path := filepath.Join(t.TempDir(), "crafted.pt")
	require.NoError(t, ptfile.Save(path, ptfile.NewDict("model", sd, "meta", ptfile.NewDict("recipe", "asr", "model", string(b)))))
	return path
}

func TestAbsurdModelDescriptionIsRefusedBeforeBuilding(t *testing.T) {
	cases := []struct {
		name string
		edit func(*modelMeta)
		want string
	}{
		{"d_model 1e7", func(m *modelMeta) { m.Config.DModel = 1e7 }, "d_model 10000000 outside"},
		{"d_model of another size, in range", func(m *modelMeta) { m.Config.DModel, m.Config.Heads = 2048, 4 }, "disagrees with the weights: ctc_head.weight is [17 32], not [17 2048]"},
		{"negative encoder layers", func(m *modelMeta) { m.Config.EncoderLayers = -3 }, "encoder layers -3 outside"},
		{"more encoder layers than the weights hold", func(m *modelMeta) { m.Config.EncoderLayers = 50 }, "says 50 encoder layers, the weights have 2"},
		{"fewer decoder layers", func(m *modelMeta) { m.Config.DecoderLayers = 0; m.Config.CTCWeight = 1 }, "says 0 decoder layers, the weights have 1"},
		{"vocabulary size vs output rows", func(m *modelMeta) { m.Config.Vocab = 500 }, "500 output classes"},
		{"vocabulary size vs output rows, tokens too", func(m *modelMeta) {
			m.Config.Vocab++
			m.Vocab = append(m.Vocab, "ज")
		}, "ctc_head.weight is [17 32], not [18 32]"},
		{"mel bins vs input projection", func(m *modelMeta) { m.Config.NumMels = 40 }, "encoder.subsample.out.weight is [32 608], not [32 288]"},
		{"feed-forward size", func(m *modelMeta) { m.Config.FFDim = 1 << 17 }, "encoder.layers.0.ff1.linear1.weight is [64 32], not [131072 32]"},
		{"decoder feed-forward size", func(m *modelMeta) { m.Config.DecoderFFDim = 1000 }, "decoder.layers.0.linear1.weight is [48 32], not [1000 32]"},
		{"kernel", func(m *modelMeta) { m.Config.ConvKernel = 999 }, "not [32 1 999]"},
		{"heads 1e9", func(m *modelMeta) { m.Config.Heads = 1e9 }, "attention heads 1000000000 outside"},
		{"maximum length 1e12", func(m *modelMeta) { m.Config.MaxLen = 1e12 }, "maximum length 1000000000000 outside"},
		{"mel bins 1e9", func(m *modelMeta) { m.Config.NumMels = 1e9 }, "mel bins 1000000000 outside"},
		{"layers 1e9", func(m *modelMeta) { m.Config.DecoderLayers = 1e9 }, "decoder layers 1000000000 outside"},
	}
	refused := func(t *testing.T, path, want string) {
		torch.ResetPeakMemory(torch.CPU)
		base := torch.MustMemoryStats(torch.CPU).Allocated
		var m *Conformer
		var err error
		require.NoError(t, torch.Try(func() { m, err = LoadModel(path, torch.CPU) }), "no panic")
		require.Nil(t, m)
		var bad *recipes.CheckpointError
		require.ErrorAs(t, err, &bad)
		require.Equal(t, path, bad.Path)
		require.ErrorContains(t, err, want)
		require.NotContains(t, err.Error(), "\n", "one line")
		peak := torch.MustMemoryStats(torch.CPU).PeakAllocated - base
		st, serr := os.Stat(path)
		require.NoError(t, serr)
		t.Logf("%v (peak %s above the start; file %s)", err, torch.FormatBytes(peak), torch.FormatBytes(st.Size()))
		require.Less(t, peak, st.Size(), "only the file's weights were loaded, nothing built")

		_, err = ReadModelMeta(path)
		require.ErrorAs(t, err, &bad, "the resume path reads the same checks")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refused(t, craftCheckpoint(t, c.edit), c.want) })
	}
	// The true description loads.
	m, err := LoadModel(craftCheckpoint(t, nil), torch.CPU)
	require.NoError(t, err)
	nn.Free(m)
}

func TestCheckpointErrorsAreTyped(t *testing.T) {
	dir := t.TempDir()
	notDict := filepath.Join(dir, "list.pt")
	require.NoError(t, ptfile.Save(notDict, []any{int64(1)}))
	noMeta := filepath.Join(dir, "nometa.pt")
	require.NoError(t, ptfile.Save(noMeta, ptfile.NewDict("step", int64(3))))
	for _, path := range []string{notDict, noMeta, filepath.Join(dir, "missing.pt")} {
		_, err := LoadModel(path, torch.CPU)
		var bad *recipes.CheckpointError
		require.ErrorAs(t, err, &bad, path)
	}
}

func TestNonFiniteWeightsAreNamed(t *testing.T) {
	path := craftCheckpoint(t, nil)
	m, err := LoadModel(path, torch.CPU)
	require.NoError(t, err)
	defer nn.Free(m)
	require.Empty(t, NonFiniteWeights(m))
	sd := nn.StateDict(m)
	var names []string
	for k, v := range []float64{math.NaN(), math.Inf(-1)} {
		p := sd[3*k+1]
		torch.NoGrad(func() {
			torch.Tidy(func() { p.T.MaskedFillIn(p.T.Ge(p.T.Max()), v) }) // one element
		})
		names = append(names, p.Name)
	}
	got := NonFiniteWeights(m)
	require.Equal(t, names, got)
}
