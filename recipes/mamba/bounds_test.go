package mamba

import (
	"encoding/json"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train/ckpt"
)

// Sizes past the model's limits are refused before anything is built:
// NewLM returns an error for each (it would otherwise try to allocate
// terabytes), and every size at its limit is accepted by Validate.
func TestModelSizesOutsideTheirRangesAreRefused(t *testing.T) {
	tiny := ModelSizes["tiny"]
	for _, c := range []struct {
		name string
		edit func(*ModelConfig)
	}{
		{"d_model 1000000", func(c *ModelConfig) { c.DModel = 1_000_000 }},
		{"d_model 10000000", func(c *ModelConfig) { c.DModel = 10_000_000 }},
		{"n_layers 100000000", func(c *ModelConfig) { c.NLayers = 100_000_000 }},
		{"d_state 1000000", func(c *ModelConfig) { c.DState = 1_000_000 }},
		{"expand_factor 100000", func(c *ModelConfig) { c.Expand = 100_000 }},
		{"vocab_size 1e9", func(c *ModelConfig) { c.VocabSize = 1_000_000_000 }},
		{"d_conv 1e6", func(c *ModelConfig) { c.DConv = 1_000_000 }},
		{"dt_rank 1e6", func(c *ModelConfig) { c.DtRank = 1_000_000 }},
		{"pad multiple 1e9", func(c *ModelConfig) { c.PadVocabMultiple = 1_000_000_000 }},
		{"max_seq_len 1e9", func(c *ModelConfig) { c.MaxSeqLen = 1_000_000_000 }},
		{"mixer width", func(c *ModelConfig) { c.DModel, c.Expand = MaxDModel, MaxExpand }},
		{"NaN norm epsilon", func(c *ModelConfig) { c.NormEps = math.NaN() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tiny
			c.edit(&cfg)
			require.Error(t, cfg.withDefaults().Validate())
			m, err := NewLM(cfg)
			require.Error(t, err)
			require.Nil(t, m)
		})
	}
	limits := ModelConfig{DModel: MaxDModel, NLayers: MaxLayers, DState: MaxDState, Expand: MaxDInner / MaxDModel,
		VocabSize: MaxVocab, MaxSeqLen: MaxSeqLimit, DConv: MaxDConv, DtRank: MaxDModel, PadVocabMultiple: MaxPadding, NormEps: 1e-5}
	require.NoError(t, limits.Validate())
}

// A checkpoint whose description is out of range is a
// *recipes.CheckpointError for eval (LoadLM) and --resume (modelFor),
// before a model is built.
func TestCheckpointWithAnAbsurdModelIsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		edit func(*ModelConfig)
	}{
		{"d_model 10000000", func(c *ModelConfig) { c.DModel = 10_000_000 }},
		{"n_layers 100000000", func(c *ModelConfig) { c.NLayers = 100_000_000 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			mc := ModelSizes["small"].withDefaults()
			c.edit(&mc)
			raw, err := json.Marshal(modelMeta{Recipe: "mamba", Model: mc, Tokenizer: TokenizerName, SeqLen: 256})
			require.NoError(t, err)
			path := filepath.Join(dir, "absurd.pt")
			require.NoError(t, ptfile.Save(path, ptfile.NewDict("meta", ptfile.NewDict("recipe", "mamba", "config", string(raw)))))

			var ce *recipes.CheckpointError
			f, err := ckpt.Read(path)
			require.NoError(t, err)
			_, err = ReadModelMeta(f)
			f.Free()
			require.ErrorAs(t, err, &ce)

			_, err = modelFor(TrainConfig{Model: ModelSizes["tiny"], Common: recipes.Common{Resume: path}}, t.Logf)
			require.ErrorAs(t, err, &ce)
			require.True(t, recipes.IsUserError(err))
		})
	}
}

// Resuming reads the checkpoint's model description without its tensors:
// the trainer reads the file once, not twice.
func TestModelForReadsNoTensor(t *testing.T) {
	mc := ModelSizes["tiny"].withDefaults()
	raw, err := json.Marshal(modelMeta{Recipe: "mamba", Model: mc, Tokenizer: TokenizerName, SeqLen: 256})
	require.NoError(t, err)
	state := torch.Zeros([]int64{1 << 18}, torch.Float32) // 1 MiB of "optimizer state"
	defer state.Free()
	path := filepath.Join(t.TempDir(), "checkpoint_step_000001.pt")
	require.NoError(t, ptfile.Save(path, ptfile.NewDict(
		"meta", ptfile.NewDict("recipe", "mamba", "config", string(raw)),
		"optimizer", ptfile.NewDict("exp_avg", state))))

	torch.CollectGarbage()
	base := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	got, err := modelFor(TrainConfig{Model: ModelSizes["small"], Common: recipes.Common{Resume: path}}, t.Logf)
	require.NoError(t, err)
	require.Equal(t, mc, got)
	require.Zero(t, torch.MustMemoryStats(torch.CPU).PeakAllocated-base, "bytes allocated to read the model's description")
}

// The log names the model a run trains: resuming, the checkpoint's size,
// not the --model-size default the command line fell back to.
func TestModelLabel(t *testing.T) {
	tiny, small := ModelSizes["tiny"].withDefaults(), ModelSizes["small"].withDefaults()
	odd := tiny
	odd.DModel = 96
	dropout := tiny
	dropout.Dropout = 0.3
	for _, c := range []struct {
		name   string
		cfg    TrainConfig
		model  ModelConfig
		expect string
	}{
		{"a new run: the command line's size", TrainConfig{ModelSize: "small"}, small, "small"},
		{"a new run with a shape of its own", TrainConfig{}, odd, "custom"},
		{"resuming a tiny model under the small default", TrainConfig{ModelSize: "small", Common: recipes.Common{Resume: "ck.pt"}}, tiny, "tiny"},
		{"resuming: a size is its shape", TrainConfig{ModelSize: "small", Common: recipes.Common{Resume: "ck.pt"}}, dropout, "tiny"},
		{"resuming a shape no size has", TrainConfig{ModelSize: "small", Common: recipes.Common{Resume: "ck.pt"}}, odd, "custom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.expect, modelLabel(c.cfg, c.model))
		})
	}
}
