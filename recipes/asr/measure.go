package asr

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// MeasureConfig describes one training step to measure.
type MeasureConfig struct {
	Data              string // corpus directory
	Preset            string
	MicroBatch        int // micro-batch
	Accum             int
	Precision         string // fp32, bf16, fp16
	GradCheckpointing bool
	Device            torch.Device
}

// Measurement is the memory and time of one optimizer step.
type Measurement struct {
	Params int64
	// Peak is the peak bytes allocated during the step, model, gradients
	// and optimizer state included (the allocator's high-water mark).
	Peak int64
	// Activations is Peak minus what is held between steps (weights and
	// optimizer state).
	Activations int64
	Step        time.Duration
}

// MeasureStep runs two optimizer steps (AdamW) of a preset on the longest
// training utterances and measures the second one.
func MeasureStep(c MeasureConfig) (m Measurement, err error) {
	torch.Main().Do(func() { m, err = measureStep(c) })
	return m, err
}

func measureStep(c MeasureConfig) (Measurement, error) {
	var out Measurement
	manifest := filepath.Join(c.Data, "train.jsonl")
	vocab, err := BuildVocabFromManifest(manifest)
	if err != nil {
		return out, err
	}
	mcfg, err := Preset(c.Preset, vocab.Size())
	if err != nil {
		return out, err
	}
	mcfg.GradCheckpointing = c.GradCheckpointing
	mcfg.Dropout = 0
	feat, err := NewFeaturizer(16000, 400, 160, int(mcfg.NumMels))
	if err != nil {
		return out, err
	}
	defer feat.Close()
	corpus, err := LoadCorpus(manifest, vocab, feat)
	if err != nil {
		return out, err
	}
	n := c.MicroBatch * c.Accum
	order := make([]int, corpus.Len())
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return corpus.Frames(order[a]) > corpus.Frames(order[b]) })
	if len(order) < n {
		return out, fmt.Errorf("asr: %d utterances, need %d", len(order), n)
	}
	batch, err := recipes.CollateAt(dataset(corpus), Collate, order[:n])
	if err != nil {
		return out, err
	}
	defer batch.Free()
	torch.ManualSeed(1)
	m, err := NewConformer(mcfg)
	if err != nil {
		return out, err
	}
	defer nn.Free(m)
	if c.Device != torch.CPU {
		nn.To(m, c.Device, torch.Float32)
	}
	out.Params = nn.NumParams(m)
	prec, err := amp.ParsePrecision(c.Precision, c.Device)
	if err != nil {
		return out, err
	}
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-4))
	defer opt.Free()
	tr, err := train.New(m, opt, lossFn(m), train.Config{MicroBatch: c.MicroBatch, Accum: c.Accum, Device: c.Device, Precision: prec.Precision})
	if err != nil {
		return out, err
	}
	if _, err := tr.Step(batch); err != nil { // creates the optimizer state
		return out, err
	}
	torch.EmptyCache()
	held := torch.MustMemoryStats(c.Device).Allocated
	torch.ResetPeakMemory(c.Device)
	start := time.Now()
	if _, err := tr.Step(batch); err != nil {
		return out, err
	}
	out.Step = time.Since(start)
	out.Peak = torch.MustMemoryStats(c.Device).PeakAllocated
	out.Activations = out.Peak - held
	return out, nil
}

// memoryTable measures the guide's "Model Size Comparison" on this device:
// parameters and peak step memory per preset, with the levers off and on.
func memoryTable(dataDir string, dev torch.Device, presets []string, logf func(string, ...any)) (string, error) {
	low := "bf16"
	if dev.IsCUDA() {
		low = "fp16"
	}
	type lever struct {
		name         string
		batch, accum int
		prec         string
		ckpt         bool
	}
	levers := []lever{
		{"batch 8, fp32", 8, 1, "fp32", false},
		{"batch 2 × accum 4, fp32", 2, 4, "fp32", false},
		{"batch 8, " + low, 8, 1, low, false},
		{"batch 8, fp32, checkpointing", 8, 1, "fp32", true},
		{"batch 2 × accum 4, " + low + ", checkpointing", 2, 4, low, true},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| preset | parameters | levers | peak memory | activations | step time |\n|---|---|---|---|---|---|\n")
	for _, p := range presets {
		for _, l := range levers {
			r, err := MeasureStep(MeasureConfig{Data: dataDir, Preset: p, MicroBatch: l.batch, Accum: l.accum,
				Precision: l.prec, GradCheckpointing: l.ckpt, Device: dev})
			if err != nil {
				return b.String(), err
			}
			row := fmt.Sprintf("| %s | %.2fM | %s | %s | %s | %.2f s |\n", p, float64(r.Params)/1e6, l.name,
				torch.FormatBytes(r.Peak), torch.FormatBytes(r.Activations), r.Step.Seconds())
			if logf != nil {
				logf("%s", strings.TrimSpace(row))
			}
			b.WriteString(row)
		}
	}
	return b.String(), nil
}
