package asr

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// PlanConfig asks which micro-batch, accumulation, precision and
// checkpointing a preset should train with in a memory budget.
type PlanConfig struct {
	Data           string // corpus directory
	Preset         string
	Device         torch.Device
	Budget         int64 // bytes the training may use on the device
	EffectiveBatch int
	// Workers and Prefetch are the training loader's: on the CPU the
	// batches it keeps alive count in the plan (data.Options.Resident).
	Workers, Prefetch int
	// Precisions allowed (nil: memplan.Precisions for the device and CPU).
	Precisions []amp.Precision
	// Report receives each candidate as it is measured (nil: none).
	Report func(memplan.Row)
}

// PlanMemory measures the preset's real training step — forward, backward and the
// AdamW update, on the longest training utterances (the worst case) — for
// the candidates memplan.Plan searches, and returns its choice: the fastest
// configuration per effective batch that fits the budget with its margin.
// The model and optimizer are built once; every dry run is undone.
func PlanMemory(c PlanConfig) (res memplan.Result, err error) {
	torch.Main().Do(func() { res, err = planMemory(c) })
	return res, err
}

func planMemory(c PlanConfig) (memplan.Result, error) {
	manifest := filepath.Join(c.Data, "train.jsonl")
	vocab, err := BuildVocabFromManifest(manifest)
	if err != nil {
		return memplan.Result{}, err
	}
	mcfg, err := Preset(c.Preset, vocab.Size())
	if err != nil {
		return memplan.Result{}, err
	}
	feat, err := NewFeaturizer(16000, 400, 160, int(mcfg.NumMels))
	if err != nil {
		return memplan.Result{}, err
	}
	defer feat.Close()
	corpus, err := LoadCorpus(manifest, vocab, feat)
	if err != nil {
		return memplan.Result{}, err
	}
	order := make([]int, corpus.Len())
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return corpus.Frames(order[a]) > corpus.Frames(order[b]) })
	if len(order) == 0 {
		return memplan.Result{}, fmt.Errorf("asr: no training utterances in %s", c.Data)
	}
	ds := dataset(corpus)
	// The loader's batch of the longest utterances, micro-batches taken from it.
	worst, err := recipes.NewWorst(ds, Collate, order, c.EffectiveBatch, c.Device, data.Options{Workers: c.Workers, Prefetch: c.Prefetch})
	if err != nil {
		return memplan.Result{}, err
	}
	defer worst.Free()
	torch.ManualSeed(1)
	m, err := NewConformer(mcfg)
	if err != nil {
		return memplan.Result{}, err
	}
	defer nn.Free(m)
	if c.Device != torch.CPU {
		nn.To(m, c.Device, torch.Float32)
	}
	opt := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.01), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	precisions := c.Precisions
	if len(precisions) == 0 {
		precisions = memplan.Precisions(c.Device, amp.HostCPU())
	}
	measure := func(cand memplan.Candidate) (memplan.Measurement, error) {
		m.Cfg.GradCheckpointing = cand.Checkpointing
		defer func() { m.Cfg.GradCheckpointing = false }()
		scaler := amp.NewGradScaler(c.Device, amp.ScalerOptions{Disabled: !cand.Precision.Scaled()})
		weight := float64(cand.MicroBatch) / float64(c.EffectiveBatch)
		micro := func() error {
			mb := worst.Micro(cand.MicroBatch, c.Device)
			var loss *torch.Tensor
			run := func() {
				loss = m.BatchLoss(mb)
			}
			if cand.Precision != amp.FP32 {
				amp.Autocast(c.Device, cand.Precision.DType(), run)
			} else {
				run()
			}
			scaler.Scale(loss.ToDType(torch.Float32).MulScalar(weight)).Backward()
			return nil
		}
		update := func() error {
			scaler.Step(opt)
			scaler.Update()
			opt.ZeroGrad()
			return nil
		}
		nn.SetTraining(m, true)
		return memplan.DryRun{Device: c.Device, Model: m, Optimizers: []nn.Optimizer{opt}, Scalers: []*amp.GradScaler{scaler}}.
			Run(cand.Accum, micro, update)
	}
	return memplan.Plan(memplan.PlanOptions{Budget: c.Budget, EffectiveBatch: c.EffectiveBatch, Precisions: precisions,
		Checkpointing: []bool{false, true}, Report: c.Report, Exact: true}, measure) // the trainer's micro-batches are all full
}
