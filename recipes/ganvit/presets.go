package ganvit

import (
	"github.com/torchfit/torchfit/recipes"

	"fmt"
	"sort"
	"strings"
)

// Preset is a set of sizes: the spectrogram, the batch sizes, the number
// of synthetic spectrograms and the models.
type Preset struct {
	Name         string
	Mels, Frames int64
	GANBatch     int // GAN_BATCH_SIZE
	MicroBatch   int // BATCH_SIZE (the classifier's)
	NumSynthetic int // NUM_SYNTHETIC
	ViT          string
	Latent       int64 // LATENT_DIM
	GenChannels  int64
	DiscChannels int64
	Ups          int
}

// Presets: "gpu" is the seed's defaults (its 16 GB row: GAN 24, classifier
// 12, 128 mels × 1292 frames = 30 s, ViT-B/16 at 224 × 224); 8gb, 12gb,
// 16gb and 24gb are its "Tuning for Your GPU" table (--vram); "cpu" is
// small enough to train on two cores: 64 mels × 130 frames (3 s), the
// cpu ViT (ViT-Ti's width, 6 layers, 112 × 112). The seed gives no
// NUM_SYNTHETIC for 16 GB; 3000 lies between its 12 GB (2000) and 24 GB
// (5000) rows.
var Presets = map[string]Preset{
	"cpu":  {Name: "cpu", Mels: 64, Frames: 130, GANBatch: 16, MicroBatch: 12, NumSynthetic: 400, ViT: "cpu", Latent: 100, GenChannels: 128, DiscChannels: 16, Ups: 4},
	"gpu":  {Name: "gpu", Mels: 128, Frames: 1292, GANBatch: 24, MicroBatch: 12, NumSynthetic: 3000, ViT: "b16", Latent: 100, GenChannels: 256, DiscChannels: 32, Ups: 4},
	"16gb": {Name: "16gb", Mels: 128, Frames: 1292, GANBatch: 24, MicroBatch: 12, NumSynthetic: 3000, ViT: "b16", Latent: 100, GenChannels: 256, DiscChannels: 32, Ups: 4},
	"12gb": {Name: "12gb", Mels: 128, Frames: 1292, GANBatch: 16, MicroBatch: 8, NumSynthetic: 2000, ViT: "b16", Latent: 100, GenChannels: 256, DiscChannels: 32, Ups: 4},
	"8gb":  {Name: "8gb", Mels: 96, Frames: 1292, GANBatch: 12, MicroBatch: 6, NumSynthetic: 1500, ViT: "b16", Latent: 100, GenChannels: 256, DiscChannels: 32, Ups: 4},
	"24gb": {Name: "24gb", Mels: 128, Frames: 1292, GANBatch: 48, MicroBatch: 24, NumSynthetic: 5000, ViT: "b16", Latent: 100, GenChannels: 256, DiscChannels: 32, Ups: 4},
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	var out []string
	for k := range Presets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// VRAMPreset looks a --vram value up: 8gb, 12gb, 16gb or 24gb (also 8,
// 8GB, 24gb+). Its Model names the row of Presets that holds the rest
// (spectrogram, GAN batch, NUM_SYNTHETIC, networks).
func VRAMPreset(name string) (recipes.Preset, error) {
	table := map[string]recipes.Preset{}
	for _, k := range []string{"8gb", "12gb", "16gb", "24gb"} {
		table[k] = recipes.Preset{Name: k, Model: k, MicroBatch: Presets[k].MicroBatch}
	}
	return recipes.LookupVRAM(name, table)
}

// GANConfig is the preset's GAN for classes genres.
func (p Preset) GANConfig(classes int) GANConfig {
	return GANConfig{Mels: p.Mels, Frames: p.Frames, Latent: p.Latent, Classes: int64(classes), Embed: 16,
		GenChannels: p.GenChannels, DiscChannels: p.DiscChannels, Ups: p.Ups}
}

// ViTConfig is the preset's classifier for classes genres.
func (p Preset) ViTConfig(classes int) (ViTConfig, error) {
	c, ok := ViTConfigs[p.ViT]
	if !ok {
		return c, fmt.Errorf("--vit %q: want one of %s", p.ViT, strings.Join(ViTNames(), ", "))
	}
	c.Classes = int64(classes)
	return c, nil
}

// Defaults are the seed's where it has them: BATCH_SIZE 12, mixed
// precision on, the cache emptied every 10 iterations.
var Defaults = recipes.Defaults{
	Data: "data/ganvit", MicroBatch: 12, Accum: 1, Precision: "auto", Epochs: 10, LR: 3e-4, Warmup: 20, ClipNorm: 1,
	EmptyCacheEvery: 10, CheckpointDir: "checkpoints", Workers: 2, Prefetch: 2, MemoryEvery: 10,
}
