package asr_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
)

func TestTrainConfigValidate(t *testing.T) {
	fp16CPU := "mixed-precision" // libtorch 1.13: bf16 only on the CPU
	if amp.CPUFloat16() {
		fp16CPU = ""
	}
	cases := []struct {
		name  string
		set   func(c *asr.TrainConfig)
		field string // "" when valid
	}{
		{"base", func(c *asr.TrainConfig) {}, ""},
		{"resume without preset", func(c *asr.TrainConfig) { c.Preset, c.Resume = "", "x.pt" }, ""},
		{"zero counts are defaults", func(c *asr.TrainConfig) {
			c.MaxSteps, c.Warmup, c.DModel, c.EncoderLayers, c.DecoderLayers = 0, 0, 0, 0, 0
			c.EmptyCacheEvery, c.CheckpointEvery, c.MemoryEvery, c.ValidLimit, c.Workers, c.ClipNorm = 0, 0, 0, 0, 0, 0
		}, ""},
		{"largest batch", func(c *asr.TrainConfig) { c.MicroBatch, c.Accum = asr.MaxBatch, 1 }, ""},
		{"memory fraction", func(c *asr.TrainConfig) { c.MemoryLimit = "0.5" }, ""},
		{"never stop on NaN", func(c *asr.TrainConfig) { c.MaxNonFinite = -1 }, ""},

		{"negative lr", func(c *asr.TrainConfig) { c.LR = -1 }, "lr"},
		{"zero lr", func(c *asr.TrainConfig) { c.LR = 0 }, "lr"},
		{"NaN lr", func(c *asr.TrainConfig) { c.LR = math.NaN() }, "lr"},
		{"inf lr", func(c *asr.TrainConfig) { c.LR = math.Inf(1) }, "lr"},
		{"negative clip-norm", func(c *asr.TrainConfig) { c.ClipNorm = -1 }, "clip-norm"},
		{"NaN clip-norm", func(c *asr.TrainConfig) { c.ClipNorm = math.NaN() }, "clip-norm"},
		{"inf clip-norm", func(c *asr.TrainConfig) { c.ClipNorm = math.Inf(1) }, "clip-norm"},
		{"negative warmup", func(c *asr.TrainConfig) { c.Warmup = -1 }, "warmup"},
		{"zero epochs", func(c *asr.TrainConfig) { c.Epochs = 0 }, "epochs"},
		{"zero batch", func(c *asr.TrainConfig) { c.MicroBatch = 0 }, "micro-batch"},
		{"huge batch", func(c *asr.TrainConfig) { c.MicroBatch = 1000000000 }, "micro-batch"},
		{"huge effective batch", func(c *asr.TrainConfig) { c.MicroBatch, c.Accum = 1<<20, 1<<10 }, "grad-accum"},
		{"zero grad-accum", func(c *asr.TrainConfig) { c.Accum = 0 }, "grad-accum"},
		{"negative workers", func(c *asr.TrainConfig) { c.Workers = -1 }, "workers"},
		{"negative checkpoint-every", func(c *asr.TrainConfig) { c.CheckpointEvery = -1 }, "checkpoint-every"},
		{"negative memory-every", func(c *asr.TrainConfig) { c.MemoryEvery = -1 }, "memory-every"},
		{"negative valid-limit", func(c *asr.TrainConfig) { c.ValidLimit = -1 }, "valid-limit"},
		{"negative max-steps", func(c *asr.TrainConfig) { c.MaxSteps = -1 }, "max-steps"},
		{"negative empty-cache-every", func(c *asr.TrainConfig) { c.EmptyCacheEvery = -1 }, "empty-cache-every"},
		{"negative d-model", func(c *asr.TrainConfig) { c.DModel = -64 }, "d-model"},
		{"absurd d-model", func(c *asr.TrainConfig) { c.DModel = 10000000 }, "d-model"},
		{"odd d-model", func(c *asr.TrainConfig) { c.DModel = 97 }, "d-model"},
		{"d-model the heads cannot split", func(c *asr.TrainConfig) { c.DModel = 2 }, "d-model"},
		{"d-model the heads split", func(c *asr.TrainConfig) { c.DModel = 96 }, ""},
		{"absurd layers", func(c *asr.TrainConfig) { c.EncoderLayers = 100000 }, "encoder-layers"},
		{"negative decoder layers", func(c *asr.TrainConfig) { c.DecoderLayers = -1 }, "decoder-layers"},
		{"max-nonfinite-steps below -1", func(c *asr.TrainConfig) { c.MaxNonFinite = -2 }, "max-nonfinite-steps"},
		{"unknown preset", func(c *asr.TrainConfig) { c.Preset = "huge" }, "preset"},
		{"no preset", func(c *asr.TrainConfig) { c.Preset = "" }, "preset"},
		{"unknown precision", func(c *asr.TrainConfig) { c.Precision = "fp8" }, "mixed-precision"},
		{"fp16 on the CPU", func(c *asr.TrainConfig) { c.Precision = "fp16" }, fp16CPU},
		{"bad memory limit", func(c *asr.TrainConfig) { c.MemoryLimit = "1.5" }, "memory-limit"},
		{"dry run alone", func(c *asr.TrainConfig) { c.DryRun = true }, "dry-run"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := baseConfig(t, "data", t.TempDir())
			c.set(&cfg)
			err := cfg.Validate()
			if c.field == "" {
				require.NoError(t, err)
				return
			}
			var ce *asr.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, c.field, ce.Field)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestTrainValidatesFirst(t *testing.T) {
	dir := t.TempDir()
	for _, lr := range []float64{-1, math.NaN(), math.Inf(1)} {
		cfg := baseConfig(t, smallCorpus(t), dir)
		cfg.LR = lr
		_, err := asr.Train(context.Background(), cfg)
		var ce *asr.ConfigError
		require.ErrorAs(t, err, &ce, "lr %v", lr)
		require.Equal(t, "lr", ce.Field)
		_, err = os.Stat(filepath.Join(dir, "ck"))
		require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
		require.Equal(t, int64(0), torch.MustMemoryStats(torch.CPU).Limit)
	}
}
