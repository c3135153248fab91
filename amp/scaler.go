package amp

import (
	"fmt"
	"math"
	"reflect"

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

// check reports options that cannot work (zero fields are defaults).
func (o ScalerOptions) check() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !finite(o.InitScale) || o.InitScale < 0:
		return fmt.Errorf("InitScale %v (want a finite scale > 0)", o.InitScale)
	case !finite(o.GrowthFactor) || (o.GrowthFactor != 0 && o.GrowthFactor <= 1):
		return fmt.Errorf("GrowthFactor %v (want a finite factor > 1)", o.GrowthFactor)
	case !finite(o.BackoffFactor) || o.BackoffFactor < 0 || o.BackoffFactor >= 1:
		return fmt.Errorf("BackoffFactor %v (want a factor in (0, 1))", o.BackoffFactor)
	case o.GrowthInterval < 0:
		return fmt.Errorf("GrowthInterval %d (want >= 1)", o.GrowthInterval)
	}
	return nil
}

// GradScaler scales the loss so float16 gradients keep their small values,
// and skips optimizer steps whose gradients overflowed. One scaler serves
// several optimizers stepping in one iteration (a GAN's discriminator and
// generator), as PyTorch's does: each optimizer is unscaled once and skips
// its step on its own inf/nan record, and Update, once per iteration,
// backs off when any of them found one.
type GradScaler struct {
	opts    ScalerOptions
	device  torch.Device
	scale   *torch.Tensor // float32, 0-d, on device
	tracker *torch.Tensor // int32, 0-d: successful steps since the last change
	// per iteration, per optimizer (in the order first seen)
	states []*optState
	// Skipped counts optimizer steps skipped for inf/nan gradients.
	Skipped int
}

// optState is an optimizer's record since the last Update.
type optState struct {
	opt      Optimizer
	foundInf *torch.Tensor // float32 0-d, set by Unscale
	unscaled bool
	stepped  bool
}

// state returns opt's record, made on first use. The scaler tells
// optimizers apart as PyTorch's does by id(optimizer): here by ==, so an
// optimizer whose type cannot be compared (a slice or map type, a struct
// holding one) panics with a *torch.Error naming the type, rather than
// with Go's runtime error at the comparison. A pointer is what to pass.
func (s *GradScaler) state(opt Optimizer) *optState {
	if st := s.find(opt); st != nil {
		return st
	}
	// Only comparable optimizers get a record, so find never compares two
	// values of a type that == would panic on.
	if t := reflect.TypeOf(opt); t == nil || !t.Comparable() {
		panic(&torch.Error{Op: "GradScaler", Msg: fmt.Sprintf("an optimizer of type %v cannot be told apart from another (not comparable): pass a pointer", t)})
	}
	st := &optState{opt: opt}
	s.states = append(s.states, st)
	return st
}

// find returns opt's record, nil when it has none.
func (s *GradScaler) find(opt Optimizer) *optState {
	for _, st := range s.states {
		if st.opt == opt {
			return st
		}
	}
	return nil
}

// NewGradScaler returns a scaler for gradients on device. Options PyTorch
// would refuse or that cannot work (a scale that is not finite and
// positive, a growth factor not above 1, a backoff factor outside (0, 1),
// a negative growth interval) panic with a *torch.Error, as a bad argument
// to tensor math does.
func NewGradScaler(device torch.Device, o ScalerOptions) *GradScaler {
	if err := o.check(); err != nil {
		panic(&torch.Error{Op: "NewGradScaler", Msg: err.Error()})
	}
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

// Enabled reports whether the scaler scales (a nil scaler does not).
func (s *GradScaler) Enabled() bool { return s != nil && !s.opts.Disabled }

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
	if !s.Enabled() {
		return loss
	}
	return loss.Mul(s.scale.ToDType(loss.DType()))
}

// Unscale divides the gradients of opt's parameters by the scale in place
// and records whether any is inf or nan. Call it at most once per optimizer
// per iteration, before clipping; Step calls it when you did not.
func (s *GradScaler) Unscale(opt Optimizer) {
	if s.opts.Disabled {
		return
	}
	st := s.state(opt)
	if st.unscaled {
		panic(&torch.Error{Op: "GradScaler.Unscale", Msg: "Unscale already called for this optimizer since the last Update"})
	}
	if st.stepped {
		panic(&torch.Error{Op: "GradScaler.Unscale", Msg: "Unscale after Step for this optimizer"})
	}
	st.unscaled = true
	var grads []*torch.Tensor
	for _, p := range opt.Parameters() {
		if g := p.Grad(); g != nil {
			grads = append(grads, g)
		}
	}
	torch.NoGrad(func() {
		inv := s.scale.Reciprocal().Keep()
		defer inv.Free()
		st.foundInf = unscaleGrads(grads, inv, s.device).Keep()
	})
	for _, g := range grads {
		g.Free()
	}
}

// Step unscales (when Unscale was not called for opt) and runs opt.Step
// unless one of opt's gradients was inf or nan. It reports whether the step
// ran.
func (s *GradScaler) Step(opt Optimizer) bool {
	if s.opts.Disabled {
		opt.Step()
		return true
	}
	st := s.state(opt)
	if st.stepped {
		panic(&torch.Error{Op: "GradScaler.Step", Msg: "Step already called for this optimizer since the last Update"})
	}
	if !st.unscaled {
		s.Unscale(opt)
	}
	st.stepped = true
	if st.foundInf.Item() != 0 {
		s.Skipped++
		return false
	}
	opt.Step()
	return true
}

// FoundInf is the 0-d float32 tensor Unscale recorded for opt since the
// last Update, 1 when one of opt's gradients was inf or nan (nil before
// Unscale, and when disabled). It stays on the device: a step that must
// not read it (one captured in a CUDA graph) gives it to an optimizer
// kernel that skips the update there (cudagraph.AdamW.StepUnlessInf,
// PyTorch's fused Adam with found_inf) instead of calling Step; Update
// counts it, Skipped does not.
func (s *GradScaler) FoundInf(opt Optimizer) *torch.Tensor {
	if !s.Enabled() {
		return nil
	}
	if st := s.find(opt); st != nil {
		return st.foundInf
	}
	return nil
}

// Update adapts the scale once per iteration, after every optimizer's
// Step: back off when any optimizer's gradients were inf or nan, grow after
// GrowthInterval clean iterations in a row.
func (s *GradScaler) Update() {
	if s.opts.Disabled {
		return
	}
	torch.NoGrad(func() {
		torch.Tidy(func() {
			found := torch.Zeros([]int64{}, torch.Float32, s.device)
			for _, st := range s.states {
				if st.foundInf != nil {
					found = found.Add(st.foundInf)
				}
			}
			updateScale(s.scale, s.tracker, found, s.opts.GrowthFactor, s.opts.BackoffFactor, s.opts.GrowthInterval)
		})
	})
	s.Reset()
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

// LoadState restores State's values. A scale that is not finite and
// positive, or a growth tracker that is not a count (a whole number >= 0),
// is an error and changes nothing.
func (s *GradScaler) LoadState(st map[string]float64) error {
	if s.opts.Disabled {
		return nil
	}
	scale, ok1 := st["scale"]
	tr, ok2 := st["growth_tracker"]
	if !ok1 || !ok2 {
		return fmt.Errorf("amp: scaler state lacks scale or growth_tracker")
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) || scale <= 0 {
		return fmt.Errorf("amp: scaler state: scale %v (want a finite scale > 0)", scale)
	}
	if tr < 0 || tr != math.Trunc(tr) || tr > math.MaxInt32 {
		return fmt.Errorf("amp: scaler state: growth_tracker %v (want a whole number >= 0)", tr)
	}
	torch.NoGrad(func() {
		s.scale.FillIn(scale)
		s.tracker.FillIn(tr)
	})
	return nil
}

// Free releases the scaler's tensors (the scale, the growth tracker and
// the current iteration's records). The scaler is unusable afterwards.
func (s *GradScaler) Free() {
	if s == nil {
		return
	}
	s.Reset()
	s.scale.Free()
	s.tracker.Free()
}

// Reset abandons the current iteration (after an out-of-memory error, say):
// every optimizer's unscaled/stepped flags and inf record are dropped; the
// scale and growth tracker are kept.
func (s *GradScaler) Reset() {
	for _, st := range s.states {
		st.foundInf.Free()
	}
	s.states = nil
}

// ResetOptimizer abandons opt's part of the current iteration only (the
// other optimizers' records stay).
func (s *GradScaler) ResetOptimizer(opt Optimizer) {
	st := s.find(opt)
	if st == nil {
		return
	}
	st.foundInf.Free()
	for k := range s.states {
		if s.states[k] == st {
			s.states = append(s.states[:k], s.states[k+1:]...)
			return
		}
	}
}
