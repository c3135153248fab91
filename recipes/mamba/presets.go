package mamba

import (
	"cmp"
	"github.com/torchfit/torchfit/recipes"

	"fmt"
	"sort"
	"strings"
)

// The GPT-2 tokenizer's vocabulary: r50k_base, the seed's vocab_size.
const (
	TokenizerName = "r50k_base"
	VocabSize     = 50257
	EOT           = 50256 // <|endoftext|>
)

// ModelSizes are --model_size's models. small is the seed's config files'
// model (d_model 512, 8 layers: ~155 MB of float32 weights, the guide's
// "Small: ~200 MB"); medium and large have the shapes of state-spaces'
// mamba-130m and mamba-370m (~0.5 and ~1.5 GB, the guide's "~600 MB" and
// "~1.6 GB"); tiny is the CPU preset's.
var ModelSizes = map[string]ModelConfig{
	"tiny":   {DModel: 128, NLayers: 2, DState: 16, Expand: 2, Dropout: 0, MaxSeqLen: 2048, VocabSize: VocabSize},
	"small":  {DModel: 512, NLayers: 8, DState: 16, Expand: 2, Dropout: 0.1, MaxSeqLen: 2048, VocabSize: VocabSize},
	"medium": {DModel: 768, NLayers: 24, DState: 16, Expand: 2, Dropout: 0.1, MaxSeqLen: 2048, VocabSize: VocabSize},
	"large":  {DModel: 1024, NLayers: 48, DState: 16, Expand: 2, Dropout: 0.1, MaxSeqLen: 2048, VocabSize: VocabSize},
}

// VRAM is one row of the guide's "Recommended Settings by GPU" (the
// seed's vram section): the shared part (Preset.Model is the model size
// it suggests, Mixed its use_fp16) and the sequence length, CPU offload
// and training preset it implies.
type VRAM struct {
	recipes.Preset
	SeqLen     int
	CPUOffload bool
	// Training names the training preset it implies ("": default).
	Training string
}

// VRAMPresets are --vram's rows. 8gb is the guide's "Ultra-Safe" (1 × 256,
// accumulation 16, fp16, checkpointing), 16gb its conservative change
// (batch 2, seq 512, accumulation 8); 24gb+ turns checkpointing off (the
// guide enables it "for 8-16GB"). cpu is the CPU preset: the tiny model,
// 8 × 128, float32, and the cpu training preset.
var VRAMPresets = map[string]VRAM{
	"8gb":  {Preset: recipes.Preset{Name: "8gb", Model: "small", MicroBatch: 1, Accum: 16, Mixed: true, Checkpointing: true}, SeqLen: 256},
	"12gb": {Preset: recipes.Preset{Name: "12gb", Model: "small", MicroBatch: 2, Accum: 8, Mixed: true, Checkpointing: true}, SeqLen: 512},
	"16gb": {Preset: recipes.Preset{Name: "16gb", Model: "small", MicroBatch: 2, Accum: 8, Mixed: true, Checkpointing: true}, SeqLen: 512},
	"24gb": {Preset: recipes.Preset{Name: "24gb", Model: "medium", MicroBatch: 4, Accum: 4, Mixed: true}, SeqLen: 1024},
	"cpu":  {Preset: recipes.Preset{Name: "cpu", Model: "tiny", MicroBatch: 8, Accum: 1}, SeqLen: 128, Training: "cpu"},
}

// VRAMPreset looks a --vram value up ("24gb+" and "24GB" are 24gb): its
// shared part; VRAMPresets[p.Name] holds the rest.
func VRAMPreset(name string) (recipes.Preset, error) {
	table := make(map[string]recipes.Preset, len(VRAMPresets))
	for k, v := range VRAMPresets {
		table[k] = v.Preset
	}
	return recipes.LookupVRAM(name, table)
}

// ModelSize looks a --model_size value up.
func ModelSize(name string) (ModelConfig, error) {
	if c, ok := ModelSizes[strings.ToLower(strings.TrimSpace(name))]; ok {
		return c, nil
	}
	return ModelConfig{}, fmt.Errorf("unknown --model_size %q (want %s)", name, strings.Join(sortedKeys(ModelSizes), ", "))
}

// Training is the seed's "training" section (a --training_preset): its
// schedule, which a run keeps in recipes.Common (LR, MaxSteps, Warmup,
// CheckpointEvery, ClipNorm), and the rest, which is the recipe's own
// (Optim).
type Training struct {
	LR           float64 `json:"learning_rate"`
	MaxSteps     int     `json:"max_steps"`
	WarmupSteps  int     `json:"warmup_steps"`
	SaveInterval int     `json:"save_interval"`
	MaxGradNorm  float64 `json:"max_grad_norm"`
	Optim
}

// Optim is the part of the training section that recipes.Common does not
// hold: AdamW's settings, label smoothing, and how often to evaluate and
// log.
type Optim struct {
	WeightDecay    float64 `json:"weight_decay"`
	EvalInterval   int     `json:"eval_interval"`
	LoggingSteps   int     `json:"logging_steps"`
	Beta1          float64 `json:"adam_beta1"`
	Beta2          float64 `json:"adam_beta2"`
	Eps            float64 `json:"adam_epsilon"`
	LabelSmoothing float64 `json:"label_smoothing"`
}

// TrainingPresets are --training_preset's: default is the seed's training
// section; fast is its "test your configuration" run: a few steps that
// show whether memory holds, with evaluation and a checkpoint.
var TrainingPresets = map[string]Training{
	"default": {LR: 3e-4, MaxSteps: 100000, WarmupSteps: 2000, SaveInterval: 5000, MaxGradNorm: 1.0,
		Optim: Optim{WeightDecay: 0.1, EvalInterval: 1000, LoggingSteps: 10, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}},
	// cpu is --vram cpu's: the tiny model's schedule for 5 CPU minutes
	// (330 steps of 1,024 tokens at 6e-3, warm-up 30, cosine to 10 %:
	// 5.17 nats/token held out in 4.4 CPU minutes at one thread, where
	// 3e-3 for 300 steps gave 5.29 in 4.5; make quality-mamba).
	"cpu": {LR: 6e-3, MaxSteps: 330, WarmupSteps: 30, SaveInterval: 300, MaxGradNorm: 1.0,
		Optim: Optim{WeightDecay: 0.1, EvalInterval: 50, LoggingSteps: 50, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}},
	"fast": {LR: 3e-4, MaxSteps: 20, WarmupSteps: 5, SaveInterval: 20, MaxGradNorm: 1.0,
		Optim: Optim{WeightDecay: 0.1, EvalInterval: 10, LoggingSteps: 1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}},
}

// TrainingPreset looks a --training_preset value up.
func TrainingPreset(name string) (Training, error) {
	if t, ok := TrainingPresets[strings.ToLower(strings.TrimSpace(name))]; ok {
		return t, nil
	}
	return Training{}, fmt.Errorf("unknown --training_preset %q (want %s)", name, strings.Join(sortedKeys(TrainingPresets), ", "))
}

// sizeNamed returns the --model-size whose shape (d_model, layers,
// d_state, expand) m has, or "" when none has it.
func sizeNamed(m ModelConfig) string {
	for _, name := range sortedKeys(ModelSizes) {
		s := ModelSizes[name]
		if s.DModel == m.DModel && s.NLayers == m.NLayers && s.DState == m.DState && s.Expand == m.Expand {
			return name
		}
	}
	return ""
}

// modelLabel names the model a run trains in its log: the --model-size
// the command line chose, or, resuming, the size of the checkpoint's
// model (the one trained, whatever --model-size says); "custom" for a
// shape no size has.
func modelLabel(cfg TrainConfig, m ModelConfig) string {
	if cfg.Resume != "" {
		return cmp.Or(sizeNamed(m), "custom")
	}
	return cmp.Or(cfg.ModelSize, "custom")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Defaults are the seed's (its config_16gb_safe.json): micro-batch 1 ×
// accumulation 16, learning rate 3e-4 with 2000 warmup steps, clipping at
// 1.0, a checkpoint every 5000 steps.
var Defaults = recipes.Defaults{
	Data: "data/kjv", MicroBatch: 1, Accum: 16, Precision: "no", Epochs: 1000, LR: 3e-4, Warmup: 2000, ClipNorm: 1.0,
	CheckpointDir: "checkpoints/mamba", CheckpointEvery: 5000, Workers: 1, Prefetch: 2,
	VRAMRows: recipes.VRAMRows(VRAMPresets),
}
