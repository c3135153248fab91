package train

import (
	"fmt"
	"math"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// Hook runs between backward and the optimizer step, after the gradients
// are unscaled and before they are clipped: distributed training's
// all-reduce, gradient statistics, moving gradients elsewhere. An error
// fails the step.
type Hook func(o *Optim) error

// Optim steps one optimizer: unscale → hooks → clip → step, then (Finish)
// schedule → zero the gradients (set to none) → clear the autocast weight
// cache. The scaler's Update comes between Step and Finish, once per
// iteration, from whoever drives the iteration: the single-model Trainer
// does it for you; a GAN calls it after both networks' steps.
type Optim struct {
	Opt   nn.Optimizer
	Sched *nn.Schedule // optional
	// ClipNorm clips the gradients' total L2 norm (after unscaling); 0: off.
	ClipNorm float64
	// Scaler is shared by every Optim stepping in one iteration (nil or
	// disabled: none).
	Scaler *amp.GradScaler
	// Precision tells Finish whether there is an autocast cache to clear.
	Precision amp.Precision
	Hooks     []Hook
}

// OptimStep is what Optim.Step did.
type OptimStep struct {
	GradNorm float64 // total gradient norm before clipping (NaN when not computed)
	Skipped  bool    // the parameters were not updated (inf/nan gradients)
	Reason   string  // why, when Skipped
}

// LR returns the first parameter group's learning rate.
func (o *Optim) LR() float64 {
	if gs := o.Opt.Groups(); len(gs) > 0 {
		return gs[0].LR
	}
	return 0
}

// Step unscales the gradients, runs the hooks, clips, and steps the
// optimizer unless a gradient is inf or nan (the scaler's check; without a
// scaler, a non-finite gradient norm when clipping). Call it inside a
// tensor scope.
func (o *Optim) Step() (OptimStep, error) {
	r := OptimStep{GradNorm: math.NaN()}
	if o.Scaler.Enabled() {
		o.Scaler.Unscale(o.Opt)
	}
	for _, h := range o.Hooks {
		if err := h(o); err != nil {
			return r, err
		}
	}
	if o.ClipNorm > 0 {
		norm, err := nn.ClipGradNorm(o.Opt.Parameters(), o.ClipNorm, 2)
		r.GradNorm = norm
		if err != nil && !o.Scaler.Enabled() {
			// Without a scaler nothing else would stop a nan update.
			r.Skipped, r.Reason = true, fmt.Sprintf("gradient norm is %v", norm)
		}
	}
	if !r.Skipped {
		if o.Scaler.Enabled() {
			if !o.Scaler.Step(o.Opt) {
				r.Skipped, r.Reason = true, "inf or nan gradients (the scaler backs off)"
			}
		} else {
			o.Opt.Step()
		}
	}
	return r, nil
}

// Finish advances the schedule, sets the gradients to none and clears the
// autocast weight cache (whose low-precision copies of the weights the step
// made stale).
func (o *Optim) Finish() {
	if o.Sched != nil {
		o.Sched.Step()
	}
	o.Opt.ZeroGrad()
	if o.Precision != "" && o.Precision != amp.FP32 {
		amp.ClearCache()
	}
}

// Abandon drops the gradients and this optimizer's scaler record, after a
// failed window.
func (o *Optim) Abandon() {
	torch.Try(func() { o.Opt.ZeroGrad() })
	if o.Scaler.Enabled() {
		o.Scaler.ResetOptimizer(o.Opt)
	}
}
