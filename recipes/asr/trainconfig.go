package asr

import (
	"math"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/recipes"
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
// a *ConfigError naming the first bad setting. Train calls it.
func (c TrainConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := recipes.CheckRanges(
		recipes.Between("epochs", int64(c.Epochs), 1, MaxEpochs),
		recipes.Between("d-model", c.DModel, 0, MaxDModel),
		recipes.Between("encoder-layers", int64(c.EncoderLayers), 0, MaxLayers),
		recipes.Between("decoder-layers", int64(c.DecoderLayers), 0, MaxLayers),
		recipes.Between("valid-limit", int64(c.ValidLimit), 0, math.MaxInt64),
		recipes.Between("workers", int64(c.Workers), 0, MaxWorkers),
		recipes.Between("pad-multiple", int64(c.PadMultiple), 0, 4096),
	); err != nil {
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
	if c.DryRun && !c.AutoBatch {
		return &ConfigError{Field: "dry-run", Value: true, Reason: "goes with auto-batch"}
	}
	return nil
}
