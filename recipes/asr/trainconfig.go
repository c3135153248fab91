package asr

import (
	"fmt"
	"math"

	"github.com/torchfit/torchfit/recipes"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// Bounds Validate puts on a TrainConfig: past them a value is a typo or a
// unit mistake, not a training run (a micro-batch of 16M utterances, a
// d_model of 10M).
const (
	MaxBatch   = 1 << 24 // micro-batch, accumulation steps and their product
	MaxDModel  = 1 << 16
	MaxLayers  = 1024
	MaxEpochs  = 1 << 20
	MaxWorkers = 1024
)

// ConfigError is an invalid TrainConfig setting. Field is named as the
// `torchfit asr train` flag that sets it (lr, batch-size, ...).
type ConfigError = recipes.ConfigError

// Validate checks every hyperparameter before anything is loaded or
// built: counts in range, learning rate and clipping norm finite, a known
// preset and precision, a memory limit torch.ParseMemory reads. It returns
// a *ConfigError naming the first bad setting. TrainConformer calls it.
func (c TrainConfig) Validate() error {
	bad := func(field string, v any, format string, args ...any) error {
		return &ConfigError{Field: field, Value: v, Reason: fmt.Sprintf(format, args...)}
	}
	for _, f := range []struct {
		name     string
		v        int64
		min, max int64
	}{
		{"batch-size", int64(c.BatchSize), 1, MaxBatch},
		{"grad-accum", int64(c.GradAccum), 1, MaxBatch},
		{"epochs", int64(c.Epochs), 1, MaxEpochs},
		{"max-steps", int64(c.MaxSteps), 0, math.MaxInt64},
		{"warmup", int64(c.Warmup), 0, math.MaxInt64},
		{"d-model", c.DModel, 0, MaxDModel},
		{"encoder-layers", int64(c.EncoderLayers), 0, MaxLayers},
		{"decoder-layers", int64(c.DecoderLayers), 0, MaxLayers},
		{"empty-cache-every", int64(c.EmptyCacheEvery), 0, math.MaxInt64},
		{"checkpoint-every", int64(c.CheckpointEvery), 0, math.MaxInt64},
		{"memory-every", int64(c.MemoryEvery), 0, math.MaxInt64},
		{"valid-limit", int64(c.ValidLimit), 0, math.MaxInt64},
		{"workers", int64(c.Workers), 0, MaxWorkers},
		{"max-nonfinite-steps", int64(c.MaxNonFinite), -1, math.MaxInt64},
		{"pad-multiple", int64(c.PadMultiple), 0, 4096},
	} {
		switch {
		case f.v < f.min:
			return bad(f.name, f.v, "must be at least %d", f.min)
		case f.v > f.max:
			return bad(f.name, f.v, "must be at most %d", f.max)
		}
	}
	if n := int64(c.BatchSize) * int64(c.GradAccum); n > MaxBatch {
		return bad("grad-accum", c.GradAccum, "the effective batch %d × %d = %d is more than %d", c.BatchSize, c.GradAccum, n, MaxBatch)
	}
	if !(c.LR > 0) || math.IsInf(c.LR, 0) {
		return bad("lr", c.LR, "must be a finite number > 0")
	}
	if !(c.ClipNorm >= 0) || math.IsInf(c.ClipNorm, 0) {
		return bad("clip-norm", c.ClipNorm, "must be a finite number >= 0 (0: no clipping)")
	}
	switch {
	case c.Preset != "":
		if _, err := Preset(c.Preset, int(UNKID)+1); err != nil {
			return &ConfigError{Field: "preset", Value: c.Preset, Err: err}
		}
	case c.Resume == "":
		return bad("preset", c.Preset, "required unless resuming")
	}
	if _, err := train.ParsePrecision(c.Precision, c.Device); err != nil {
		return &ConfigError{Field: "mixed-precision", Value: c.Precision, Err: err}
	}
	if c.MemoryLimit != "" {
		if _, _, err := torch.ParseMemory(c.MemoryLimit); err != nil {
			return &ConfigError{Field: "memory-limit", Value: c.MemoryLimit, Err: err}
		}
	}
	if c.DryRun && !c.AutoBatch {
		return bad("dry-run", true, "goes with auto-batch")
	}
	return nil
}
