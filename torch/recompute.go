package torch

import (
	"github.com/torchfit/torchfit/torch/internal/capi"
)

// Recompute is activation checkpointing (torch.utils.checkpoint): it runs
// fn on inputs without keeping the activations inside it:
// backward recomputes them (with the forward's RNG state, so dropout
// matches, and its autocast state) and backpropagates through fn. Parameters
// fn uses receive their gradients like any others. This trades compute for
// memory: one extra forward of fn per backward.
//
// fn must be a pure function of its inputs and the tensors it captures
// (parameters); it runs twice. Intermediates it creates are released as soon
// as each run ends. Under NoGrad fn simply runs once.
func Recompute(fn func(inputs []*Tensor) []*Tensor, inputs ...*Tensor) []*Tensor {
	hs := make([]capi.Tensor, len(inputs))
	for k, t := range inputs {
		hs[k] = t.handle("Recompute")
	}
	run := func(in []capi.Tensor) (outs []capi.Tensor, err error) {
		err = TidyErr(func() error {
			ts := make([]*Tensor, len(in))
			for k, h := range in {
				c, e := capi.CloneHandle(h)
				check("Recompute", e)
				ts[k] = wrapNew(c)
			}
			for _, r := range fn(ts) {
				if r == nil {
					outs = append(outs, nil)
					continue
				}
				c, e := capi.CloneHandle(r.handle("Recompute"))
				check("Recompute", e)
				outs = append(outs, c)
			}
			return nil
		})
		return outs, err
	}
	res, err := capi.Checkpoint(run, hs)
	for _, t := range inputs {
		keepAlive(t)
	}
	check("Recompute", err)
	scope := capi.CurrentScope()
	out := make([]*Tensor, len(res))
	for k, h := range res {
		if h != nil {
			out[k] = newTensor(h, scope)
		}
	}
	return out
}

// RecomputesLive returns how many recomputed regions still hold their Go
// function (released with their autograd graph).
func RecomputesLive() int { return capi.CheckpointsLive() }
