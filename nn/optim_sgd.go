package nn

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
)

// SGDConfig configures SGD; the zero value of each field is PyTorch's
// default (LR has none: set it).
type SGDConfig struct {
	LR          float64
	Momentum    float64
	Dampening   float64
	WeightDecay float64
	Nesterov    bool
	Maximize    bool
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and (L2, coupled) weight decay, exactly as
// torch.optim.SGD (1.13, single-tensor path):
//
//	d = grad (+ weight_decay·p)
//	buf = d                                  first step
//	buf = momentum·buf + (1−dampening)·d     later steps
//	d = d + momentum·buf (Nesterov) or buf
//	p -= lr·d
//
// State: "state.<param>.momentum_buffer" when momentum is not 0.
type SGD struct{ optimBase }

var _ Optimizer = (*SGD)(nil)

// NewSGD returns SGD over params in one group.
func NewSGD(params []Named, cfg SGDConfig) *SGD {
	return NewSGDGroups([]ParamGroup{{Params: params}}, cfg)
}

// NewSGDGroups returns SGD over parameter groups; a group's LR and
// WeightDecay override cfg's. Invalid hyperparameters panic.
func NewSGDGroups(groups []ParamGroup, cfg SGDConfig) *SGD {
	if err := sgdErr(&Group{Momentum: cfg.Momentum, Dampening: cfg.Dampening}); err != nil {
		panic(invalid("SGD: %v", err))
	}
	if cfg.Nesterov && (cfg.Momentum <= 0 || cfg.Dampening != 0) {
		panic(invalid("SGD: Nesterov momentum requires a momentum and zero dampening"))
	}
	o := &SGD{newOptimBase("SGD", groups, cfg.LR, cfg.WeightDecay, func(g *Group) {
		g.Momentum, g.Dampening, g.Nesterov, g.Maximize = cfg.Momentum, cfg.Dampening, cfg.Nesterov, cfg.Maximize
	})}
	o.hypers = []optimHyper{hyperLR, hyperInitialLR, hyperWeightDecay, hyperMomentum, hyperDampening, hyperNesterov, hyperMaximize}
	o.bufKeys = []string{"momentum_buffer"}
	return o
}

// sgdErr says why a group's momentum or dampening cannot make an SGD
// step (nil when they can): the constructor's check and Step's.
func sgdErr(g *Group) error {
	if !finiteNonNegative(g.Momentum) || !finiteNonNegative(g.Dampening) {
		return fmt.Errorf("invalid momentum %v or dampening %v", g.Momentum, g.Dampening)
	}
	return nil
}

// Step applies one SGD update.
func (o *SGD) Step() {
	o.checkGroups(sgdErr)
	o.forEach(func(g *Group, p, grad *torch.Tensor, st *optimParamState) {
		d := grad
		if g.Maximize {
			d = d.Neg()
		}
		if g.WeightDecay != 0 {
			d = d.AddScaled(p, g.WeightDecay)
		}
		if g.Momentum != 0 {
			buf := st.bufs["momentum_buffer"]
			if buf == nil {
				buf = d.Clone().Keep()
				st.bufs["momentum_buffer"] = buf
			} else {
				buf.MulScalarIn(g.Momentum).AddIn(d, 1-g.Dampening)
			}
			if g.Nesterov {
				d = d.AddScaled(buf, g.Momentum)
			} else {
				d = buf
			}
		}
		p.AddIn(d, -g.LR)
	})
}
