package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train/ckpt"
)

// FitConfig configures Fit.
type FitConfig struct {
	Epochs   int
	MaxSteps int // stop after this many optimizer steps in all (0: no limit)
	// CheckpointDir receives checkpoint_step_N.pt every CheckpointEvery
	// steps (0: only at epoch ends and the end) and checkpoint_epoch_E.pt
	// at each epoch end; the newest KeepLast step checkpoints of this run
	// stay (default 3; negative: all). Checkpoints of other runs in the
	// directory are left alone: never pruned, and never overwritten unless
	// Overwrite is set (Fit refuses to start with a *ConflictError when the
	// run could write a file of the same name).
	CheckpointDir   string
	CheckpointEvery int
	KeepLast        int
	// Overwrite lets this run replace checkpoints of other runs that have
	// the names it writes (it still prunes only its own).
	Overwrite bool
	// Resume continues from this checkpoint (LoadCheckpoint), and continues
	// its run (run_id): the file and the run's checkpoints in the same
	// directory are this run's to prune and, resuming from an earlier
	// one, to overwrite.
	Resume string
	// Start, when set, runs once the checkpoint directory is checked and
	// before the first step (a baseline evaluation, say).
	Start func() error
	// Eval runs after each epoch; its values are reported (EvalEvent).
	Eval func(epoch int) (map[string]float64, error)
	// Meta is stored in every checkpoint.
	Meta *ptfile.Dict
	// Events receives Fit's events (EpochEvent, StepEvent, EvalEvent,
	// CheckpointEvent, messages) besides the trainer's own; nil: the
	// trainer's Config.Events. A front end renders them (package report:
	// log lines, a JSONL metrics file, a progress bar).
	Events Sink
}

// EpochEvent reports the start of an epoch.
type EpochEvent struct {
	Epoch, Epochs int // the epoch starting (from 1) and how many in all
	Batches       int // optimizer steps in an epoch
	// LastStep is the run's last optimizer step: the epochs' end, or the
	// step cap (0: not known).
	LastStep int
}

func (EpochEvent) event() {}

// ErrInterrupted is returned by Fit after a signal or a cancelled context,
// once the checkpoint is saved.
var ErrInterrupted = errors.New("training interrupted; checkpoint saved")

// Loader is what Fit reads batches from (a *data.Loader[S, *data.Batch]).
type Loader interface {
	Next(ctx context.Context) (*data.Batch, error)
	State() data.State
	Len() int
	Close() error
}

// FitResult is what Fit wrote.
type FitResult struct {
	// RunID names the run in its checkpoints (run_id): new, or the
	// resumed checkpoint's.
	RunID string
	// Checkpoint is the last checkpoint written ("" without CheckpointDir).
	Checkpoint string
	// Checkpoints are the files this call wrote that are still there (the
	// rest were pruned), in the order written.
	Checkpoints []string
}

// Fit trains for fc.Epochs epochs over the loader that newLoader returns
// (called with the position to resume from, or nil), with checkpoints and
// evaluation, reporting what it does as events. When ctx is cancelled (a
// front end cancels it on SIGINT/SIGTERM: report.SignalContext) Fit
// finishes the current optimizer step, saves a checkpoint and returns
// ErrInterrupted. Temporary files that a killed
// checkpoint write left in fc.CheckpointDir are removed first. A diverged
// run (a *NonFiniteError, see Config.MaxNonFinite) stops before any
// checkpoint of its diverged state is written.
// Fit runs on the trainer's thread (Config.Thread), loading included when
// the loader has no workers, as Python runs its loop on one thread.
func Fit(ctx context.Context, t *Trainer, newLoader func(resume *data.State) (Loader, error), fc FitConfig) (res FitResult, err error) {
	if t == nil || newLoader == nil {
		return res, fmt.Errorf("train: Fit needs a trainer and a loader function (trainer %v, newLoader %v)", t != nil, newLoader != nil)
	}
	if fc.Epochs < 0 || fc.MaxSteps < 0 || fc.CheckpointEvery < 0 {
		return res, fmt.Errorf("train: Fit: negative Epochs, MaxSteps or CheckpointEvery (%d, %d, %d)", fc.Epochs, fc.MaxSteps, fc.CheckpointEvery)
	}
	t.Thread().Do(func() { res, err = fit(ctx, t, newLoader, fc) })
	return res, err
}

func fit(ctx context.Context, t *Trainer, newLoader func(resume *data.State) (Loader, error), fc FitConfig) (res FitResult, err error) {
	if fc.KeepLast == 0 {
		fc.KeepLast = 3
	}
	events := fc.Events
	if events == nil {
		events = t.cfg.Events
	}
	logf := func(format string, args ...any) { emit(events, Message{Text: fmt.Sprintf(format, args...)}) }
	// Step reports each step (StepEvent) to Fit's events while Fit runs.
	t.stepEvents = events
	defer func() { t.stepEvents = nil }()
	par := t.cfg.Parallel
	writer := t.writer()
	dir := fc.CheckpointDir
	if !writer {
		dir = "" // rank 0 writes and prunes; the others only take part in saving
	}
	var resume *data.State
	var c Checkpoint
	epoch, resumed := 0, false
	if fc.Resume != "" {
		if c, err = t.LoadCheckpoint(fc.Resume); err != nil {
			return res, err
		}
		resume = &c.Loader
		epoch = c.Loader.Epoch
		resumed = c.RunID != ""
		world := 1
		if par != nil {
			world = par.World()
		}
		if c.Loader.World == 0 && c.EffectiveBatch != t.EffectiveBatch()*world {
			// A position in batches of the run's effective batch: in
			// samples, so that the epoch goes on where it stopped.
			resume.Samples, resume.World = c.Loader.Batch*c.EffectiveBatch, 1
		}
	}
	rcfg := RunConfig{Dir: dir, Kinds: []Kind{StepKind, EpochKind}, KeepLast: fc.KeepLast, Overwrite: fc.Overwrite, Logf: logf}
	if resumed {
		rcfg.Resume, rcfg.ResumeID, rcfg.ResumeFiles = fc.Resume, c.RunID, c.RunFiles
	} else if fc.Resume != "" {
		rcfg.Resume = fc.Resume // a file of torchfit before run ids: itself only
	}
	r, err := StartRun(rcfg)
	if err != nil {
		return res, err
	}
	if fc.Resume != "" {
		logf("resumed from %s at step %d (epoch %d, batch %d)%s", fc.Resume, c.Step, c.Loader.Epoch+1, c.Loader.Batch, resumedBatch(c, t))
	}
	res.RunID = r.ID
	loader, err := newLoader(resume)
	if err != nil {
		return res, err
	}
	if loader == nil {
		return res, errors.New("train: Fit: newLoader returned a nil Loader and no error")
	}
	defer loader.Close()
	// Every step from here to the last one may be saved (at an
	// interruption), and every epoch end.
	last := t.step + (fc.Epochs-epoch)*loader.Len() - loader.State().Batch // a resumed epoch is partly done
	if fc.MaxSteps > 0 {
		last = min(last, max(fc.MaxSteps, t.step))
	}
	first, firstEpoch := t.step, epoch
	could := func(k Kind, n int) bool {
		if k.Name == StepKind.Name {
			return n >= first && n <= last
		}
		return n > firstEpoch && n <= fc.Epochs
	}
	if err := agreeOn(par, func() error { return r.Check(could) }); err != nil {
		return res, err
	}
	if fc.Start != nil {
		if err := fc.Start(); err != nil {
			return res, err
		}
	}
	// save writes a checkpoint of the run at epoch (a step checkpoint when
	// step is set, which prunes the run's oldest step checkpoints).
	save := func(path string, epoch int, step bool) (err error) {
		if fc.CheckpointDir == "" {
			return nil
		}
		if ok, err := t.checkpointable(); !ok {
			return err // nil: the loss is not finite now; keep the last good checkpoint
		}
		if !writer {
			// Take part in gathering sharded optimizer state, and learn
			// whether rank 0 wrote the file.
			res.Checkpoint = path
			return agreeOn(par, func() error { return t.withGathered(func() error { return nil }) })
		}
		name := filepath.Base(path)
		err = agreeOn(par, func() error {
			return t.withGathered(func() error {
				// Checked before the first step too: this catches a run that
				// started in the same directory since.
				if _, err := r.Claim(name); err != nil {
					return err
				}
				if err := t.saveCheckpoint(path, loader.State(), epoch, fc.Meta, r.ID, r.Files(name)); err != nil {
					return fmt.Errorf("train: saving %s: %w", path, err)
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		pruned, err := r.Wrote(name)
		res.Checkpoint = path
		res.Checkpoints = append(slices.DeleteFunc(res.Checkpoints, func(p string) bool { return p == path || slices.Contains(pruned, p) }), path)
		ev := CheckpointEvent{Step: t.step, Path: path, Pruned: pruned}
		emit(events, ev)
		return err
	}
	for ; epoch < fc.Epochs; epoch++ {
		emit(events, EpochEvent{Epoch: epoch + 1, Epochs: fc.Epochs, Batches: loader.Len(), LastStep: last})
		t.SetEpoch(epoch)
		interrupted := func() (FitResult, error) {
			if fc.CheckpointDir == "" {
				return res, ErrInterrupted
			}
			if err := save(ckpt.StepPath(fc.CheckpointDir, t.step), epoch, true); err != nil {
				return res, err
			}
			logf("interrupted at step %d: saved %s", t.step, res.Checkpoint)
			return res, ErrInterrupted
		}
		for {
			if par == nil {
				if err := ctx.Err(); err != nil {
					return interrupted()
				}
			}
			if fc.MaxSteps > 0 && t.step >= fc.MaxSteps {
				break
			}
			b, err := loader.Next(ctx)
			if par != nil {
				// Every rank stops at the same step: an interruption any
				// rank saw (its signal, its cancelled context) stops all.
				stop, aerr := agree(par, ctx.Err() != nil || errors.Is(err, context.Canceled))
				if aerr != nil {
					b.Free()
					return res, aerr
				}
				if stop {
					b.Free()
					return interrupted()
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if errors.Is(err, context.Canceled) {
				continue
			}
			if err != nil {
				return res, err
			}
			_, err = t.Step(b) // reports the StepEvent
			b.Free()
			if err != nil {
				return res, err
			}
			if fc.CheckpointEvery > 0 && t.step%fc.CheckpointEvery == 0 {
				if err := save(ckpt.StepPath(fc.CheckpointDir, t.step), epoch, true); err != nil {
					return res, err
				}
			}
		}
		if fc.MaxSteps > 0 && t.step >= fc.MaxSteps {
			break
		}
		if fc.Eval != nil {
			vals, err := fc.Eval(epoch + 1)
			if err != nil {
				return res, err
			}
			emit(events, EvalEvent{Step: t.step, Epoch: epoch + 1, Values: vals})
		}
		if fc.CheckpointDir != "" {
			if err := save(ckpt.EpochPath(fc.CheckpointDir, epoch+1), epoch+1, false); err != nil {
				return res, err
			}
		}
	}
	if fc.CheckpointDir != "" {
		if err := save(ckpt.StepPath(fc.CheckpointDir, t.step), epoch, true); err != nil {
			return res, err
		}
	}
	return res, nil
}

// ErrOtherRank is returned by a rank of a data-parallel run when another
// rank failed at a point where all agree (rank 0 could not write a
// checkpoint, or refused the checkpoint directory): that rank reports the
// cause.
var ErrOtherRank = errors.New("train: another rank failed")

// agreeOn runs fn and, data parallel, tells every rank whether it failed
// on any rank (one all-reduce), so that all stop together.
func agreeOn(par Parallel, fn func() error) error {
	err := fn()
	if par == nil {
		return err
	}
	failed, aerr := agree(par, err != nil)
	switch {
	case err != nil:
		return err
	case aerr != nil:
		return aerr
	case failed:
		return ErrOtherRank
	}
	return nil
}

// resumedBatch says how a resumed run's batches compare with those of the
// run that wrote its checkpoint c: the micro-batch is the resuming
// command's memory choice, and a change of the effective batch changes
// the training (the schedule still counts optimizer steps).
func resumedBatch(c Checkpoint, t *Trainer) string {
	now := fmt.Sprintf("effective batch %d = micro-batch %d × %d", t.EffectiveBatch(), t.MicroBatch(), t.Accum())
	switch {
	case c.EffectiveBatch != t.EffectiveBatch():
		return fmt.Sprintf("; the effective batch changes from the checkpoint's %d (micro-batch %d × %d) to %d (micro-batch %d × %d): the epoch goes on at the same example",
			c.EffectiveBatch, c.MicroBatch, c.Accum, t.EffectiveBatch(), t.MicroBatch(), t.Accum())
	case c.MicroBatch != t.MicroBatch():
		return fmt.Sprintf("; %s (the checkpoint's run stepped in micro-batches of %d)", now, c.MicroBatch)
	}
	return "; " + now
}
