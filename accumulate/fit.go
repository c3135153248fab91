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
	"sort"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// FitConfig configures Fit.
type FitConfig struct {
	Epochs   int
	MaxSteps int // stop after this many optimizer steps in all (0: no limit)
	// CheckpointDir receives checkpoint_step_N.pt every CheckpointEvery
	// steps (0: only at epoch ends and the end) and checkpoint_epoch_E.pt
	// at each epoch end; the newest KeepLast step checkpoints stay (default 3).
	CheckpointDir   string
	CheckpointEvery int
	KeepLast        int
	// Resume continues from this checkpoint (LoadCheckpoint).
	Resume string
	// Metrics appends one JSON line per step (and per evaluation) here.
	Metrics string
	// Progress draws a progress bar on stderr when it is a terminal.
	Progress bool
	// Eval runs after each epoch; its values are logged and recorded.
	Eval func(epoch int) (map[string]float64, error)
	// Meta is stored in every checkpoint.
	Meta *torch.Dict
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

// Fit trains for fc.Epochs epochs over the loader that newLoader returns
// (called with the position to resume from, or nil), with checkpoints,
// metrics, evaluation and signals. It returns the last checkpoint written.
// A diverged run (a *NonFiniteError, see Config.MaxNonFinite) stops before
// any checkpoint of its diverged state is written.
func Fit(ctx context.Context, t *Trainer, newLoader func(resume *data.State) (Loader, error), fc FitConfig) (string, error) {
	if fc.KeepLast == 0 {
		fc.KeepLast = 3
	}
	logf := t.cfg.Logf
	var resume *data.State
	epoch := 0
	if fc.Resume != "" {
		c, err := t.LoadCheckpoint(fc.Resume)
		if err != nil {
			return "", err
		}
		resume = &c.Loader
		epoch = c.Loader.Epoch
		logf("resumed from %s at step %d (epoch %d, batch %d, micro-batch %d)", fc.Resume, c.Step, c.Loader.Epoch, c.Loader.Batch, c.MicroBatch)
	}
	loader, err := newLoader(resume)
	if err != nil {
		return "", err
	}
	defer loader.Close()
	if fc.Signals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	var metrics io.WriteCloser
	if fc.Metrics != "" {
		f, err := os.OpenFile(fc.Metrics, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return "", fmt.Errorf("accumulate: metrics: %w", err)
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
	last := ""
	save := func(path string) error {
		if fc.CheckpointDir == "" {
			return nil
		}
		if ok, err := t.checkpointable(); !ok {
			return err
		}
		if err := t.SaveCheckpoint(path, loader.State(), epoch, fc.Meta); err != nil {
			return fmt.Errorf("accumulate: saving %s: %w", path, err)
		}
		last = path
		return pruneCheckpoints(fc.CheckpointDir, fc.KeepLast)
	}
	for ; epoch < fc.Epochs; epoch++ {
		bar := newBar(fc.Progress, loader.Len(), fmt.Sprintf("epoch %d/%d", epoch+1, fc.Epochs))
		for {
			if err := ctx.Err(); err != nil {
				bar.Finish()
				if fc.CheckpointDir == "" {
					return last, ErrInterrupted
				}
				if err := save(StepCheckpointPath(fc.CheckpointDir, t.step)); err != nil {
					return last, err
				}
				logf("interrupted at step %d: saved %s", t.step, last)
				return last, ErrInterrupted
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
				return last, err
			}
			info, err := t.Step(b)
			b.Free()
			if err != nil {
				return last, err
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
				if err := save(StepCheckpointPath(fc.CheckpointDir, t.step)); err != nil {
					return last, err
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
				return last, err
			}
			record(map[string]any{"step": t.step, "epoch": epoch + 1, "eval": vals})
			logf("epoch %d: %s", epoch+1, formatVals(vals))
		}
		if fc.CheckpointDir != "" {
			path := EpochCheckpointPath(fc.CheckpointDir, epoch+1)
			if ok, err := t.checkpointable(); err != nil {
				return last, err
			} else if ok {
				if err := t.SaveCheckpoint(path, loader.State(), epoch+1, fc.Meta); err != nil {
					return last, err
				}
				last = path
			}
		}
	}
	if fc.CheckpointDir != "" {
		if err := save(StepCheckpointPath(fc.CheckpointDir, t.step)); err != nil {
			return last, err
		}
	}
	return last, nil
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
