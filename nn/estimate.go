package nn

import (
	"fmt"
	"math"
	"strings"

	"github.com/torchfit/torchfit/torch"
)

// EstimateOptions configures EstimateMemory.
type EstimateOptions struct {
	// Optimizer is the optimizer the training will use: "sgd" (no state),
	// "sgd-momentum" (one buffer per parameter), "adam" or "adamw" (two
	// buffers per parameter and a float32 step count). Default "adam".
	Optimizer string
	// Precision is "fp32" (default), "bf16" or "fp16": mixed precision as
	// train.Trainer runs it. The probe runs under autocast at that
	// dtype, so its activations (and the cached low-precision weight
	// copies) are measured as they will be; weights, gradients and
	// optimizer state are counted at the parameters' own dtype (float32
	// master weights, unless the model was converted with To). fp16 needs
	// CUDA.
	Precision string
	// Batch is the batch size asked about (samples per forward/backward:
	// the micro-batch when accumulating gradients).
	Batch int
	// Step runs forward and backward on a synthetic batch of the given
	// size (creating its inputs too). It runs inside a tensor scope: what
	// it creates is released when it returns. It must not step an
	// optimizer. One of Step and Forward is required.
	Step func(batch int) error
	// Forward returns the scalar loss of a synthetic batch of the given
	// size; EstimateMemory calls Backward on it.
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
	Optimizer string
	Precision string
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
	row("optimizer state", e.OptimizerState, e.Optimizer)
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

// optimizerStateBytes returns the optimizer's state for a parameter of n
// bytes.
func optimizerStateBytes(kind string, n int64) (int64, error) {
	switch kind {
	case "sgd":
		return 0, nil
	case "sgd-momentum":
		return n, nil
	case "adam", "adamw":
		return 2*n + 4, nil // exp_avg, exp_avg_sq, float32 step
	}
	return 0, fmt.Errorf("nn: EstimateMemory: unknown optimizer %q (want sgd, sgd-momentum, adam or adamw)", kind)
}

// EstimateMemory estimates the memory a training step of m needs at
// opts.Batch. Weights, gradients and optimizer state are computed from the
// parameters' sizes and dtypes; activations are measured by dry runs of
// opts.Step (or Forward) at the small probe batches, with the allocator's
// peak counter, and extrapolated linearly to opts.Batch.
//
// m's gradients are set to none before and after (as by ZeroGrad), its
// parameters' requires-grad flags are restored, and everything the dry runs
// allocate is released: a Step that leaves memory behind is an error.
func EstimateMemory(m Module, opts EstimateOptions) (Estimate, error) {
	if opts.Optimizer == "" {
		opts.Optimizer = "adam"
	}
	opts.Optimizer = strings.ToLower(opts.Optimizer)
	if opts.Precision == "" {
		opts.Precision = "fp32"
	}
	opts.Precision = strings.ToLower(opts.Precision)
	dev := opts.Device
	if !dev.IsCUDA() {
		dev = torch.CPU
	}
	est := Estimate{Batch: opts.Batch, Optimizer: opts.Optimizer, Precision: opts.Precision}
	if opts.Batch < 1 {
		return est, fmt.Errorf("nn: EstimateMemory: batch %d (want >= 1)", opts.Batch)
	}
	if (opts.Step == nil) == (opts.Forward == nil) {
		return est, fmt.Errorf("nn: EstimateMemory: set exactly one of Step and Forward")
	}
	var lowp torch.DType
	autocast := opts.Precision != "fp32"
	switch opts.Precision {
	case "fp32":
	case "bf16":
		lowp = torch.BFloat16
	case "fp16":
		if !dev.IsCUDA() {
			return est, fmt.Errorf("nn: EstimateMemory: float16 autocast needs CUDA; use bf16 on the CPU")
		}
		lowp = torch.Float16
	default:
		return est, fmt.Errorf("nn: EstimateMemory: unknown precision %q (want fp32, bf16 or fp16)", opts.Precision)
	}
	probes := opts.Probes
	if len(probes) == 0 {
		probes = []int{2, 4}
	}
	distinct := map[int]bool{}
	for _, p := range probes {
		if p < 1 {
			return est, fmt.Errorf("nn: EstimateMemory: probe batch %d (want >= 1)", p)
		}
		distinct[p] = true
	}
	if len(distinct) < 2 {
		return est, fmt.Errorf("nn: EstimateMemory: probes %v: need two distinct batch sizes", probes)
	}

	// Sizes.
	params := Parameters(m)
	trainable := make([]bool, len(params))
	for k, p := range params {
		n := p.T.NBytes()
		est.Params += p.T.Numel()
		est.Weights += n
		if p.T.RequiresGrad() {
			trainable[k] = true
			est.Trainable += p.T.Numel()
			est.Gradients += n
			s, err := optimizerStateBytes(opts.Optimizer, n)
			if err != nil {
				return est, err
			}
			est.OptimizerState += s
		}
	}
	if _, err := optimizerStateBytes(opts.Optimizer, 0); err != nil {
		return est, err
	}
	for _, b := range Buffers(m) {
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
		body := func() {
			err = torch.TidyErr(func() error {
				if opts.Step != nil {
					return opts.Step(batch)
				}
				loss := opts.Forward(batch)
				if loss == nil {
					return fmt.Errorf("nn: EstimateMemory: Forward returned nil")
				}
				loss.Backward()
				return nil
			})
			if autocast {
				torch.ClearAutocastCache()
			}
		}
		if perr := torch.Try(func() {
			if autocast {
				torch.Autocast(dev, lowp, body)
			} else {
				body()
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
			return 0, fmt.Errorf("nn: EstimateMemory: dry run at batch %d: %w", batch, err)
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
		return est, fmt.Errorf("nn: EstimateMemory: the dry runs left %s allocated (Step must release what it creates; Keep nothing)",
			torch.FormatBytes(leak))
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
	est.Activations = max(0, int64(math.Round(icept+slope*float64(opts.Batch))))
	est.Total = est.Weights + est.Gradients + est.OptimizerState + est.Activations
	return est, nil
}
