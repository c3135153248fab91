package clip

import (
	"fmt"
	"sort"
	"strings"

	"github.com/torchfit/torchfit/recipes"
)

// Defaults are the seed's: micro-batch 16 × accumulation 8 = 128, 20
// epochs at lr 2e-5, clipping at 1.0, the CUDA cache emptied every 10
// steps, mixed precision on, 95 % of the device's memory, prefetch 2.
var Defaults = recipes.Defaults{
	Data: "data/clip-cars", MicroBatch: 16, Accum: 8, Precision: "auto", Epochs: 20, LR: 2e-5, Warmup: 50, ClipNorm: 1.0,
	EmptyCacheEvery: 10, MemoryFraction: 0.95, CheckpointDir: "checkpoints/clip", CheckpointEvery: 0, Workers: 2, Prefetch: 2,
	MemoryEvery: 10,
}

// pretrainDefaults are the pretraining stage's: the shapes set from
// random weights at a higher learning rate, the same effective batch.
var pretrainDefaults = recipes.Defaults{
	Data: "data/clip-shapes", MicroBatch: 16, Accum: 8, Precision: "auto", Epochs: 10, LR: 5e-4, Warmup: 100, ClipNorm: 1.0,
	EmptyCacheEvery: 10, MemoryFraction: 0.95, CheckpointDir: "checkpoints/clip-pretrain", CheckpointEvery: 0, Workers: 2, Prefetch: 2,
	MemoryEvery: 10,
}

// VRAMPresets are the settings for a GPU of each size: ViT-B/32 at the
// seed's micro-batches — 16 × 8 on 8 GB, 32 × 4 from 12 GB ("For Larger
// GPUs (12GB+)"), 64 × 2 on 24 GB — always effective batch 128 with mixed
// precision.
var VRAMPresets = map[string]recipes.Preset{
	"8gb":  {Name: "8gb", Model: "vit-b32", MicroBatch: 16, Accum: 8, Mixed: true},
	"12gb": {Name: "12gb", Model: "vit-b32", MicroBatch: 32, Accum: 4, Mixed: true},
	"16gb": {Name: "16gb", Model: "vit-b32", MicroBatch: 32, Accum: 4, Mixed: true},
	"24gb": {Name: "24gb", Model: "vit-b32", MicroBatch: 64, Accum: 2, Mixed: true},
}

// VRAMPreset looks a --vram value up in VRAMPresets.
func VRAMPreset(name string) (recipes.Preset, error) { return recipes.LookupVRAM(name, VRAMPresets) }

// Presets: "cpu" (1.7M parameters, 64×64 images) for the CPU demo and
// tests, and ViT-B/32's shapes (OpenAI's, 151M parameters) for GPUs.
var presets = map[string]Config{
	"cpu": {EmbedDim: 128, ImageResolution: 64, VisionLayers: 4, VisionWidth: 128, VisionHeads: 2, VisionPatchSize: 16,
		ContextLength: 16, VocabSize: 128, TransformerWidth: 128, TransformerHeads: 2, TransformerLayers: 4},
	"vit-b32": {EmbedDim: 512, ImageResolution: 224, VisionLayers: 12, VisionWidth: 768, VisionHeads: 12, VisionPatchSize: 32,
		ContextLength: 77, VocabSize: 49408, TransformerWidth: 512, TransformerHeads: 8, TransformerLayers: 12},
}

// PresetNames lists the presets.
func PresetNames() []string {
	var out []string
	for k := range presets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Preset returns a preset's configuration.
func Preset(name string) (Config, error) {
	c, ok := presets[strings.ToLower(name)]
	if !ok {
		return Config{}, fmt.Errorf("unknown preset %q (want %s)", name, strings.Join(PresetNames(), ", "))
	}
	return c, nil
}

// presetOf names the preset a configuration is, or "custom".
func presetOf(c Config) string {
	c.GradCheckpointing = false
	for _, name := range PresetNames() {
		if presets[name] == c {
			return name
		}
	}
	return "custom"
}
