package cudagraph

import (
	"errors"
	"fmt"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// AdamW is a capturable AdamW: PyTorch's fused AdamW (libtorch's
// _fused_adamw_, torch.optim.AdamW(fused=True)), whose step counters are
// float32 device tensors that the step increments on the device
// (_foreach_add_) and the kernel reads there, so that a captured step
// replays with the right bias corrections. The learning rate is fixed at
// capture (a float argument of the kernel). State: exp_avg and exp_avg_sq
// per parameter, made at NewAdamW (zeros) so that none is made inside a
// capture.
//
// _fused_adamw_ exists from PyTorch 2.0 for CUDA and 2.4 for the CPU;
// Step on a libtorch without it returns the dispatcher's error.
type AdamW struct {
	groups            []adamGroup
	beta1, beta2, eps float64
	maximize          bool
}

type adamGroup struct {
	params, expAvg, expAvgSq, steps []*torch.Tensor
	lr, decay                       float64
}

// NewAdamW returns the capturable AdamW over groups, with cfg's
// hyperparameters (a group's LR and WeightDecay override cfg's; zero betas
// and eps take PyTorch's defaults, as nn.NewAdamW does). AMSGrad is not
// supported (ErrArg).
func NewAdamW(groups []nn.ParamGroup, cfg nn.AdamConfig) (*AdamW, error) {
	if cfg.AMSGrad {
		return nil, fmt.Errorf("%w: AdamW: AMSGrad is not supported", ErrArg)
	}
	if cfg.Beta1 == 0 && cfg.Beta2 == 0 && cfg.Eps == 0 {
		d := nn.AdamDefaults(cfg.LR)
		cfg.Beta1, cfg.Beta2, cfg.Eps = d.Beta1, d.Beta2, d.Eps
	}
	if !(cfg.Beta1 >= 0 && cfg.Beta1 < 1) || !(cfg.Beta2 >= 0 && cfg.Beta2 < 1) || !(cfg.Eps >= 0) || !(cfg.LR >= 0) {
		return nil, fmt.Errorf("%w: AdamW: lr %v, betas (%v, %v), eps %v", ErrArg, cfg.LR, cfg.Beta1, cfg.Beta2, cfg.Eps)
	}
	o := &AdamW{beta1: cfg.Beta1, beta2: cfg.Beta2, eps: cfg.Eps, maximize: cfg.Maximize}
	n := 0
	err := torch.Try(func() {
		torch.NoGrad(func() {
			for _, pg := range groups {
				g := adamGroup{lr: cfg.LR, decay: cfg.WeightDecay}
				if pg.LR != nil {
					g.lr = *pg.LR
				}
				if pg.WeightDecay != nil {
					g.decay = *pg.WeightDecay
				}
				for _, p := range pg.Params {
					if p.T == nil {
						panic(&torch.Error{Op: "AdamW", Msg: "nil parameter " + p.Name})
					}
					g.params = append(g.params, p.T)
					g.expAvg = append(g.expAvg, torch.ZerosLike(p.T).Keep())
					g.expAvgSq = append(g.expAvgSq, torch.ZerosLike(p.T).Keep())
					g.steps = append(g.steps, torch.Zeros([]int64{}, torch.Float32, p.T.Device()).Keep())
					n++
				}
				if len(g.params) > 0 {
					o.groups = append(o.groups, g)
				}
			}
		})
	})
	if err != nil {
		o.Free()
		return nil, fmt.Errorf("cudagraph: AdamW state: %w", err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: AdamW: no parameters", ErrArg)
	}
	return o, nil
}

// ErrNoGrad is a Step with a parameter that has no gradient: the fused
// kernel updates every parameter of a group, and a captured step must
// touch the same tensors at every replay.
var ErrNoGrad = errors.New("cudagraph: AdamW: a parameter has no gradient")

// Step applies one AdamW update to every parameter: the step counters + 1
// and _fused_adamw_ per group, all on the parameters' device. It
// synchronises nothing, so it can be captured.
func (o *AdamW) Step() error { return o.step(nil) }

// StepUnlessInf is Step unless foundInf (a 0-d float32 tensor on the
// parameters' device, amp.GradScaler.FoundInf) is 1: then the kernel
// changes no parameter and no state, and the step counters go back, on
// the device, as PyTorch's fused AdamW does under a GradScaler. The
// gradients must already be unscaled.
func (o *AdamW) StepUnlessInf(foundInf *torch.Tensor) error {
	if foundInf == nil {
		return fmt.Errorf("%w: AdamW: StepUnlessInf with no found_inf tensor", ErrArg)
	}
	return o.step(foundInf)
}

func (o *AdamW) step(foundInf *torch.Tensor) error {
	var missing string
	err := torch.Try(func() {
		torch.NoGrad(func() {
			torch.Tidy(func() {
				grads := make([][]*torch.Tensor, len(o.groups))
				for gi, g := range o.groups {
					grads[gi] = make([]*torch.Tensor, len(g.params))
					for k, p := range g.params {
						if grads[gi][k] = p.Grad(); grads[gi][k] == nil {
							missing = fmt.Sprintf("group %d, parameter %d", gi, k)
							return
						}
					}
				}
				for gi, g := range o.groups {
					torch.CallOp("aten::_foreach_add_", "Scalar", g.steps, 1.0)
					torch.CallOp("aten::_fused_adamw_", "", g.params, grads[gi], g.expAvg, g.expAvgSq, []*torch.Tensor{}, g.steps,
						g.lr, o.beta1, o.beta2, g.decay, o.eps, false, o.maximize, nil, foundInf) // grad_scale, found_inf (nil: None)
					if foundInf != nil {
						fs := make([]*torch.Tensor, len(g.steps))
						for k := range fs {
							fs[k] = foundInf
						}
						torch.CallOp("aten::_foreach_sub_", "List", g.steps, fs, 1.0)
					}
				}
			})
		})
	})
	if missing != "" {
		return fmt.Errorf("%w (%s)", ErrNoGrad, missing)
	}
	if err != nil {
		return fmt.Errorf("cudagraph: AdamW step (_foreach_add_, _fused_adamw_): %w", err)
	}
	return nil
}

// ZeroGrad sets every parameter's gradient to nil (PyTorch's
// zero_grad(set_to_none=True)): inside a captured step it makes the
// backward write the gradients rather than add to them.
func (o *AdamW) ZeroGrad() {
	for _, g := range o.groups {
		for _, p := range g.params {
			p.SetGrad(nil)
		}
	}
}

// StepCount reads the first parameter's step counter (a device-to-host
// copy: not inside a capture).
func (o *AdamW) StepCount() (float64, error) {
	var v float64
	err := torch.Try(func() { v = o.groups[0].steps[0].Item() })
	return v, err
}

// Free releases the optimizer's state.
func (o *AdamW) Free() {
	for _, g := range o.groups {
		for _, ts := range [][]*torch.Tensor{g.expAvg, g.expAvgSq, g.steps} {
			for _, t := range ts {
				t.Free()
			}
		}
	}
	o.groups = nil
}
