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

// ParsePrecision resolves a --mixed-precision value on this host (see
// amp.ParsePrecision; "auto" is fp16 on CUDA, bf16 on CPUs that compute it
// natively, else fp32) and says why.
func ParsePrecision(s string, device torch.Device) (amp.Choice, error) {
	return amp.ParsePrecision(s, device, amp.HostCPU())
}

// Config configures a Trainer.
type Config struct {
	MicroBatch int // samples per micro-batch
	Accum      int // micro-batches per optimizer step
	Device     torch.Device
	Precision  Precision
	// ClipNorm clips the gradients' total L2 norm (after unscaling); 0: off.
	ClipNorm float64
	// EmptyCacheEvery empties the CUDA cache every N optimizer steps (0:
	// never). It lowers reserved memory, not what tensors hold.
	EmptyCacheEvery int
	// MemoryEvery logs a memory line every N optimizer steps (0: never).
	MemoryEvery int
	// NoOOMAdapt returns out-of-memory errors instead of adapting.
	NoOOMAdapt bool
	// MaxNonFinite stops training (Step returns a *NonFiniteError) once the
	// loss has been NaN or ±Inf for this many consecutive optimizer steps
	// (0: DefaultMaxNonFinite; negative: never). Only the loss counts:
	// steps a GradScaler skips for inf/nan gradients under fp16 are normal
	// and do not, unless the loss itself is not finite.
	MaxNonFinite int
	// Logf receives the loop's log lines (nil: discarded).
	Logf func(format string, args ...any)
	// Thread is the OS thread the trainer computes on (nil: torch.Main()).
	// Step, Evaluate, FindBatchSize and checkpoints run there whichever
	// goroutine calls them, as Python runs its loop on one thread: libtorch
	// 1.13's oneDNN is not safe when one loop's work moves between threads
	// (see torch.Thread).
	Thread *torch.Thread
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
	Loss       float64 // mean loss over the window's samples
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

// Trainer runs training steps. Create it with New.
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

	cfg   Config
	micro int // current micro-batch (halved on OOM)
	step  int
	// nonFinite counts the latest consecutive steps with a non-finite loss.
	nonFinite int
	lastLoss  float64
	// OOMEvents counts windows redone with a smaller micro-batch.
	OOMEvents int
}

// New returns a trainer for model with optimizer opt and loss function.
func New(model nn.Module, opt nn.Optimizer, loss func(*data.Batch) *torch.Tensor, cfg Config) (*Trainer, error) {
	if cfg.MicroBatch < 1 || cfg.Accum < 1 {
		return nil, fmt.Errorf("train: micro-batch (%d) and accumulation steps (%d) must be >= 1", cfg.MicroBatch, cfg.Accum)
	}
	if cfg.MaxNonFinite == 0 {
		cfg.MaxNonFinite = DefaultMaxNonFinite
	}
	if cfg.Precision == "" {
		cfg.Precision = FP32
	}
	if cfg.Precision == FP16 && !cfg.Device.IsCUDA() {
		return nil, fmt.Errorf("train: float16 training needs CUDA; use bf16 on the CPU")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	t := &Trainer{Model: model, Opt: opt, Loss: loss, cfg: cfg, micro: cfg.MicroBatch}
	t.Scaler = amp.NewGradScaler(cfg.Device, amp.ScalerOptions{Disabled: cfg.Precision != FP16})
	cfg.Logf("effective batch %d = micro-batch %d × %d accumulation steps; precision %s; device %v",
		cfg.EffectiveBatch(), cfg.MicroBatch, cfg.Accum, cfg.Precision, cfg.Device)
	return t, nil
}

// Config returns the trainer's configuration.
func (t *Trainer) Config() Config { return t.cfg }

// MicroBatch returns the micro-batch in use (smaller than configured after
// out-of-memory adaptation).
func (t *Trainer) MicroBatch() int { return t.micro }

// SetMicroBatch sets the micro-batch (resuming a run that had adapted).
func (t *Trainer) SetMicroBatch(n int) {
	if n >= 1 {
		t.micro = n
	}
}

// Steps returns the optimizer steps done.
func (t *Trainer) Steps() int { return t.step }

// SetSteps sets the step counter (resume).
func (t *Trainer) SetSteps(n int) { t.step = n }

// errOptimizerOOM marks an OOM in the optimizer phase: not adaptable.
type optimizerError struct{ err error }

func (e *optimizerError) Error() string { return "optimizer step: " + e.err.Error() }
func (e *optimizerError) Unwrap() error { return e.err }

// Step trains on one effective batch (the loader's batch: its size is the
// window, normally MicroBatch × Accum; a short last batch is fine). The
// batch stays the caller's. It computes on the trainer's thread
// (Config.Thread). Once the loss has not been finite for
// Config.MaxNonFinite consecutive steps, Step returns the step's info with
// a *NonFiniteError.
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

func (t *Trainer) trainStep(b *data.Batch) (StepInfo, error) {
	start := time.Now()
	size := b.Size()
	if size == 0 {
		return StepInfo{}, fmt.Errorf("train: empty batch")
	}
	retries := 0
	for {
		info, err := t.window(b, size)
		if err == nil {
			info.OOMRetries = retries
			info.Duration = time.Since(start)
			t.lastLoss = info.Loss
			if math.IsNaN(info.Loss) || math.IsInf(info.Loss, 0) {
				t.nonFinite++
			} else {
				t.nonFinite = 0
			}
			t.after(&info)
			if n := t.cfg.MaxNonFinite; n > 0 && t.nonFinite >= n {
				return info, &NonFiniteError{Step: t.step, Count: t.nonFinite, Loss: info.Loss}
			}
			return info, nil
		}
		t.abandon()
		var oe *optimizerError
		if !errors.Is(err, torch.ErrOutOfMemory) || t.cfg.NoOOMAdapt || errors.As(err, &oe) {
			return StepInfo{}, err
		}
		if t.micro == 1 {
			return StepInfo{}, fmt.Errorf("train: out of memory even with micro-batch 1 (step %d): %w", t.step+1, err)
		}
		old := t.micro
		t.micro = (t.micro + 1) / 2
		retries++
		t.OOMEvents++
		accum := (size + t.micro - 1) / t.micro
		t.cfg.Logf("out of memory at micro-batch %d (step %d): redoing the window with micro-batch %d × %d accumulation steps; effective batch %d unchanged",
			old, t.step+1, t.micro, accum, size)
	}
}

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
		t.cfg.Logf("step %d: the loss has not been finite for %d steps: no checkpoint written", t.step, t.nonFinite)
		return false, nil
	}
	return true, nil
}

// abandon drops a failed window's gradients and per-step state.
func (t *Trainer) abandon() {
	torch.Try(func() { t.Opt.ZeroGrad() })
	t.Scaler.Reset()
	torch.EmptyCache()
}

func (t *Trainer) autocast(fn func()) {
	switch t.cfg.Precision {
	case BF16:
		amp.Autocast(t.cfg.Device, torch.BFloat16, fn)
	case FP16:
		amp.Autocast(t.cfg.Device, torch.Float16, fn)
	default:
		fn()
	}
}

func (t *Trainer) window(b *data.Batch, size int) (StepInfo, error) {
	info := StepInfo{Samples: size, MicroBatch: t.micro, GradNorm: math.NaN(), LR: t.lr()}
	nn.Train(t.Model, true)
	for i := 0; i < size; i += t.micro {
		j := min(i+t.micro, size)
		err := torch.TidyErr(func() error {
			mb := t.microBatch(b, i, j, size)
			var loss *torch.Tensor
			t.autocast(func() { loss = t.Loss(mb) })
			if loss == nil {
				return fmt.Errorf("train: the loss function returned nil")
			}
			// Each op here is a cgo call and an autograd node: skip the
			// ones that would do nothing (the common single micro-batch,
			// float32 case).
			weighted := loss
			if loss.DType() != torch.Float32 {
				weighted = weighted.ToDType(torch.Float32)
			}
			if j-i != size {
				weighted = weighted.MulScalar(float64(j-i) / float64(size))
			}
			info.Loss += weighted.Item()
			t.Scaler.Scale(weighted).Backward()
			return nil
		})
		if err != nil {
			return info, err
		}
		info.Micro++
	}
	if math.IsNaN(info.Loss) || math.IsInf(info.Loss, 0) {
		if !t.Scaler.Enabled() {
			t.cfg.Logf("step %d: loss is %v; skipping the optimizer step", t.step+1, info.Loss)
			t.Opt.ZeroGrad()
			info.Skipped = true
			t.step++
			info.Step = t.step
			return info, nil
		}
	}
	err := torch.TidyErr(func() error {
		if t.Scaler.Enabled() {
			t.Scaler.Unscale(t.Opt)
		}
		if t.cfg.ClipNorm > 0 {
			norm, err := nn.ClipGradNorm(t.Opt.Parameters(), t.cfg.ClipNorm, 2)
			info.GradNorm = norm
			if err != nil && !t.Scaler.Enabled() {
				// Without a scaler nothing else would stop a nan update.
				t.cfg.Logf("step %d: gradient norm is %v; skipping the optimizer step", t.step+1, norm)
				info.Skipped = true
			}
		}
		if !info.Skipped {
			info.Skipped = !t.Scaler.Step(t.Opt)
		}
		t.Scaler.Update()
		if t.Sched != nil {
			t.Sched.Step()
		}
		t.Opt.ZeroGrad()
		if t.cfg.Precision != FP32 {
			amp.ClearCache()
		}
		return nil
	})
	if err != nil {
		return info, &optimizerError{err}
	}
	t.step++
	info.Step = t.step
	return info, nil
}

// microBatch returns samples [i, j) of b on the device. The whole of a
// CPU batch without padded fields is new references to b's tensors:
// slicing would only add a view per field, each a dispatched op.
func (t *Trainer) microBatch(b *data.Batch, i, j, size int) *data.Batch {
	if i != 0 || j != size || t.cfg.Device.IsCUDA() || len(b.Lengths) > 0 {
		return b.Slice(i, j, t.cfg.Device)
	}
	fields := make(map[string]*torch.Tensor, len(b.Fields))
	for k, v := range b.Fields {
		// A new reference (no dispatcher call, unlike a view), owned by
		// the micro-batch's scope as a slice would be. On the CPU a field
		// stays where it is, as with Slice.
		fields[k] = v.Ref()
	}
	return &data.Batch{Fields: fields}
}

func (t *Trainer) lr() float64 {
	if gs := t.Opt.Groups(); len(gs) > 0 {
		return gs[0].LR
	}
	return 0
}

func (t *Trainer) after(info *StepInfo) {
	if n := t.cfg.EmptyCacheEvery; n > 0 && t.step%n == 0 {
		torch.EmptyCache()
	}
	if s, err := torch.MemoryStats(t.cfg.Device); err == nil {
		info.Memory = s
	}
	if n := t.cfg.MemoryEvery; n > 0 && t.step%n == 0 {
		t.cfg.Logf("step %d | %s", t.step, MemoryLine(info.Memory))
	}
	if t.OnStep != nil {
		t.OnStep(*info)
	}
}

// MemoryLine formats allocated, peak and reserved memory as the loop logs it.
func MemoryLine(s torch.MemStats) string {
	return fmt.Sprintf("memory allocated %s | peak %s | reserved %s", torch.FormatBytes(s.Allocated),
		torch.FormatBytes(s.PeakAllocated), torch.FormatBytes(s.Reserved))
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
	nn.Train(t.Model, false)
	defer nn.Train(t.Model, true)
	var total float64
	var n int
	batches(func(b *data.Batch) bool {
		err = torch.TidyErr(func() error {
			torch.NoGrad(func() {
				mb := b.Slice(0, b.Size(), t.cfg.Device)
				var v float64
				t.autocast(func() { v = fn(mb) })
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
