package nn

import (
	"fmt"
	"math"
	"sync"

	"github.com/torchfit/torchfit/torch"
)

// AdamConfig configures Adam and AdamW. Leaving Beta1, Beta2 and Eps all
// zero selects PyTorch's defaults (0.9, 0.999, 1e-8); set any of them and
// all three are taken as given.
type AdamConfig struct {
	LR           float64
	Beta1, Beta2 float64
	Eps          float64
	// WeightDecay is L2 regularisation added to the gradient for Adam, and
	// decoupled decay (p ← p·(1 − lr·wd)) for AdamW, whose PyTorch default
	// is 0.01 (AdamWDefaults).
	WeightDecay float64
	AMSGrad     bool
	Maximize    bool
}

// AdamDefaults returns PyTorch's Adam defaults with learning rate lr.
func AdamDefaults(lr float64) AdamConfig {
	return AdamConfig{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

// AdamWDefaults returns PyTorch's AdamW defaults (weight decay 0.01).
func AdamWDefaults(lr float64) AdamConfig {
	c := AdamDefaults(lr)
	c.WeightDecay = 0.01
	return c
}

// Adam is Adam or AdamW (NewAdamW), exactly as torch.optim.Adam/AdamW
// (single-tensor path) of the PyTorch of the loaded libtorch, with bias
// correction and the step counted in float32 as PyTorch does:
//
//	step += 1
//	g = grad (+ weight_decay·p for Adam) ; p *= 1 − lr·weight_decay for AdamW
//	m = β1·m + (1−β1)·g                      1.13, 2.0: m.mul_(β1).add_(g, alpha=1−β1)
//	                                         2.1 and later: m.lerp_(g, 1−β1)
//	v = β2·v + (1−β2)·g·g
//	vmax = max(vmax, v)                      AMSGrad
//	denom = sqrt(v or vmax)/sqrt(1−β2^step) + eps
//	p -= lr/(1−β1^step) · m/denom
//
// State: "state.<param>.step" (0-d float32), ".exp_avg", ".exp_avg_sq",
// and ".max_exp_avg_sq" with AMSGrad.
type Adam struct {
	optimBase
	decoupled bool
}

var _ Optimizer = (*Adam)(nil)

// NewAdam returns Adam over params in one group.
func NewAdam(params []Named, cfg AdamConfig) *Adam {
	return NewAdamGroups([]ParamGroup{{Params: params}}, cfg)
}

// NewAdamGroups returns Adam over parameter groups; a group's LR and
// WeightDecay override cfg's. Invalid hyperparameters panic.
func NewAdamGroups(groups []ParamGroup, cfg AdamConfig) *Adam {
	return newAdam("Adam", groups, cfg, false)
}

// NewAdamW returns AdamW (decoupled weight decay) over params in one group.
func NewAdamW(params []Named, cfg AdamConfig) *Adam {
	return NewAdamWGroups([]ParamGroup{{Params: params}}, cfg)
}

// NewAdamWGroups returns AdamW over parameter groups.
func NewAdamWGroups(groups []ParamGroup, cfg AdamConfig) *Adam {
	return newAdam("AdamW", groups, cfg, true)
}

// adamErr says why a group's betas or eps cannot make an Adam step (nil
// when they can): the constructor's check and Step's.
func adamErr(g *Group) error {
	if !(g.Beta1 >= 0 && g.Beta1 < 1) || !(g.Beta2 >= 0 && g.Beta2 < 1) || !finiteNonNegative(g.Eps) {
		return fmt.Errorf("invalid betas (%v, %v) or eps %v", g.Beta1, g.Beta2, g.Eps)
	}
	return nil
}

func newAdam(kind string, groups []ParamGroup, cfg AdamConfig, decoupled bool) *Adam {
	if cfg.Beta1 == 0 && cfg.Beta2 == 0 && cfg.Eps == 0 {
		d := AdamDefaults(0)
		cfg.Beta1, cfg.Beta2, cfg.Eps = d.Beta1, d.Beta2, d.Eps
	}
	if err := adamErr(&Group{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps}); err != nil {
		panic(invalid("%s: %v", kind, err))
	}
	o := &Adam{decoupled: decoupled}
	o.optimBase = newOptimBase(kind, groups, cfg.LR, cfg.WeightDecay, func(g *Group) {
		g.Beta1, g.Beta2, g.Eps, g.AMSGrad, g.Maximize = cfg.Beta1, cfg.Beta2, cfg.Eps, cfg.AMSGrad, cfg.Maximize
	})
	o.hypers = []optimHyper{hyperLR, hyperInitialLR, hyperWeightDecay, hyperBeta1, hyperBeta2, hyperEps, hyperAMSGrad, hyperMaximize}
	o.bufKeys = []string{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
	o.required = []string{"exp_avg", "exp_avg_sq"}
	o.hasStep = true
	return o
}

// Step applies one Adam (AdamW) update. With fused optimizers on (the
// default, SetFusedOptimizers):
//   - parameters on CUDA (libtorch 2.1 and later) go through libtorch's
//     fused kernel, _fused_adam_ or _fused_adamw_, one launch per group,
//     device and dtype, as torch.optim.Adam(fused=True) does; it agrees
//     with the ops below to float32 rounding;
//   - dense contiguous float32 CPU tensors go through one native call over
//     all parameters (torch.AdamStep), computing what the ops below compute
//     with the same float32 roundings.
//
// Otherwise it runs the ops parameter by parameter, as PyTorch's default
// single-tensor path does.
func (o *Adam) Step() {
	o.checkGroups(adamErr)
	if fusedOptimizers.Load() && (o.libtorchStep() || o.fusedStep()) {
		return
	}
	lerp := adamLerp()
	o.forEach(func(g *Group, p, grad *torch.Tensor, st *optimParamState) {
		m, v := st.bufs["exp_avg"], st.bufs["exp_avg_sq"]
		if m == nil {
			m, v = optimZeros(p), optimZeros(p)
			st.bufs["exp_avg"], st.bufs["exp_avg_sq"] = m, v
		}
		if g.Maximize {
			grad = grad.Neg()
		}
		st.step++
		step := float64(st.step)
		if o.decoupled {
			if g.WeightDecay != 0 {
				p.MulScalarIn(1 - g.LR*g.WeightDecay)
			}
		} else if g.WeightDecay != 0 {
			grad = grad.AddScaled(p, g.WeightDecay)
		}
		if lerp {
			m.LerpIn(grad, 1-g.Beta1)
		} else {
			m.MulScalarIn(g.Beta1).AddIn(grad, 1-g.Beta1)
		}
		v.MulScalarIn(g.Beta2).AddcmulIn(grad, grad, 1-g.Beta2)

		bc1 := 1 - math.Pow(g.Beta1, step)
		bc2 := 1 - math.Pow(g.Beta2, step)
		stepSize := g.LR / bc1
		bc2Sqrt := math.Sqrt(bc2)

		src := v
		if g.AMSGrad {
			vmax := st.bufs["max_exp_avg_sq"]
			if vmax == nil {
				vmax = optimZeros(p)
				st.bufs["max_exp_avg_sq"] = vmax
			}
			vmax.CopyFrom(vmax.Maximum(v))
			src = vmax
		}
		denom := src.Sqrt().DivScalarIn(bc2Sqrt).AddScalarIn(g.Eps)
		p.AddcdivIn(m, denom, -stepSize)
	})
}

// adamLerp reports whether the PyTorch of the loaded libtorch updates
// Adam's first moment with exp_avg.lerp_(grad, 1 − β1) (2.1 and later,
// pytorch/pytorch#104796) rather than exp_avg.mul_(β1).add_(grad,
// alpha=1 − β1) (1.13, 2.0). ATen's lerp rounds once, fma(1−β1, g − m, m),
// where mul_ then add_ round m·β1 first. Tests replace it to run either
// formula on one libtorch.
var adamLerp = sync.OnceValue(func() bool {
	maj, min, _ := torch.LibtorchVersion()
	return maj > 2 || maj == 2 && min >= 1
})

// fusedStep runs the step with torch.AdamStep; false when it does not
// apply (nothing changed then).
func (o *Adam) fusedStep() bool {
	var params, ms, vs, vmaxs []*torch.Tensor
	var hs []torch.AdamHyper
	var states []*optimParamState
	ok := true
	amsgrad, lerp := false, adamLerp()
	for _, g := range o.groups {
		if g.AMSGrad {
			amsgrad = true
		}
	}
	torch.NoGrad(func() {
		torch.Tidy(func() {
			for _, g := range o.groups {
				for _, p := range g.Params {
					st := o.state[p.T]
					if st == nil {
						// State is created for a parameter once it has a
						// gradient, as PyTorch does.
						grad := p.T.Grad()
						if grad == nil {
							continue
						}
						st = &optimParamState{bufs: map[string]*torch.Tensor{}}
						o.state[p.T] = st
					}
					m, v := st.bufs["exp_avg"], st.bufs["exp_avg_sq"]
					if m == nil {
						m, v = optimZeros(p.T), optimZeros(p.T)
						st.bufs["exp_avg"], st.bufs["exp_avg_sq"] = m, v
					}
					if amsgrad {
						vm := st.bufs["max_exp_avg_sq"]
						if vm == nil && g.AMSGrad {
							vm = optimZeros(p.T)
							st.bufs["max_exp_avg_sq"] = vm
						}
						if vm == nil { // a group without AMSGrad beside one with it
							ok = false
							return
						}
						vmaxs = append(vmaxs, vm)
					}
					step := float64(st.step + 1) // PyTorch counts in float32
					h := torch.AdamHyper{Beta1: g.Beta1, Beta2: g.Beta2, Eps: g.Eps, Decay: 1, Maximize: g.Maximize, Lerp: lerp,
						StepSize: g.LR / (1 - math.Pow(g.Beta1, step)), BC2Sqrt: math.Sqrt(1 - math.Pow(g.Beta2, step))}
					if o.decoupled {
						if g.WeightDecay != 0 {
							h.Decay = 1 - g.LR*g.WeightDecay
						}
					} else {
						h.WD = g.WeightDecay
					}
					params, ms, vs, hs, states = append(params, p.T), append(ms, m), append(vs, v), append(hs, h), append(states, st)
				}
			}
		})
	})
	if !ok {
		return false
	}
	if amsgrad && len(vmaxs) != len(params) {
		return false
	}
	var applied []bool
	applied, ok = torch.AdamStep(params, ms, vs, vmaxs, hs)
	if !ok {
		return false
	}
	for k, a := range applied {
		if a {
			states[k].step++
		}
	}
	return true
}
