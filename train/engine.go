package train

import (
	"errors"
	"fmt"
	"math"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// LossFunc computes a micro-batch's loss (the micro-batch is on the
// device): the mean over the items the Engine's CountFunc says it holds
// (samples by default). It runs inside a tensor scope and under autocast;
// it may panic with *torch.Error as tensor math does.
type LossFunc func(mb *data.Batch) *torch.Tensor

// CountFunc returns how many items a micro-batch's loss is a mean over:
// tokens, frames or samples. It gets the micro-batch on the CPU, before it
// moves, and must not be expensive (read Lengths, count a mask).
type CountFunc func(mb *data.Batch) float64

// EngineConfig configures an Engine.
type EngineConfig struct {
	MicroBatch int // samples per micro-batch (halved on out-of-memory)
	Device     torch.Device
	Precision  amp.Precision
	// Count says how many items each micro-batch's loss averages over; the
	// window's gradient is then that of the mean over all the window's
	// items, whatever their share per micro-batch (variable lengths,
	// padding). nil: samples.
	Count CountFunc
	// NoOOMAdapt returns out-of-memory errors instead of adapting.
	NoOOMAdapt bool
	// BeforeBackward, when set, runs before each micro-batch's backward
	// with its index and the window's number of micro-batches: distributed
	// training skips the gradient all-reduce on all but the last.
	BeforeBackward func(k, n int)
	// Events receives the engine's events (out-of-memory adaptation).
	Events Sink
	// Parallel, when set, makes each window data parallel (see Parallel):
	// the loss is weighted by the items counted over all ranks, the last
	// backward of a window reduces the gradients, the window's loss and
	// samples are summed over the ranks. An empty batch (a rank's empty
	// part of a short last batch) is then a window with no micro-batches.
	Parallel Parallel
}

// Engine runs windows — the micro-batches of one effective batch — moving
// each micro-batch to the device alone, each in its own tensor scope, under
// autocast for the precision, and accumulating gradients. An out-of-memory
// error halves the micro-batch and redoes the window at the same effective
// batch. Engines compose: a GAN has one per network.
type Engine struct {
	cfg   EngineConfig
	micro int
	// OOMEvents counts windows redone with a smaller micro-batch.
	OOMEvents int
}

// NewEngine returns an engine.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.MicroBatch < 1 {
		return nil, fmt.Errorf("train: micro-batch %d must be >= 1", cfg.MicroBatch)
	}
	if cfg.Precision == "" {
		cfg.Precision = amp.FP32
	}
	switch cfg.Precision {
	case amp.FP32, amp.BF16, amp.FP16:
	default:
		return nil, fmt.Errorf("train: unknown precision %q (want amp.FP32, amp.BF16 or amp.FP16)", cfg.Precision)
	}
	if cfg.Precision == amp.FP16 && !cfg.Device.IsCUDA() && !amp.CPUFloat16() {
		return nil, fmt.Errorf("train: float16 training on the CPU needs libtorch 2.4 or later; use bf16, or CUDA")
	}
	return &Engine{cfg: cfg, micro: cfg.MicroBatch}, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() EngineConfig { return e.cfg }

// MicroBatch returns the micro-batch in use (smaller than configured after
// out-of-memory adaptation).
func (e *Engine) MicroBatch() int { return e.micro }

// SetMicroBatch sets the micro-batch (resuming a run that had adapted).
func (e *Engine) SetMicroBatch(n int) {
	if n >= 1 {
		e.micro = n
	}
}

// Window is what one pass over an effective batch did.
type Window struct {
	Loss float64 // mean loss over the window's counted items
	// LossTensor is the same loss left on the device, with Pass.DeviceLoss
	// or CachePass.DeviceLoss (Loss is then 0): a new reference the caller
	// frees.
	LossTensor *torch.Tensor
	Count      float64 // counted items (samples without a CountFunc)
	Samples    int
	Micro      int // micro-batches
	MicroBatch int // micro-batch size used
	OOMRetries int // windows redone for out-of-memory
}

// ErrDeviceLoss is a Pass with DeviceLoss on a data-parallel engine,
// whose ranks sum their windows' losses on the host.
var ErrDeviceLoss = errors.New("train: a data-parallel window reads its loss on the host (Pass.DeviceLoss)")

// Pass is one backward pass over a window.
type Pass struct {
	Loss   LossFunc
	Scaler *amp.GradScaler // scales each backward (nil: none)
	// Reset drops the gradients (and scaler records) the window
	// accumulated, after an out-of-memory error, before it is redone.
	Reset func()
	// Step numbers the optimizer step the window is for, in events.
	Step int
	// DeviceLoss leaves the window's loss on the device
	// (Window.LossTensor) instead of reading it: a pass that reads nothing
	// on the host, as one captured in a CUDA graph must. Not with a
	// data-parallel engine, whose ranks sum their losses on the host.
	DeviceLoss bool
}

// Autocast runs fn under autocast for the engine's precision.
func (e *Engine) Autocast(fn func()) {
	if p := e.cfg.Precision; p != amp.FP32 {
		amp.Autocast(e.cfg.Device, p.DType(), fn)
		return
	}
	fn()
}

// Backward runs p.Loss forward and backward over b's micro-batches: the
// parameters' gradients accumulate the gradient of the window's mean loss
// (scaled by p.Scaler). b stays the caller's, on the CPU.
func (e *Engine) Backward(b *data.Batch, p Pass) (Window, error) {
	size, err := batchSize(b)
	if err != nil {
		return Window{}, err
	}
	if size == 0 && e.cfg.Parallel == nil {
		return Window{}, fmt.Errorf("train: empty batch")
	}
	if p.Loss == nil {
		return Window{}, fmt.Errorf("train: no loss function")
	}
	if p.DeviceLoss && e.cfg.Parallel != nil {
		return Window{}, ErrDeviceLoss
	}
	if e.cfg.Parallel != nil {
		return e.parallelBackward(b, size, p)
	}
	return e.retry(size, p, nil, func() (Window, error) { return e.backward(b, size, p, nil) })
}

// batchSize is b's size; a batch that has none to read (nil, or a nil or
// freed field) is an error, as a window's other failures are.
func batchSize(b *data.Batch) (int, error) {
	if b == nil {
		return 0, errors.New("train: nil batch")
	}
	var n int
	if err := torch.Try(func() { n = b.Size() }); err != nil {
		return 0, fmt.Errorf("train: batch: %w", err)
	}
	return n, nil
}

// retry runs one attempt at a window and, on out-of-memory, resets, halves
// the micro-batch and tries again — unless final says the failed attempt
// cannot be redone.
func (e *Engine) retry(size int, p Pass, final func() bool, attempt func() (Window, error)) (Window, error) {
	retries := 0
	for {
		w, err := attempt()
		if err == nil {
			w.OOMRetries = retries
			return w, nil
		}
		if p.Reset != nil {
			p.Reset()
		}
		torch.EmptyCache()
		if final != nil && final() {
			return Window{}, fmt.Errorf("%w: %w", ErrDesync, err)
		}
		if !errors.Is(err, torch.ErrOutOfMemory) || e.cfg.NoOOMAdapt {
			return Window{}, err
		}
		if e.micro == 1 {
			return Window{}, fmt.Errorf("train: out of memory even with micro-batch 1 (step %d): %w", p.Step, err)
		}
		old := e.micro
		e.micro = (e.micro + 1) / 2
		retries++
		e.OOMEvents++
		emit(e.cfg.Events, OOMEvent{Step: p.Step, From: old, To: e.micro, Accum: (size + e.micro - 1) / e.micro, Effective: size, Err: err})
	}
}

// parallelSync is a data-parallel window's state across its attempts.
type parallelSync struct {
	total     float64 // items counted over all ranks
	committed bool    // the gradient reduction started: no retry
}

// parallelBackward is Backward for a data-parallel window.
func (e *Engine) parallelBackward(b *data.Batch, size int, p Pass) (Window, error) {
	par := e.cfg.Parallel
	if err := par.StartWindow(); err != nil {
		return Window{}, err
	}
	sync := &parallelSync{}
	if size > 0 {
		// The total does not depend on the split: counted once for every
		// attempt (a redone window keeps its weights).
		_, local, err := e.counts(b, size)
		if err != nil {
			return Window{}, err
		}
		sync.total = local
	}
	v := []float64{sync.total}
	if err := par.SumFloats(v); err != nil {
		return Window{}, err
	}
	if sync.total = v[0]; sync.total == 0 {
		return Window{}, fmt.Errorf("train: the window counts no items on any rank")
	}
	w, err := e.retry(size, p, func() bool { return sync.committed }, func() (Window, error) { return e.backward(b, size, p, sync) })
	if err != nil {
		return w, err
	}
	// Every rank reports the global window, and takes the same decisions
	// on a non-finite loss.
	v = []float64{w.Loss, float64(w.Samples)}
	if err := par.SumFloats(v); err != nil {
		return Window{}, err
	}
	w.Loss, w.Samples, w.Count = v[0], int(v[1]), sync.total
	return w, nil
}

// weights returns each micro-batch's share of the window's counted items
// and their total.
func (e *Engine) weights(b *data.Batch, size int) ([]float64, float64, error) {
	counts, total, err := e.counts(b, size)
	if err != nil {
		return nil, 0, err
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("train: the window counts no items")
	}
	return counts, total, nil
}

// counts returns each micro-batch's counted items and their total.
func (e *Engine) counts(b *data.Batch, size int) ([]float64, float64, error) {
	var counts []float64
	var total float64
	for i := 0; i < size; i += e.micro {
		j := min(i+e.micro, size)
		if e.cfg.Count == nil {
			counts = append(counts, float64(j-i))
			continue
		}
		var c float64
		err := torch.TidyErr(func() error {
			c = e.cfg.Count(b.Slice(i, j, torch.CPU))
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
		if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return nil, 0, fmt.Errorf("train: micro-batch [%d, %d) counts %v items", i, j, c)
		}
		counts = append(counts, c)
	}
	for _, c := range counts {
		total += c
	}
	return counts, total, nil
}

// backward runs one attempt at a window; sync is nil unless the window is
// data parallel.
func (e *Engine) backward(b *data.Batch, size int, p Pass, sync *parallelSync) (Window, error) {
	w := Window{Samples: size, MicroBatch: e.micro}
	var counts []float64
	var total float64
	var err error
	if sync == nil {
		counts, total, err = e.weights(b, size)
	} else {
		counts, _, err = e.counts(b, size)
		total = sync.total // over all ranks
	}
	if err != nil {
		return w, err
	}
	w.Count = total
	n := len(counts)
	par := e.cfg.Parallel
	if sync != nil && n == 0 {
		// No samples here: the gradients this rank adds are zeros.
		if err := par.BeforeBackward(true); err != nil {
			return w, err
		}
		sync.committed = true
		return w, par.AfterBackward()
	}
	// The window's loss is summed on the device (in float64, as a sum of
	// the micro-batches' values on the host would be: the same bits) and
	// read once, after the last backward is queued: on a GPU a read waits
	// for every kernel before it, and one per micro-batch would leave the
	// device idle while the host queues each backward.
	var sum *torch.Tensor
	defer func() {
		if sum != nil {
			sum.Free()
		}
	}()
	for k, i := 0, 0; i < size; k, i = k+1, i+e.micro {
		j := min(i+e.micro, size)
		err := torch.TidyErr(func() error {
			mb := microBatch(b, i, j, size, e.cfg.Device)
			var loss *torch.Tensor
			e.Autocast(func() { loss = p.Loss(mb) })
			if loss == nil {
				return fmt.Errorf("train: the loss function returned nil")
			}
			// Each op here is a cgo call and an autograd node: skip the
			// ones that would do nothing (the common single micro-batch,
			// float32 case).
			weighted := loss
			if dt := loss.DType(); dt == torch.Float16 || dt == torch.BFloat16 {
				weighted = weighted.ToDType(torch.Float32) // accumulate in float32
			}
			if n > 1 || counts[k] != total {
				weighted = weighted.MulScalar(counts[k] / total)
			}
			value := weighted.Detach()
			if n > 1 {
				value = value.ToDType(torch.Float64)
				if sum != nil {
					value = sum.Add(value)
				}
			}
			if sum != nil {
				sum.Free()
			}
			sum = value.Keep()
			if e.cfg.BeforeBackward != nil {
				e.cfg.BeforeBackward(k, n)
			}
			if sync != nil {
				last := k == n-1
				if err := par.BeforeBackward(last); err != nil {
					return err
				}
				sync.committed = sync.committed || last
			}
			p.Scaler.Scale(weighted).Backward()
			return nil
		})
		if err != nil {
			return w, err
		}
		w.Micro++
	}
	if sync != nil {
		if err := par.AfterBackward(); err != nil {
			return w, err
		}
	}
	switch {
	case sum == nil:
	case p.DeviceLoss:
		w.LossTensor, sum = sum, nil
	default:
		if err := torch.Try(func() { w.Loss = sum.Item() }); err != nil {
			return w, err
		}
	}
	return w, nil
}

// microBatch returns samples [i, j) of b on the device. The whole of a
// CPU batch without padded fields is new references to b's tensors:
// slicing would only add a view per field, each a dispatched op.
func microBatch(b *data.Batch, i, j, size int, device torch.Device) *data.Batch {
	if i != 0 || j != size || device.IsCUDA() || len(b.Lengths) > 0 {
		return b.Slice(i, j, device)
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
