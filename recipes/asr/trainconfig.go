package asr

import (
	"math"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
)

// Bounds Validate puts on a TrainConfig: past them a value is a typo or a
// unit mistake, not a training run (a micro-batch of 16M utterances, a
// d_model of 10M).
const (
	MaxBatch   = recipes.MaxBatch // micro-batch, accumulation steps and their product
	MaxDModel  = 1 << 16
	MaxLayers  = 1024
	MaxEpochs  = 1 << 20
	MaxWorkers = 1024
)

// ConfigError is an invalid TrainConfig setting. Field is named as the
// `torchfit asr train` flag that sets it (lr, micro-batch, ...).
type ConfigError = recipes.ConfigError

// Validate checks every hyperparameter before anything is loaded or
// built: counts in range, learning rate and clipping norm finite, a known
// preset and precision, a memory limit torch.ParseMemory reads. It returns
// a *ConfigError naming the first bad setting. TrainConformer calls it.
func (c TrainConfig) Validate() error {
	if err := recipes.CheckRanges(
		recipes.Between("micro-batch", int64(c.MicroBatch), 1, MaxBatch),
		recipes.Between("grad-accum", int64(c.Accum), 1, MaxBatch),
		recipes.Between("epochs", int64(c.Epochs), 1, MaxEpochs),
		recipes.Between("max-steps", int64(c.MaxSteps), 0, math.MaxInt64),
		recipes.Between("warmup", int64(c.Warmup), 0, math.MaxInt64),
		recipes.Between("d-model", c.DModel, 0, MaxDModel),
		recipes.Between("encoder-layers", int64(c.EncoderLayers), 0, MaxLayers),
		recipes.Between("decoder-layers", int64(c.DecoderLayers), 0, MaxLayers),
		recipes.Between("empty-cache-every", int64(c.EmptyCacheEvery), 0, math.MaxInt64),
		recipes.Between("checkpoint-every", int64(c.CheckpointEvery), 0, math.MaxInt64),
		recipes.Between("memory-every", int64(c.MemoryEvery), 0, math.MaxInt64),
		recipes.Between("valid-limit", int64(c.ValidLimit), 0, math.MaxInt64),
		recipes.Between("workers", int64(c.Workers), 0, MaxWorkers),
		recipes.Between("max-nonfinite-steps", int64(c.MaxNonFinite), -1, math.MaxInt64),
		recipes.Between("pad-multiple", int64(c.PadMultiple), 0, 4096),
	); err != nil {
		return err
	}
	if err := recipes.CheckStep(c.MicroBatch, c.Accum, c.LR, c.ClipNorm); err != nil {
		return err
	}
	if c.Dropout != nil && !(*c.Dropout >= 0 && *c.Dropout < 1) {
		return &ConfigError{Field: "dropout", Value: *c.Dropout, Reason: "must be in [0, 1)"}
	}
	switch {
	case c.Preset != "":
		if _, err := Preset(c.Preset, int(UNKID)+1); err != nil {
			return &ConfigError{Field: "preset", Value: c.Preset, Err: err}
		}
	case c.Resume == "":
		return &ConfigError{Field: "preset", Value: c.Preset, Reason: "required unless resuming"}
	}
	if _, err := amp.ParsePrecision(c.Precision, c.Device); err != nil {
		return &ConfigError{Field: "mixed-precision", Value: c.Precision, Err: err}
	}
	if c.MemoryLimit != "" {
		if _, _, err := torch.ParseMemory(c.MemoryLimit); err != nil {
			return &ConfigError{Field: "memory-limit", Value: c.MemoryLimit, Err: err}
		}
	}
	if c.DryRun && !c.AutoBatch {
		return &ConfigError{Field: "dry-run", Value: true, Reason: "goes with auto-batch"}
	}
	return nil
}
