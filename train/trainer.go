package train

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// Precision selects mixed precision (amp.Precision).
type Precision = amp.Precision

// Precisions.
const (
	FP32 = amp.FP32
	BF16 = amp.BF16 // autocast to bfloat16 (CPU or CUDA); no scaler needed
	FP16 = amp.FP16 // autocast to float16 with a GradScaler (CUDA)
)

// Config configures a Trainer.
type Config struct {
	MicroBatch int // samples per micro-batch
	Accum      int // micro-batches per optimizer step (0: 1, no accumulation)
	Device     torch.Device
	Precision  Precision
	// Count says how many items a micro-batch's loss averages over
	// (tokens, frames); nil: samples. See EngineConfig.Count.
	Count CountFunc
	// ClipNorm clips the gradients' total L2 norm (after unscaling); 0: off
	// (New refuses a negative or NaN norm).
	ClipNorm float64
	// Hooks run between backward and the optimizer step (see Hook).
	Hooks []Hook
	// Contrastive, when set, is a loss that couples the samples of a
	// window (CLIP's contrastive loss): every step is a grad-cache pass
	// (Engine.GradCache) over its embedding and batch-loss functions, the
	// exact gradient of the whole window's loss whatever the micro-batch,
	// and the Trainer's Loss is used only by FindBatchSize.
	Contrastive *Contrastive
	// EmptyCacheEvery empties the CUDA cache every N optimizer steps (0:
	// never). It lowers reserved memory, not what tensors hold.
	EmptyCacheEvery int
	// MemoryEvery reports the allocator every N optimizer steps (a
	// MemoryEvent; 0: never).
	MemoryEvery int
	// NoOOMAdapt returns out-of-memory errors instead of adapting.
	NoOOMAdapt bool
	// MaxNonFinite stops training (Step returns a *NonFiniteError) once the
	// loss has been NaN or ±Inf for this many consecutive optimizer steps
	// (0: DefaultMaxNonFinite; negative: never). Only the loss counts:
	// steps a GradScaler skips for inf/nan gradients under fp16 are normal
	// and do not, unless the loss itself is not finite.
	MaxNonFinite int
	// Events receives the trainer's events (nil: none). The trainer never
	// writes to the terminal: package report renders events.
	Events Sink
	// Parallel makes training data parallel over processes (see Parallel;
	// dist.DataParallel implements it). nil: one process.
	Parallel Parallel
	// Thread is the OS thread the trainer computes on (nil: torch.Main()).
	// Step, Evaluate, FindBatchSize and checkpoints run there whichever
	// goroutine calls them, as Python runs its loop on one thread: libtorch
	// 1.13's oneDNN is not safe when one loop's work moves between threads
	// (see torch.Thread).
	Thread *torch.Thread
}

// Contrastive is a loss over a window's embeddings (Config.Contrastive).
type Contrastive struct {
	Embed EmbedFunc
	Loss  BatchLoss
}

// DefaultMaxNonFinite is Config.MaxNonFinite's default.
const DefaultMaxNonFinite = 5

// ErrNonFinite means training diverged: the loss was NaN or ±Inf for
// Config.MaxNonFinite consecutive optimizer steps, or a parameter was no
// longer finite when a checkpoint was due. Errors that wrap it are
// *NonFiniteError.
var ErrNonFinite = errors.New("train: training diverged")

// NonFiniteError reports where training diverged. Fit returns it before
// writing any checkpoint of the diverged state: the newest checkpoint on
// disk is the last one taken after a finite loss with finite parameters.
type NonFiniteError struct {
	Step  int     // optimizer steps done when training stopped
	Count int     // consecutive steps whose loss was not finite
	Loss  float64 // the last step's loss
	Param string  // the first non-finite parameter, when that stopped it
}

func (e *NonFiniteError) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("train: training diverged at step %d: parameter %s is NaN or infinite (not checkpointed)", e.Step, e.Param)
	}
	return fmt.Sprintf("train: training diverged at step %d: the loss was %v for %d consecutive optimizer steps (not checkpointed)",
		e.Step, e.Loss, e.Count)
}

// Unwrap returns ErrNonFinite.
func (e *NonFiniteError) Unwrap() error { return ErrNonFinite }

// EffectiveBatch is MicroBatch × Accum: the samples per optimizer step.
func (c Config) EffectiveBatch() int { return c.MicroBatch * c.Accum }

// StepInfo describes one optimizer step.
type StepInfo struct {
	Step       int     // optimizer steps done, this one included
	Loss       float64 // mean loss over the window's counted items
	Count      float64 // counted items in the window (samples without Config.Count)
	LR         float64 // learning rate of the first group during the step
	GradNorm   float64 // total gradient norm before clipping (NaN when not computed)
	Skipped    bool    // the step was skipped (inf/nan gradients)
	Samples    int     // samples in the window
	MicroBatch int     // micro-batch size used
	Micro      int     // micro-batches in the window
	OOMRetries int     // windows redone for out-of-memory in this step
	Duration   time.Duration
	Memory     torch.MemStats // allocator stats right after the step
}

// Trainer is the single-model training loop, composed of the core's parts:
// an Engine for the micro-batches of each effective batch, an Optim for the
// optimizer step, a GradScaler (enabled for float16). Create it with New.
type Trainer struct {
	Model nn.Module
	Opt   nn.Optimizer
	Sched *nn.Schedule // optional
	// Loss computes the mean loss of a micro-batch (already on the device).
	// It runs inside a tensor scope: everything it creates is released when
	// the micro-batch ends. It may panic with *torch.Error (as tensor math
	// does); the loop turns that into an error.
	Loss   func(mb *data.Batch) *torch.Tensor
	Scaler *amp.GradScaler
	// OnStep, when set, is called after every optimizer step.
	OnStep func(StepInfo)

	cfg    Config
	engine *Engine
	step   int
	// nonFinite counts the latest consecutive steps with a non-finite loss.
	nonFinite int
	lastLoss  float64
	// epoch is the epoch StepEvents carry (SetEpoch; Fit sets it), and
	// stepEvents, while Fit runs, the sink they go to (Fit's events).
	epoch      int
	stepEvents Sink
}

// New returns a trainer for model with optimizer opt and loss function.
func New(model nn.Module, opt nn.Optimizer, loss func(*data.Batch) *torch.Tensor, cfg Config) (*Trainer, error) {
	if cfg.Accum == 0 {
		cfg.Accum = 1
	}
	if cfg.MicroBatch < 1 || cfg.Accum < 1 {
		return nil, fmt.Errorf("train: micro-batch (%d) and accumulation steps (%d) must be >= 1", cfg.MicroBatch, cfg.Accum)
	}
	if model == nil || opt == nil || (loss == nil && cfg.Contrastive == nil) {
		return nil, fmt.Errorf("train: New needs a model, an optimizer and a loss function (model %v, optimizer %v, loss %v)",
			model != nil, opt != nil, loss != nil)
	}
	if math.IsNaN(cfg.ClipNorm) || cfg.ClipNorm < 0 {
		return nil, fmt.Errorf("train: ClipNorm %v (want a norm > 0, or 0 for no clipping)", cfg.ClipNorm)
	}
	if cfg.MaxNonFinite == 0 {
		cfg.MaxNonFinite = DefaultMaxNonFinite
	}
	if cfg.Precision == "" {
		cfg.Precision = FP32
	}
	e, err := NewEngine(EngineConfig{MicroBatch: cfg.MicroBatch, Device: cfg.Device, Precision: cfg.Precision,
		Count: cfg.Count, NoOOMAdapt: cfg.NoOOMAdapt, Events: cfg.Events, Parallel: cfg.Parallel})
	if err != nil {
		return nil, err
	}
	t := &Trainer{Model: model, Opt: opt, Loss: loss, cfg: cfg, engine: e}
	t.Scaler = amp.NewGradScaler(cfg.Device, amp.ScalerOptions{Disabled: !cfg.Precision.Scaled()})
	t.logf("effective batch %d = micro-batch %d × %d accumulation steps; precision %s; device %v%s",
		cfg.EffectiveBatch(), cfg.MicroBatch, cfg.Accum, cfg.Precision, cfg.Device, parallelString(cfg.Parallel, cfg.EffectiveBatch()))
	return t, nil
}

func (t *Trainer) logf(format string, args ...any) {
	emit(t.cfg.Events, Message{Text: fmt.Sprintf(format, args...)})
}

// Config returns the trainer's configuration.
func (t *Trainer) Config() Config { return t.cfg }

// Engine returns the trainer's micro-batch engine.
func (t *Trainer) Engine() *Engine { return t.engine }

// MicroBatch returns the micro-batch in use (smaller than configured after
// out-of-memory adaptation).
func (t *Trainer) MicroBatch() int { return t.engine.MicroBatch() }

// EffectiveBatch is the samples per optimizer step (Config.EffectiveBatch):
// what the loader's batches hold. It never changes.
func (t *Trainer) EffectiveBatch() int { return t.cfg.EffectiveBatch() }

// Accum returns the micro-batches per optimizer step now: Config.Accum,
// or more once an out-of-memory error halved the micro-batch (the
// effective batch divided by the micro-batch, rounded up).
func (t *Trainer) Accum() int {
	e, m := t.cfg.EffectiveBatch(), t.MicroBatch()
	return (e + m - 1) / m
}

// SetMicroBatch sets the micro-batch (resuming a run that had adapted).
func (t *Trainer) SetMicroBatch(n int) { t.engine.SetMicroBatch(n) }

// OOMEvents counts windows redone with a smaller micro-batch.
func (t *Trainer) OOMEvents() int { return t.engine.OOMEvents }

// Steps returns the optimizer steps done.
func (t *Trainer) Steps() int { return t.step }

// SetSteps sets the step counter (resume).
func (t *Trainer) SetSteps(n int) { t.step = n }

// Step trains on one effective batch (the loader's batch: its size is the
// window, normally MicroBatch × Accum; a short last batch is fine). The
// batch stays the caller's. It computes on the trainer's thread
// (Config.Thread). A step that returns no error is reported to
// Config.Events as a StepEvent (with the epoch of SetEpoch), after OnStep:
// a program that calls Step itself records its steps with the same sinks
// as Fit (package report: a metrics file, TensorBoard). Once the loss has
// not been finite for Config.MaxNonFinite consecutive steps, Step returns
// the step's info with a *NonFiniteError.
func (t *Trainer) Step(b *data.Batch) (info StepInfo, err error) {
	t.Thread().Do(func() { info, err = t.trainStep(b) })
	return info, err
}

// Thread returns the OS thread the trainer computes on.
func (t *Trainer) Thread() *torch.Thread {
	if t.cfg.Thread != nil {
		return t.cfg.Thread
	}
	return torch.Main()
}

// optim is the trainer's optimizer step.
func (t *Trainer) optim() *Optim {
	return &Optim{Opt: t.Opt, Sched: t.Sched, ClipNorm: t.cfg.ClipNorm, Scaler: t.Scaler, Precision: t.cfg.Precision, Hooks: t.cfg.Hooks}
}

func (t *Trainer) trainStep(b *data.Batch) (StepInfo, error) {
	start := time.Now()
	o := t.optim()
	info := StepInfo{LR: o.LR(), GradNorm: math.NaN()}
	nn.SetTraining(t.Model, true)
	var w Window
	var err error
	if c := t.cfg.Contrastive; c != nil {
		w, err = t.engine.GradCache(b, CachePass{Embed: c.Embed, Loss: c.Loss, Scaler: t.Scaler, Reset: o.Abandon, Step: t.step + 1})
	} else {
		w, err = t.engine.Backward(b, Pass{Loss: t.Loss, Scaler: t.Scaler, Reset: o.Abandon, Step: t.step + 1})
	}
	if err != nil {
		return StepInfo{}, err
	}
	info.Loss, info.Count, info.Samples, info.Micro, info.MicroBatch, info.OOMRetries =
		w.Loss, w.Count, w.Samples, w.Micro, w.MicroBatch, w.OOMRetries
	if math.IsNaN(info.Loss) || math.IsInf(info.Loss, 0) {
		t.nonFinite++
	} else {
		t.nonFinite = 0
	}
	t.lastLoss = info.Loss
	if t.nonFinite > 0 && !t.Scaler.Enabled() {
		emit(t.cfg.Events, SkipEvent{Step: t.step + 1, Reason: fmt.Sprintf("loss is %v", info.Loss)})
		t.Opt.ZeroGrad()
		info.Skipped = true
	} else {
		err := torch.TidyErr(func() error {
			r, err := o.Step()
			if err != nil {
				return err
			}
			info.GradNorm, info.Skipped = r.GradNorm, r.Skipped
			if r.Skipped && !t.Scaler.Enabled() {
				emit(t.cfg.Events, SkipEvent{Step: t.step + 1, Reason: r.Reason})
			}
			t.Scaler.Update()
			o.Finish()
			return nil
		})
		if err != nil {
			// Out of memory in the optimizer step: a smaller micro-batch
			// would not help, so it is returned.
			o.Abandon()
			return StepInfo{}, fmt.Errorf("train: optimizer step: %w", err)
		}
	}
	t.step++
	info.Step = t.step
	info.Duration = time.Since(start)
	t.after(&info)
	if n := t.cfg.MaxNonFinite; n > 0 && t.nonFinite >= n {
		return info, &NonFiniteError{Step: t.step, Count: t.nonFinite, Loss: info.Loss}
	}
	events := t.cfg.Events
	if t.stepEvents != nil {
		events = t.stepEvents
	}
	emit(events, StepEvent{StepInfo: info, Epoch: t.epoch})
	return info, nil
}

// SetEpoch sets the epoch that the StepEvents of the next steps carry
// (counted from 0, as Fit counts them; Fit sets it each epoch).
func (t *Trainer) SetEpoch(epoch int) { t.epoch = epoch }

// checkpointable says whether a checkpoint of the trainer's state may be
// written now. A parameter that is NaN or ±Inf is a *NonFiniteError: the
// run cannot recover, and no checkpoint with such weights is written.
// While the latest steps' loss is not finite the answer is false with no
// error: the checkpoint is skipped, so that it neither replaces nor prunes
// good ones.
func (t *Trainer) checkpointable() (bool, error) {
	bad := ""
	err := torch.Try(func() {
		for _, p := range nn.Parameters(t.Model) {
			torch.Tidy(func() {
				if bad == "" && p.T.IsFinite().All().Item() == 0 {
					bad = p.Name
				}
			})
			if bad != "" {
				return
			}
		}
	})
	switch {
	case err != nil:
		return false, err
	case bad != "":
		return false, &NonFiniteError{Step: t.step, Count: t.nonFinite, Loss: t.lastLoss, Param: bad}
	case t.nonFinite > 0:
		t.logf("step %d: the loss has not been finite for %d steps: no checkpoint written", t.step, t.nonFinite)
		return false, nil
	}
	return true, nil
}

func (t *Trainer) after(info *StepInfo) {
	if n := t.cfg.EmptyCacheEvery; n > 0 && t.step%n == 0 {
		torch.EmptyCache()
	}
	if s, err := torch.MemoryStats(t.cfg.Device); err == nil {
		info.Memory = s
	}
	if n := t.cfg.MemoryEvery; n > 0 && t.step%n == 0 {
		emit(t.cfg.Events, MemoryEvent{Step: t.step, Stats: info.Memory})
	}
	if t.OnStep != nil {
		t.OnStep(*info)
	}
}

// Evaluate runs fn on each batch under NoGrad with the model in eval mode
// (restored to training afterwards) and returns the sample-weighted mean of
// what fn returns. Batches are moved to the device; fn's tensors are
// released after each batch.
func (t *Trainer) Evaluate(batches func(yield func(*data.Batch) bool), fn func(*data.Batch) float64) (mean float64, err error) {
	t.Thread().Do(func() { mean, err = t.evaluate(batches, fn) })
	return mean, err
}

func (t *Trainer) evaluate(batches func(yield func(*data.Batch) bool), fn func(*data.Batch) float64) (mean float64, err error) {
	nn.SetTraining(t.Model, false)
	defer nn.SetTraining(t.Model, true)
	var total float64
	var n int
	batches(func(b *data.Batch) bool {
		err = torch.TidyErr(func() error {
			torch.NoGrad(func() {
				mb := b.Slice(0, b.Size(), t.cfg.Device)
				var v float64
				t.engine.Autocast(func() { v = fn(mb) })
				total += v * float64(b.Size())
				n += b.Size()
			})
			return nil
		})
		return err == nil
	})
	if err != nil || n == 0 {
		return 0, err
	}
	return total / float64(n), nil
}
