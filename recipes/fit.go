package recipes

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
)

// Job is what a recipe hands the shared training loop (Session.Fit): its
// model, optimizer, loss and data, and its evaluation. The Session's
// shared settings supply the rest (micro-batch and accumulation,
// precision, clipping, the CUDA cache cadence, memory lines, checkpoints,
// resume, epochs and the step cap, the loader's seed, workers and
// prefetch).
type Job struct {
	Model nn.Module
	Opt   nn.Optimizer
	Sched *nn.Schedule
	Loss  train.LossFunc
	// Trainer adds the recipe's own trainer settings (Count, Contrastive,
	// Parallel) to the shared ones.
	Trainer func(*train.Config)
	// Dataset and Collate are the training data; Loader adds the recipe's
	// loader settings (a data-parallel shard, batches on the device).
	Dataset data.Dataset[data.Sample]
	Collate func([]data.Sample) (*data.Batch, error)
	Loader  func(*data.Options)
	// Ready, when set, runs once the trainer exists, before Fit (to set
	// OnStep, say).
	Ready func(*train.Trainer)
	// Start runs once Fit has resumed and checked the checkpoint
	// directory, before the first step (an --auto-batch search, a baseline
	// evaluation); the peak memory counter is reset after it.
	Start func(*train.Trainer) error
	// Eval runs after each epoch (train.FitConfig.Eval).
	Eval func(epoch int) (map[string]float64, error)
	Meta *ptfile.Dict
}

// Outcome is what Session.Fit did.
type Outcome struct {
	Checkpoint string
	// Interrupted: a signal stopped the run after a step it saved.
	Interrupted bool
	Steps       int
	// MicroBatch and Accum are the micro-batch and accumulation at the
	// end (a smaller micro-batch and more accumulation after an
	// out-of-memory error, at the same effective batch).
	MicroBatch, Accum int
	OOMEvents         int
	PeakMemory        int64 // allocated, since Start ended
}

// Fit trains job under the session's shared settings: Trainer, then Run.
func (s *Session) Fit(ctx context.Context, job Job) (Outcome, error) {
	tr, err := s.Trainer(job)
	if err != nil {
		return Outcome{}, err
	}
	return s.Run(ctx, tr, job)
}

// Trainer makes job's train.Trainer: the effective batch stepped in
// micro-batches under the session's precision, clipping and cadences,
// with the recipe's additions (Job.Trainer) and schedule.
func (s *Session) Trainer(job Job) (*train.Trainer, error) {
	cm := s.cm
	tc := train.Config{
		MicroBatch: cm.MicroBatch, Accum: cm.Accum, Device: cm.Device, Precision: s.Precision.Precision,
		ClipNorm: cm.ClipNorm, EmptyCacheEvery: cm.EmptyCacheEvery, MemoryEvery: cm.MemoryEvery,
		Events: s.Events(), MaxNonFinite: cm.MaxNonFinite,
	}
	if job.Trainer != nil {
		job.Trainer(&tc)
	}
	tr, err := train.New(job.Model, job.Opt, job.Loss, tc)
	if err != nil {
		return nil, err
	}
	tr.Sched = job.Sched
	if job.Ready != nil {
		job.Ready(tr)
	}
	return tr, nil
}

// Run trains with tr over job's data by train.Fit: checkpoints, resume,
// evaluation and signals as the session's settings say. A run with fewer
// training examples than one effective batch is the user's error.
func (s *Session) Run(ctx context.Context, tr *train.Trainer, job Job) (Outcome, error) {
	cm := s.cm
	if n := job.Dataset.Len(); tr.EffectiveBatch() > n {
		return Outcome{}, &ConfigError{Field: "micro-batch", Value: cm.MicroBatch,
			Reason: fmt.Sprintf("the effective batch %d (× %d accumulation steps) is more than the %d training examples: no step could be made", tr.EffectiveBatch(), cm.Accum, n)}
	}
	var out Outcome
	start := func() error {
		s.Started()
		if job.Start != nil {
			if err := job.Start(tr); err != nil {
				return err
			}
		}
		torch.ResetPeakMemory(cm.Device)
		return nil
	}
	newLoader := func(st *data.State) (train.Loader, error) {
		o := data.Options{BatchSize: tr.EffectiveBatch(), Shuffle: true, Seed: cm.Seed, DropLast: true,
			Workers: cm.Workers, Prefetch: cm.Prefetch, Resume: st}
		if job.Loader != nil {
			job.Loader(&o)
		}
		return data.NewLoader(job.Dataset, job.Collate, o)
	}
	fit, err := train.Fit(ctx, tr, newLoader, train.FitConfig{
		Epochs: cm.Epochs, MaxSteps: cm.MaxSteps, CheckpointDir: cm.CheckpointDir, CheckpointEvery: cm.CheckpointEvery,
		Overwrite: cm.Overwrite, Resume: cm.Resume, Meta: job.Meta, Start: start, Eval: job.Eval,
	})
	out.Checkpoint = fit.Checkpoint
	out.Interrupted = errors.Is(err, train.ErrInterrupted)
	if err != nil && !out.Interrupted {
		return out, err
	}
	out.Steps, out.MicroBatch, out.Accum, out.OOMEvents = tr.Steps(), tr.MicroBatch(), tr.Accum(), tr.OOMEvents()
	out.PeakMemory = torch.MustMemoryStats(cm.Device).PeakAllocated
	return out, nil
}

// TotalSteps is the optimizer steps a run takes: epochs of perEpoch steps,
// capped by maxSteps (0: no cap).
func TotalSteps(perEpoch, epochs, maxSteps int) int {
	total := perEpoch * epochs
	if maxSteps > 0 && maxSteps < total {
		total = maxSteps
	}
	return total
}

// AutoBatch is --auto-batch's search, the seed's find_optimal_batch_size:
// the largest micro-batch of the run's worst case (worst(n): a batch of
// the n longest examples, what) that a training step fits, logged as a
// table; the trainer goes on with it (at most the effective batch) and
// as many accumulation steps as keep the effective batch.
func AutoBatch(tr *train.Trainer, worst func(n int) (*data.Batch, error), what string, logf func(string, ...any)) (memplan.FindResult, error) {
	effective := tr.EffectiveBatch()
	found, err := tr.FindBatchSize(effective, worst)
	var b strings.Builder
	found.Table(&b)
	logf("batch-size search on the longest %s:\n%s", what, b.String())
	if err != nil {
		return found, err
	}
	micro := min(found.MicroBatch, effective)
	tr.SetMicroBatch(micro)
	logf("auto batch: micro-batch %d × %d accumulation steps keeps the effective batch %d", micro, tr.Accum(), effective)
	return found, nil
}

// CollateAt collates the examples idx of ds into one batch (the caller's;
// the examples are freed): an evaluation's batches and --auto-batch's
// worst cases.
func CollateAt(ds data.Dataset[data.Sample], collate func([]data.Sample) (*data.Batch, error), idx []int) (*data.Batch, error) {
	samples := make([]data.Sample, 0, len(idx))
	defer func() {
		for _, s := range samples {
			for _, t := range s {
				t.Free()
			}
		}
	}()
	for _, i := range idx {
		s, err := ds.Get(i)
		if err != nil {
			return nil, err
		}
		samples = append(samples, s)
	}
	return collate(samples)
}

// Worst holds what a training run holds of its data, at its worst, for a
// planner's measurements: the loader's batches — the effective batch of
// the longest examples, collated on the host as the recipes' loaders
// collate it, as many copies as the loader keeps alive on the CPU
// (data.Options.Resident: the one trained on and those its workers build
// ahead) — and each micro-batch taken from the first as the trainer takes
// it (Batch.Slice to the device: a view on the CPU, a copy elsewhere). On
// the CPU the loader's batches are in the memory measured, as they are in
// training: a planner that held only the micro-batch under-counted every
// candidate, most of all those smaller than the effective batch, and a
// plan that fitted ran out of memory. On a CUDA device they are on the
// host and one is held. Nothing else is held, so no other size counts in
// a candidate's need.
type Worst struct {
	b []*data.Batch
}

// NewWorst collates the first effective examples of order from ds: the
// loader batch a planner's micro-batches are taken from, for a run on
// device whose loader has options o (its Workers and Prefetch).
func NewWorst(ds data.Dataset[data.Sample], collate func([]data.Sample) (*data.Batch, error), order []int, effective int, device torch.Device, o data.Options) (*Worst, error) {
	n := 1
	if !device.IsCUDA() {
		n = o.Resident()
	}
	w := &Worst{}
	for range n {
		b, err := CollateAt(ds, collate, order[:min(effective, len(order))])
		if err != nil {
			w.Free()
			return nil, err
		}
		w.b = append(w.b, b)
	}
	return w, nil
}

// Micro returns the first n examples of the loader batch on device, as the
// trainer's micro-batch (at most the whole batch). The caller owns it (Free
// it, or take it inside Tidy).
func (w *Worst) Micro(n int, device torch.Device) *data.Batch {
	return w.b[0].Slice(0, min(n, w.b[0].Size()), device)
}

// Free releases the loader batches.
func (w *Worst) Free() {
	for _, b := range w.b {
		b.Free()
	}
	w.b = nil
}
