package amp

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
)

// Optimizer is what GradScaler steps: anything with Step and the
// parameters it updates.
type Optimizer interface {
	Step()
	Parameters() []*torch.Tensor
}

// ScalerOptions are GradScaler's settings; zero fields take PyTorch's defaults.
type ScalerOptions struct {
	InitScale      float64 // 65536
	GrowthFactor   float64 // 2
	BackoffFactor  float64 // 0.5
	GrowthInterval int     // 2000
	Disabled       bool    // a disabled scaler passes everything through
}

// GradScaler scales the loss so float16 gradients keep their small values,
// and skips optimizer steps whose gradients overflowed.
type GradScaler struct {
	opts    ScalerOptions
	device  torch.Device
	scale   *torch.Tensor // float32, 0-d, on device
	tracker *torch.Tensor // int32, 0-d: successful steps since the last change
	// per step
	foundInf *torch.Tensor // float32 0-d, set by Unscale
	unscaled bool
	stepped  bool
	// Skipped counts optimizer steps skipped for inf/nan gradients.
	Skipped int
}

// NewGradScaler returns a scaler for gradients on device.
func NewGradScaler(device torch.Device, o ScalerOptions) *GradScaler {
	if o.InitScale == 0 {
		o.InitScale = 65536
	}
	if o.GrowthFactor == 0 {
		o.GrowthFactor = 2
	}
	if o.BackoffFactor == 0 {
		o.BackoffFactor = 0.5
	}
	if o.GrowthInterval == 0 {
		o.GrowthInterval = 2000
	}
	s := &GradScaler{opts: o, device: device}
	if !o.Disabled {
		s.scale = torch.Full([]int64{}, o.InitScale, torch.Float32, device).Keep()
		s.tracker = torch.Zeros([]int64{}, torch.Int32, device).Keep()
	}
	return s
}

// Enabled reports whether the scaler scales.
func (s *GradScaler) Enabled() bool { return !s.opts.Disabled }

// ScaleValue returns the current scale (1 when disabled); it synchronises
// with the device.
func (s *GradScaler) ScaleValue() float64 {
	if s.opts.Disabled {
		return 1
	}
	return s.scale.Item()
}

// Scale returns loss × scale (loss itself when disabled).
func (s *GradScaler) Scale(loss *torch.Tensor) *torch.Tensor {
	if s.opts.Disabled {
		return loss
	}
	return loss.Mul(s.scale.ToDType(loss.DType()))
}

// Unscale divides the gradients of opt's parameters by the scale in place
// and records whether any is inf or nan. Call it at most once per step,
// before clipping; Step calls it when you did not.
func (s *GradScaler) Unscale(opt Optimizer) {
	if s.opts.Disabled {
		return
	}
	if s.unscaled {
		panic(&torch.Error{Op: "GradScaler.Unscale", Msg: "Unscale already called since the last Update"})
	}
	s.unscaled = true
	var grads []*torch.Tensor
	for _, p := range opt.Parameters() {
		if g := p.Grad(); g != nil {
			grads = append(grads, g)
		}
	}
	torch.NoGrad(func() {
		inv := s.scale.Reciprocal().Keep()
		defer inv.Free()
		s.foundInf = unscaleGrads(grads, inv, s.device).Keep()
	})
	for _, g := range grads {
		g.Free()
	}
}

// Step unscales (when Unscale was not called) and runs opt.Step unless a
// gradient was inf or nan. It reports whether the step ran.
func (s *GradScaler) Step(opt Optimizer) bool {
	if s.opts.Disabled {
		opt.Step()
		return true
	}
	if s.stepped {
		panic(&torch.Error{Op: "GradScaler.Step", Msg: "Step already called since the last Update"})
	}
	if !s.unscaled {
		s.Unscale(opt)
	}
	s.stepped = true
	if s.foundInf.Item() != 0 {
		s.Skipped++
		return false
	}
	opt.Step()
	return true
}

// Update adapts the scale after a step: back off when the step found inf or
// nan, grow after GrowthInterval clean steps in a row.
func (s *GradScaler) Update() {
	if s.opts.Disabled {
		return
	}
	found := s.foundInf
	if found == nil {
		found = torch.Zeros([]int64{}, torch.Float32, s.device)
	}
	torch.NoGrad(func() {
		updateScale(s.scale, s.tracker, found, s.opts.GrowthFactor, s.opts.BackoffFactor, s.opts.GrowthInterval)
	})
	found.Free()
	s.foundInf = nil
	s.unscaled, s.stepped = false, false
}

// State returns the scaler's state for checkpoints: scale and growth tracker.
func (s *GradScaler) State() map[string]float64 {
	if s.opts.Disabled {
		return map[string]float64{"scale": 1, "growth_tracker": 0, "enabled": 0}
	}
	return map[string]float64{"scale": s.scale.Item(), "growth_tracker": s.tracker.Item(), "enabled": 1,
		"growth_factor": s.opts.GrowthFactor, "backoff_factor": s.opts.BackoffFactor,
		"growth_interval": float64(s.opts.GrowthInterval)}
}

// LoadState restores State's values.
func (s *GradScaler) LoadState(st map[string]float64) error {
	if s.opts.Disabled {
		return nil
	}
	scale, ok1 := st["scale"]
	tr, ok2 := st["growth_tracker"]
	if !ok1 || !ok2 {
		return fmt.Errorf("amp: scaler state lacks scale or growth_tracker")
	}
	torch.NoGrad(func() {
		s.scale.FillIn(scale)
		s.tracker.FillIn(tr)
	})
	return nil
}

// Reset abandons the current step (after an out-of-memory error, say):
// the unscaled/stepped flags and the inf record are dropped; the scale and
// growth tracker are kept.
func (s *GradScaler) Reset() {
	s.foundInf.Free()
	s.foundInf = nil
	s.unscaled, s.stepped = false, false
}
