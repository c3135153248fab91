package accumulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
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
	// Metrics appends one JSON line per step (and per evaluation) here.
	Metrics string
	// Progress draws a progress bar on stderr when it is a terminal.
	Progress bool
	// Eval runs after each epoch; its values are logged and recorded.
	Eval func(epoch int) (map[string]float64, error)
	// Meta is stored in every checkpoint.
	Meta *ptfile.Dict
	// Signals: SIGINT/SIGTERM finish the current optimizer step, save a
	// checkpoint and make Fit return ErrInterrupted.
	Signals bool
}

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
// (called with the position to resume from, or nil), with checkpoints,
// metrics, evaluation and signals. Temporary files that a killed
// checkpoint write left in fc.CheckpointDir are removed first. A diverged
// run (a *NonFiniteError, see Config.MaxNonFinite) stops before any
// checkpoint of its diverged state is written.
// Fit runs on the trainer's thread (Config.Thread), loading included when
// the loader has no workers, as Python runs its loop on one thread.
func Fit(ctx context.Context, t *Trainer, newLoader func(resume *data.State) (Loader, error), fc FitConfig) (res FitResult, err error) {
	t.Thread().Do(func() { res, err = fit(ctx, t, newLoader, fc) })
	return res, err
}

func fit(ctx context.Context, t *Trainer, newLoader func(resume *data.State) (Loader, error), fc FitConfig) (res FitResult, err error) {
	if fc.KeepLast == 0 {
		fc.KeepLast = 3
	}
	logf := t.cfg.Logf
	r := &run{dir: fc.CheckpointDir, keep: fc.KeepLast, owned: map[string]bool{}}
	if r.dir != "" {
		removed, err := removeOrphanTemps(r.dir)
		if len(removed) > 0 {
			logf("removed %d temporary file(s) of interrupted checkpoint writes in %s: %s", len(removed), r.dir, nameList(removed))
		}
		if err != nil {
			return res, fmt.Errorf("accumulate: cleaning %s: %w", r.dir, err)
		}
	}
	var resume *data.State
	epoch, resumed := 0, false
	if fc.Resume != "" {
		c, err := t.LoadCheckpoint(fc.Resume)
		if err != nil {
			return res, err
		}
		resume = &c.Loader
		epoch = c.Loader.Epoch
		r.id, resumed = c.RunID, c.RunID != ""
		if r.dir != "" {
			if err := r.adopt(fc.Resume, c); err != nil {
				return res, fmt.Errorf("accumulate: %w", err)
			}
		}
		logf("resumed from %s at step %d (epoch %d, batch %d, micro-batch %d)", fc.Resume, c.Step, c.Loader.Epoch, c.Loader.Batch, c.MicroBatch)
	}
	if r.id == "" {
		r.id = newRunID()
	}
	res.RunID = r.id
	loader, err := newLoader(resume)
	if err != nil {
		return res, err
	}
	defer loader.Close()
	if r.dir != "" {
		// Every step from here to the last one may be saved (at an
		// interruption), and every epoch end.
		last := t.step + (fc.Epochs-epoch)*loader.Len()
		if fc.MaxSteps > 0 {
			last = min(last, max(fc.MaxSteps, t.step))
		}
		clash, others, err := r.conflicts(t.step, last, epoch, fc.Epochs)
		if err != nil {
			return res, fmt.Errorf("accumulate: %w", err)
		}
		if resumed {
			// Files of the resumed run written after the file it resumes
			// from (resuming from an earlier checkpoint): the run's own.
			clash = r.claim(clash)
		}
		if len(clash) > 0 && !fc.Overwrite {
			return res, &ConflictError{Dir: r.dir, Files: clash}
		}
		if len(clash) > 0 {
			logf("%s of another run in %s may be overwritten, as asked (Overwrite)", nameList(clash), r.dir)
		}
		if others > 0 {
			logf("%s also holds %d checkpoint(s) that are not this run's (%s): it leaves them alone", r.dir, others, r.id)
		}
	}
	if fc.Start != nil {
		if err := fc.Start(); err != nil {
			return res, err
		}
	}
	if fc.Signals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	var metrics io.WriteCloser
	if fc.Metrics != "" {
		f, err := os.OpenFile(fc.Metrics, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return res, fmt.Errorf("accumulate: metrics: %w", err)
		}
		metrics = f
		defer f.Close()
	}
	record := func(v any) {
		if metrics != nil {
			b, _ := json.Marshal(v)
			metrics.Write(append(b, '\n'))
		}
	}
	// save writes a checkpoint of the run at epoch (a step checkpoint when
	// step is set, which prunes the run's oldest step checkpoints).
	save := func(path string, epoch int, step bool) error {
		if r.dir == "" {
			return nil
		}
		if ok, err := t.checkpointable(); !ok {
			return err // nil: the loss is not finite now; keep the last good checkpoint
		}
		name := filepath.Base(path)
		if !r.owned[name] && !fc.Overwrite {
			// Checked before the first step too: this catches a run that
			// started in the same directory since.
			if _, err := os.Lstat(path); err == nil {
				return &ConflictError{Dir: r.dir, Files: []string{name}}
			}
		}
		n := -1
		if step {
			n = t.step
		}
		if err := t.saveCheckpoint(path, loader.State(), epoch, fc.Meta, r.id, r.stepFiles(n)); err != nil {
			return fmt.Errorf("accumulate: saving %s: %w", path, err)
		}
		r.own(name)
		res.Checkpoint = path
		res.Checkpoints = append(slices.DeleteFunc(res.Checkpoints, func(p string) bool { return p == path }), path)
		if !step {
			return nil
		}
		err := r.prune()
		res.Checkpoints = slices.DeleteFunc(res.Checkpoints, func(p string) bool { return !r.owned[filepath.Base(p)] })
		return err
	}
	for ; epoch < fc.Epochs; epoch++ {
		bar := newBar(fc.Progress, loader.Len(), fmt.Sprintf("epoch %d/%d", epoch+1, fc.Epochs))
		for {
			if err := ctx.Err(); err != nil {
				bar.Finish()
				if fc.CheckpointDir == "" {
					return res, ErrInterrupted
				}
				if err := save(StepCheckpointPath(fc.CheckpointDir, t.step), epoch, true); err != nil {
					return res, err
				}
				logf("interrupted at step %d: saved %s", t.step, res.Checkpoint)
				return res, ErrInterrupted
			}
			if fc.MaxSteps > 0 && t.step >= fc.MaxSteps {
				break
			}
			b, err := loader.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if errors.Is(err, context.Canceled) {
				continue
			}
			if err != nil {
				return res, err
			}
			info, err := t.Step(b)
			b.Free()
			if err != nil {
				return res, err
			}
			rate := float64(info.Samples) / info.Duration.Seconds()
			record(map[string]any{
				"step": info.Step, "epoch": epoch, "loss": finite(info.Loss), "lr": info.LR, "grad_norm": finite(info.GradNorm),
				"skipped": info.Skipped, "micro_batch": info.MicroBatch, "samples": info.Samples, "samples_per_sec": rate,
				"allocated": info.Memory.Allocated, "peak": info.Memory.PeakAllocated, "reserved": info.Memory.Reserved,
				"oom_retries": info.OOMRetries, "time": time.Now().Unix(),
			})
			bar.Describe(fmt.Sprintf("epoch %d/%d step %d loss %.4f lr %.2e %.0f samples/s mem %s", epoch+1, fc.Epochs,
				info.Step, info.Loss, info.LR, rate, torch.FormatBytes(info.Memory.Allocated)))
			bar.Add(1)
			if fc.CheckpointEvery > 0 && t.step%fc.CheckpointEvery == 0 {
				if err := save(StepCheckpointPath(fc.CheckpointDir, t.step), epoch, true); err != nil {
					return res, err
				}
			}
		}
		bar.Finish()
		if fc.MaxSteps > 0 && t.step >= fc.MaxSteps {
			break
		}
		if fc.Eval != nil {
			vals, err := fc.Eval(epoch + 1)
			if err != nil {
				return res, err
			}
			record(map[string]any{"step": t.step, "epoch": epoch + 1, "eval": vals})
			logf("epoch %d: %s", epoch+1, formatVals(vals))
		}
		if fc.CheckpointDir != "" {
			if err := save(EpochCheckpointPath(fc.CheckpointDir, epoch+1), epoch+1, false); err != nil {
				return res, err
			}
		}
	}
	if fc.CheckpointDir != "" {
		if err := save(StepCheckpointPath(fc.CheckpointDir, t.step), epoch, true); err != nil {
			return res, err
		}
	}
	return res, nil
}

func finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}

func formatVals(vals map[string]float64) string {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %.4f", k, vals[k])
	}
	return s
}

// bar is a progress bar, or nothing when output is not a terminal.
type bar interface {
	Add(int) error
	Describe(string)
	Finish() error
}

type noBar struct{}

func (noBar) Add(int) error   { return nil }
func (noBar) Describe(string) {}
func (noBar) Finish() error   { return nil }

func newBar(on bool, n int, desc string) bar {
	if !on || !term.IsTerminal(int(os.Stderr.Fd())) {
		return noBar{}
	}
	return progressbar.NewOptions(n, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(), progressbar.OptionSetWidth(20), progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond))
}
