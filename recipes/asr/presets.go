package asr

import (
	"fmt"
	"strings"

	"github.com/torchfit/torchfit/recipes"
)

// VRAMPresets are the guide's tables for a GPU of each size: the model
// preset, micro-batch, accumulation, mixed precision and checkpointing,
// at an effective batch of 8.
var VRAMPresets = map[string]recipes.Preset{
	"8gb":  {Name: "8gb", Model: "minimal", MicroBatch: 2, Accum: 4, Mixed: true, Checkpointing: true},
	"12gb": {Name: "12gb", Model: "optimized", MicroBatch: 2, Accum: 4, Mixed: true, Checkpointing: true},
	"16gb": {Name: "16gb", Model: "optimized", MicroBatch: 4, Accum: 2, Mixed: true},
	"24gb": {Name: "24gb", Model: "original", MicroBatch: 8, Accum: 1, Mixed: true},
}

// VRAMPreset looks a --vram value up in VRAMPresets.
func VRAMPreset(name string) (recipes.Preset, error) { return recipes.LookupVRAM(name, VRAMPresets) }

// Preset names, largest first. original, optimized and minimal are the
// KonkaniVani guide's three sizes (d_model, encoder layers, decoder layers)
// = (256, 12, 6), (192, 8, 4), (128, 6, 3); tiny is for tests and CPU demos.
var Presets = []string{"original", "optimized", "minimal", "tiny"}

// Preset returns a named configuration for a vocabulary of vocab tokens.
//
// The guide fixes only d_model and the layer counts, and quotes parameter
// counts: original ≈ 24.7M, optimized ≈ 10–12M, minimal ≈ 4–6M. The
// feed-forward sizes and kernels below are chosen so that, with a ~60-token
// character vocabulary, the counts land there: original 24.90M (FF 1024 =
// 4·d in the encoder, 512 in the decoder, kernel 31), optimized 10.32M (FF
// 768 = 4·d, kernel 31), minimal 4.56M (FF 768 = 6·d, kernel 15). tiny
// (d 96, 3 + 1 layers, ~1M) trains in minutes on a CPU.
func Preset(name string, vocab int) (ModelConfig, error) {
	if vocab <= int(UNKID) {
		return ModelConfig{}, fmt.Errorf("asr: preset %q: vocabulary of %d tokens is smaller than the specials", name, vocab)
	}
	c := ModelConfig{Vocab: int64(vocab), NumMels: 80, CTCWeight: 0.3, LabelSmoothing: 0.1, Dropout: 0.1, MaxLen: 5000}
	switch strings.ToLower(name) {
	case "original":
		c.DModel, c.Heads, c.EncoderLayers, c.DecoderLayers = 256, 4, 12, 6
		c.FFDim, c.DecoderFFDim, c.ConvKernel = 1024, 512, 31
	case "optimized":
		c.DModel, c.Heads, c.EncoderLayers, c.DecoderLayers = 192, 4, 8, 4
		c.FFDim, c.DecoderFFDim, c.ConvKernel = 768, 768, 31
	case "minimal":
		c.DModel, c.Heads, c.EncoderLayers, c.DecoderLayers = 128, 4, 6, 3
		c.FFDim, c.DecoderFFDim, c.ConvKernel = 768, 768, 15
	case "tiny":
		c.DModel, c.Heads, c.EncoderLayers, c.DecoderLayers = 96, 4, 3, 1
		c.FFDim, c.DecoderFFDim, c.ConvKernel = 384, 384, 15
	default:
		return ModelConfig{}, &ConfigError{Field: "preset", Value: name, Err: fmt.Errorf("unknown model preset %q (want one of %s)", name, strings.Join(Presets, ", "))}
	}
	return c, nil
}

// Defaults are the KonkaniVani guide's: micro-batch 2 × accumulation 4,
// clipping at 5, the CUDA cache emptied every 50 steps.
var Defaults = recipes.Defaults{
	Data: "data/asr", MicroBatch: 2, Accum: 4, Precision: "no", Epochs: 20, LR: 1e-3, Warmup: 100, ClipNorm: 5,
	EmptyCacheEvery: 50, CheckpointDir: "checkpoints", CheckpointEvery: 100, Workers: 2, Prefetch: 2, MemoryEvery: 25,
}
