package train

import (
	"slices"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train/ckpt"
)

// Checkpoint is what a training checkpoint holds besides the tensors:
// where the run is. The file is a torch.save dict (Python's torch.load
// reads it; with weights_only=True on PyTorch 2.x, not on 1.13, whose
// weights_only refuses every float, PyTorch's own optimizer state
// included: package ckpt). Its parts are PyTorch's own state dicts, so a
// Python loop resumes from it with load_state_dict, and LoadCheckpoint
// resumes from a Python torch.save of the same keys:
//
//	model       OrderedDict of the model's state dict
//	optimizer   the optimizer's state_dict(): {"state": {0: {...}, ...}, "param_groups": [...]}
//	            (parameters numbered as nn.Parameters(model) orders them, when
//	            the optimizer was made over those, groups in order)
//	scheduler   LambdaLR's state_dict() (when a schedule is attached)
//	scaler      GradScaler's state_dict(): scale, _growth_tracker, ...
//	rng_state   uint8 tensor: the CPU generator
//	loader      dict: epoch, batch, seed (the next batch to train on)
//	step, epoch, micro_batch, accum, effective_batch   ints
//	meta        dict of the caller's values (preset, vocabulary, ...)
//	run_id      string: the run that wrote it (Fit; absent from SaveCheckpoint's files)
//	run_checkpoints  list of the base names of the run's step checkpoints
//	            in the same directory once this one is written, oldest
//	            first (those beyond keep-last are pruned right after)
type Checkpoint struct {
	Step, Epoch int
	// MicroBatch is the micro-batch the run stepped with when it wrote the
	// file (smaller than configured after an out-of-memory error); Accum
	// and EffectiveBatch are the run's configured accumulation and
	// effective batch.
	MicroBatch, Accum, EffectiveBatch int
	Loader                            data.State
	Meta                              *ptfile.Dict
	// RunID is the run that wrote the file ("" for files written by
	// SaveCheckpoint or by torchfit before run ids); a Fit resuming from the
	// file continues that run.
	RunID string
	// RunFiles are the base names of the run's step checkpoints in the
	// file's directory when it was written, itself included.
	RunFiles []string
}

// SaveCheckpoint writes the trainer's complete state to path atomically
// (package ckpt's format). It belongs to no run: Fit writes its own with
// the run's id. Data parallel (Config.Parallel), every rank calls it and
// rank 0 writes; an optimizer whose state is split over the ranks
// (GatheredState) is gathered first, so the file holds the whole state.
func (t *Trainer) SaveCheckpoint(path string, loader data.State, epoch int, meta *ptfile.Dict) error {
	return t.withGathered(func() error {
		if !t.writer() {
			return nil
		}
		return t.saveCheckpoint(path, loader, epoch, meta, "", nil)
	})
}

// writer says whether this process writes checkpoints: rank 0 of a data
// parallel run, or the only process.
func (t *Trainer) writer() bool { return t.cfg.Parallel == nil || t.cfg.Parallel.Rank() == 0 }

// withGathered runs fn with a GatheredState optimizer's whole state
// gathered (on every rank: a collective), and fn alone otherwise.
func (t *Trainer) withGathered(fn func() error) error {
	g, ok := t.Opt.(GatheredState)
	if !ok {
		return fn()
	}
	var release func()
	err := t.Thread().DoErr(func() error {
		var err error
		release, err = g.GatherState()
		return err
	})
	if err != nil {
		return err
	}
	defer t.Thread().Do(release)
	return fn()
}

func (t *Trainer) saveCheckpoint(path string, loader data.State, epoch int, meta *ptfile.Dict, runID string, runFiles []string) error {
	return t.Thread().DoErr(func() error {
		return torch.TidyErr(func() error {
			w := ckpt.NewWriter()
			w.Module("model", t.Model)
			w.Optimizer("optimizer", t.Opt)
			w.Schedule("scheduler", t.Sched)
			w.Scaler("scaler", t.Scaler)
			w.RNG()
			w.Loader(loader)
			w.Int("step", t.step)
			w.Int("epoch", epoch)
			w.Int("micro_batch", t.engine.MicroBatch())
			w.Int("accum", t.cfg.Accum)
			w.Int("effective_batch", t.cfg.EffectiveBatch())
			w.Meta(meta)
			w.Run(runID, runFiles)
			return w.Save(path)
		})
	})
}

// LoadCheckpoint restores a checkpoint written by SaveCheckpoint into the
// trainer (model, optimizer, schedule, scaler, RNG, step) and returns where
// the run was. The trainer's micro-batch and accumulation stay its own
// (Config: a memory choice the resuming command makes), except that a
// run resumed with the file's own settings keeps the smaller micro-batch
// an out-of-memory error had made it take. Nothing changes when the file is corrupt or
// belongs to another model (missing keys, other shapes): the error (a
// *ckpt.Error) names the problem, and the file is only read.
//
// The file is never held whole. The model's part is checked from its
// description (ckpt.Reader.Describe, its records' checksums included) and
// the other parts are read, checked and freed; then the model's tensors
// are read and copied in, and then the optimizer's, scheduler's and
// scaler's parts read again and restored — the model first, as PyTorch
// does, since an optimizer may copy the parameters (Offload's host
// copies). What the host holds of the file at a time is the larger of the
// model's weights and the rest (for AdamW, its two moments), not their
// sum, for reading those parts twice. Out of memory while reading them
// the second time is the one way a failed load leaves the trainer
// changed.
func (t *Trainer) LoadCheckpoint(path string) (c Checkpoint, err error) {
	t.Thread().Do(func() { c, err = t.loadCheckpoint(path) })
	return c, err
}

func (t *Trainer) loadCheckpoint(path string) (Checkpoint, error) {
	r, err := ckpt.Open(path)
	if err != nil {
		return Checkpoint{}, err
	}
	defer r.Close()
	// Check everything before changing anything.
	desc, err := r.Describe("model")
	if err != nil {
		return Checkpoint{}, err
	}
	if err := desc.CheckModule("model", t.Model); err != nil {
		return Checkpoint{}, err
	}
	rest := slices.DeleteFunc(desc.Keys(), func(k string) bool { return k == "model" })
	f, err := r.Parts(rest...)
	if err != nil {
		return Checkpoint{}, err
	}
	defer f.Free()
	if err := f.CheckOptimizer("optimizer", t.Opt); err != nil {
		return Checkpoint{}, err
	}
	var c Checkpoint
	if c.Loader, err = f.Loader(); err != nil {
		return Checkpoint{}, err
	}
	for _, p := range []struct {
		key string
		dst *int
	}{{"step", &c.Step}, {"epoch", &c.Epoch}, {"micro_batch", &c.MicroBatch}, {"accum", &c.Accum}} {
		if *p.dst, err = f.Int(p.key); err != nil {
			return Checkpoint{}, err
		}
	}
	c.EffectiveBatch = c.MicroBatch * c.Accum // files of torchfit before it was stored
	if f.Has("effective_batch") {
		if c.EffectiveBatch, err = f.Int("effective_batch"); err != nil {
			return Checkpoint{}, err
		}
	}
	if c.RunID, c.RunFiles, err = f.Run(); err != nil {
		return Checkpoint{}, err
	}
	c.Meta = f.Meta()
	f.Free() // before the model's part is read
	mf, err := r.Parts("model")
	if err != nil {
		return Checkpoint{}, err
	}
	defer mf.Free()
	if err := mf.Module("model", t.Model); err != nil {
		return Checkpoint{}, err
	}
	mf.Free()
	state, err := r.Parts("optimizer", "scheduler", "scaler", "rng_state")
	if err != nil {
		return Checkpoint{}, err
	}
	defer state.Free()
	for _, load := range []func() error{
		func() error { return state.Optimizer("optimizer", t.Opt) },
		func() error { return state.Schedule("scheduler", t.Sched) },
		func() error { return state.Scaler("scaler", t.Scaler) },
		state.RNG,
	} {
		if err := load(); err != nil {
			return Checkpoint{}, err
		}
	}
	t.step = c.Step
	if c.EffectiveBatch == t.cfg.EffectiveBatch() && c.Accum == t.cfg.Accum && c.MicroBatch < t.MicroBatch() {
		t.SetMicroBatch(c.MicroBatch)
	}
	return c, nil
}
