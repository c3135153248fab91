package memplan

import (
	"fmt"
	"math"
	"strings"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// OptimizerKind is the optimizer a training run uses, as far as its state's
// size goes.
type OptimizerKind int

// Optimizer kinds. The zero value is Adam.
const (
	Adam        OptimizerKind = iota // two moments per parameter and a float32 step count
	AdamW                            // as Adam
	SGD                              // no state
	SGDMomentum                      // one momentum buffer per parameter
)

func (k OptimizerKind) String() string {
	switch k {
	case Adam:
		return "adam"
	case AdamW:
		return "adamw"
	case SGD:
		return "sgd"
	case SGDMomentum:
		return "sgd-momentum"
	}
	return fmt.Sprintf("OptimizerKind(%d)", int(k))
}

// StateBytes returns the optimizer state kept for one parameter of n bytes
// (nn's optimizers: Adam's and AdamW's exp_avg and exp_avg_sq at the
// parameter's dtype, and a float32 step, a tensor once State has been
// called for a checkpoint; SGD's momentum buffer).
func (k OptimizerKind) StateBytes(n int64) (int64, error) {
	switch k {
	case SGD:
		return 0, nil
	case SGDMomentum:
		return n, nil
	case Adam, AdamW:
		return 2*n + 4, nil
	}
	return 0, optErr("EstimateMemory", "Optimizer", "unknown optimizer kind %d (want Adam, AdamW, SGD or SGDMomentum)", int(k))
}

// EstimateOptions configures EstimateMemory.
type EstimateOptions struct {
	// Optimizer is the optimizer the training will use (default Adam).
	Optimizer OptimizerKind
	// Precision is how the step computes (default amp.FP32): mixed
	// precision as the training loop runs it. The probes run under
	// autocast at its dtype, so their activations (and the cached
	// low-precision weight copies) are measured as they will be; weights,
	// gradients and optimizer state are counted at the parameters' own
	// dtype (float32 master weights, unless the model was converted with
	// nn.To). amp.FP16 needs CUDA.
	Precision amp.Precision
	// Batch is the batch size asked about (samples per forward/backward:
	// the micro-batch when accumulating gradients).
	Batch int
	// Step runs forward and backward on a synthetic batch of the given
	// size (creating its inputs too). It runs inside a tensor scope: what
	// it creates is released when it returns, and under autocast when
	// Precision asks for it, the backward too (a backward inside the
	// region keeps the forward's cached weight casts through it, which the
	// training loop's does not). It must not step an optimizer. One of
	// Step and Forward is required.
	Step func(batch int) error
	// Forward returns the scalar loss of a synthetic batch of the given
	// size; EstimateMemory calls Backward on it after the autocast region
	// ends, as the training loop does.
	Forward func(batch int) *torch.Tensor
	// Device is where the model lives (the zero value is the CPU).
	Device torch.Device
	// Probes are the small batch sizes measured (default 2 and 4; at least
	// two distinct sizes). Activation memory is fitted as a + b·batch.
	// Batch 1 makes a poor probe: broadcasting and views often take other
	// paths there, and it falls off the line the larger batches follow.
	Probes []int
}

// EstimateProbe is one measured dry run.
type EstimateProbe struct {
	Batch int
	// Peak is the peak allocation of the forward+backward above what was
	// allocated before it, less the gradients it created: the activations
	// (saved tensors, inputs, temporaries) at their high-water mark.
	Peak int64
}

// Estimate is the memory a training step needs, in bytes.
type Estimate struct {
	Batch     int
	Optimizer OptimizerKind
	Precision amp.Precision
	// Params is the number of parameter elements, Trainable those that
	// require grad.
	Params, Trainable int64
	// Weights are the parameters and buffers.
	Weights int64
	// Gradients are one per trainable parameter, at its dtype.
	Gradients int64
	// OptimizerState is what the optimizer keeps per trainable parameter.
	OptimizerState int64
	// Activations is the fitted activation peak at Batch:
	// ActivationFixed + ActivationPerSample·Batch (never negative).
	Activations int64
	// Total is Weights + Gradients + OptimizerState + Activations: the
	// peak of a steady-state training step (the step's high-water mark is
	// during backward, with the optimizer state from earlier steps live).
	Total int64

	ActivationFixed     float64 // bytes, the intercept of the fit
	ActivationPerSample float64 // bytes per sample, the slope of the fit
	Probes              []EstimateProbe
}

// MaxBatch returns the largest batch whose estimated total fits in budget
// bytes (0 when not even the fixed part fits; math.MaxInt when
// activations do not grow with the batch).
func (e Estimate) MaxBatch(budget int64) int {
	fixed := float64(e.Weights+e.Gradients+e.OptimizerState) + math.Max(e.ActivationFixed, 0)
	if fixed > float64(budget) {
		return 0
	}
	if e.ActivationPerSample <= 0 {
		return math.MaxInt
	}
	return int((float64(budget) - fixed) / e.ActivationPerSample)
}

// String returns the estimate as a table.
func (e Estimate) String() string {
	var b strings.Builder
	pct := func(n int64) string {
		if e.Total <= 0 {
			return ""
		}
		return fmt.Sprintf("%5.1f%%", 100*float64(n)/float64(e.Total))
	}
	fmt.Fprintf(&b, "memory estimate: batch %d, optimizer %s, precision %s, %d parameters (%d trainable)\n",
		e.Batch, e.Optimizer, e.Precision, e.Params, e.Trainable)
	row := func(name string, n int64, note string) {
		fmt.Fprintf(&b, "  %-16s %12s %7s  %s\n", name, torch.FormatBytes(n), pct(n), note)
	}
	row("weights", e.Weights, "parameters and buffers")
	row("gradients", e.Gradients, "trainable parameters")
	row("optimizer state", e.OptimizerState, e.Optimizer.String())
	row("activations", e.Activations, fmt.Sprintf("%s + %s/sample × %d (fitted on %s)",
		torch.FormatBytes(int64(e.ActivationFixed)), torch.FormatBytes(int64(e.ActivationPerSample)), e.Batch, e.probeList()))
	fmt.Fprintf(&b, "  %s\n", strings.Repeat("-", 38))
	row("total", e.Total, "")
	return b.String()
}

func (e Estimate) probeList() string {
	var s []string
	for _, p := range e.Probes {
		s = append(s, fmt.Sprintf("%d: %s", p.Batch, torch.FormatBytes(p.Peak)))
	}
	return "batch " + strings.Join(s, ", ")
}

// checkPrecision validates p for device (the zero value is FP32).
func checkPrecision(fn, field string, p amp.Precision, dev torch.Device) (amp.Precision, error) {
	switch p {
	case "":
		return amp.FP32, nil
	case amp.FP32, amp.BF16:
		return p, nil
	case amp.FP16:
		if !dev.IsCUDA() && !amp.CPUFloat16() {
			return p, optErr(fn, field, "float16 autocast on the CPU needs libtorch 2.4 or later; use amp.BF16, or CUDA")
		}
		return p, nil
	}
	return p, optErr(fn, field, "unknown precision %q (want amp.FP32, amp.BF16 or amp.FP16)", string(p))
}

// EstimateMemory estimates the memory a training step of m needs at
// o.Batch. Weights, gradients and optimizer state are computed from the
// parameters' sizes and dtypes; activations are measured by dry runs of
// o.Step (or Forward) at the small probe batches, with the allocator's
// peak counter, and extrapolated linearly to o.Batch. It computes on
// torch.Main().
//
// m's gradients are set to none before and after (as by ZeroGrad), its
// parameters' requires-grad flags are restored, and everything the dry runs
// allocate is released: a Step that leaves memory behind is an error.
// Bad options are *OptionError.
func EstimateMemory(m nn.Module, o EstimateOptions) (est Estimate, err error) {
	torch.Main().Do(func() { est, err = estimateMemory(m, o) })
	return est, err
}

func estimateMemory(m nn.Module, o EstimateOptions) (Estimate, error) {
	const fn = "EstimateMemory"
	dev := o.Device
	if !dev.IsCUDA() {
		dev = torch.CPU
	}
	est := Estimate{Batch: o.Batch, Optimizer: o.Optimizer, Precision: o.Precision}
	if m == nil {
		return est, optErr(fn, "m", "nil module")
	}
	if _, err := o.Optimizer.StateBytes(0); err != nil {
		return est, err
	}
	prec, err := checkPrecision(fn, "Precision", o.Precision, dev)
	if err != nil {
		return est, err
	}
	est.Precision = prec
	if o.Batch < 1 {
		return est, optErr(fn, "Batch", "%d (want >= 1)", o.Batch)
	}
	if (o.Step == nil) == (o.Forward == nil) {
		return est, optErr(fn, "Step/Forward", "set exactly one of them")
	}
	autocast := prec != amp.FP32
	probes := o.Probes
	if len(probes) == 0 {
		probes = []int{2, 4}
	}
	distinct := map[int]bool{}
	for _, p := range probes {
		if p < 1 {
			return est, optErr(fn, "Probes", "batch %d (want >= 1)", p)
		}
		distinct[p] = true
	}
	if len(distinct) < 2 {
		return est, optErr(fn, "Probes", "%v: need two distinct batch sizes", probes)
	}

	// Sizes.
	params := nn.Parameters(m)
	trainable := make([]bool, len(params))
	for k, p := range params {
		n := p.T.NBytes()
		est.Params += p.T.Numel()
		est.Weights += n
		if p.T.RequiresGrad() {
			trainable[k] = true
			est.Trainable += p.T.Numel()
			est.Gradients += n
			s, err := o.Optimizer.StateBytes(n)
			if err != nil {
				return est, err
			}
			est.OptimizerState += s
		}
	}
	for _, b := range nn.Buffers(m) {
		est.Weights += b.T.NBytes()
	}

	clearGrads := func() {
		for _, p := range params {
			p.T.SetGrad(nil)
		}
	}
	restore := func() {
		clearGrads()
		for k, p := range params {
			if p.T.RequiresGrad() != trainable[k] {
				p.T.SetRequiresGrad(trainable[k])
			}
		}
	}
	defer restore()
	clearGrads()

	run := func(batch int) (peak int64, err error) {
		base, err := torch.MemoryStats(dev)
		if err != nil {
			return 0, err
		}
		if err := torch.ResetPeakMemory(dev); err != nil {
			return 0, err
		}
		region := func(fn func()) {
			if autocast {
				amp.Autocast(dev, prec.DType(), fn)
			} else {
				fn()
			}
		}
		if perr := torch.Try(func() {
			err = torch.TidyErr(func() error {
				if o.Step != nil {
					var err error
					region(func() { err = o.Step(batch) })
					return err
				}
				// As the training loop: the loss under autocast, its
				// backward after the region (which frees the casts
				// autocast cached).
				var loss *torch.Tensor
				region(func() { loss = o.Forward(batch) })
				if loss == nil {
					return fmt.Errorf("memplan: EstimateMemory: Forward returned nil")
				}
				loss.Backward()
				return nil
			})
			if autocast {
				torch.ClearAutocastCache()
			}
		}); perr != nil && err == nil {
			err = perr
		}
		after, serr := torch.MemoryStats(dev)
		var grads int64
		for k, p := range params {
			if trainable[k] {
				if g := p.T.Grad(); g != nil {
					grads += g.NBytes()
					g.Free()
				}
			}
		}
		clearGrads()
		if err != nil {
			return 0, fmt.Errorf("memplan: EstimateMemory: dry run at batch %d: %w", batch, err)
		}
		if serr != nil {
			return 0, serr
		}
		return after.PeakAllocated - base.Allocated - grads, nil
	}

	// A warm-up run at the smallest probe: one-time allocations (lazily
	// created state) do not count, and must not stay behind afterwards.
	smallest := probes[0]
	for _, p := range probes {
		smallest = min(smallest, p)
	}
	if _, err := run(smallest); err != nil {
		return est, err
	}
	start, err := torch.MemoryStats(dev)
	if err != nil {
		return est, err
	}
	for _, p := range probes {
		peak, err := run(p)
		if err != nil {
			return est, err
		}
		est.Probes = append(est.Probes, EstimateProbe{Batch: p, Peak: peak})
	}
	end, err := torch.MemoryStats(dev)
	if err != nil {
		return est, err
	}
	if leak := end.Allocated - start.Allocated; leak > 0 {
		return est, fmt.Errorf("memplan: EstimateMemory: %w: the dry runs left %s (Step must release what it creates; Keep nothing)",
			ErrLeak, torch.FormatBytes(leak))
	}

	// Least-squares line through the probes.
	var sx, sy, sxx, sxy float64
	n := float64(len(est.Probes))
	for _, p := range est.Probes {
		x, y := float64(p.Batch), float64(p.Peak)
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	slope := (n*sxy - sx*sy) / (n*sxx - sx*sx)
	icept := (sy - slope*sx) / n
	if slope < 0 { // noise: activations that do not grow with the batch
		slope, icept = 0, 0
		for _, p := range est.Probes {
			icept = math.Max(icept, float64(p.Peak))
		}
	}
	est.ActivationFixed, est.ActivationPerSample = icept, slope
	est.Activations = max(0, int64(math.Round(icept+slope*float64(o.Batch))))
	est.Total = est.Weights + est.Gradients + est.OptimizerState + est.Activations
	return est, nil
}
