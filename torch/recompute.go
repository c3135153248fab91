package torch

import (
	"fmt"
	"slices"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// Recompute is activation checkpointing (torch.utils.checkpoint): it runs
// fn on inputs without keeping the activations inside it:
// backward recomputes them (with the forward's RNG state, so dropout
// matches, and its autocast state) and backpropagates through fn. Parameters
// fn uses receive their gradients like any others. This trades compute for
// memory: one extra forward of fn per backward.
//
// Under autocast the first run caches no low-precision weight copy
// (torch.autocast keeps a parameter's cast until its region ends, which
// here would hold every region's casts through the rest of the forward,
// and under libtorch 1.13 hand a backward run inside the region casts
// made without gradient history); the recomputation casts again.
//
// fn must be a pure function of its inputs and the tensors it captures
// (parameters); it runs twice. Intermediates it creates are released as soon
// as each run ends. Under NoGrad fn simply runs once.
//
// With gradients recorded, every output must be a tensor (a nil one panics
// with *Error), and the recomputation must return what the first run did:
// an output of another shape or dtype fails the backward with an *Error
// rather than backpropagating a gradient that does not fit it.
func Recompute(fn func(inputs []*Tensor) []*Tensor, inputs ...*Tensor) []*Tensor {
	if fn == nil {
		throwf("Recompute", "nil function")
	}
	hs := make([]capi.Tensor, len(inputs))
	for k, t := range inputs {
		hs[k] = t.handle("Recompute")
	}
	grad := GradEnabled()
	var first []outMeta // the first run's outputs; nil before it
	run := func(in []capi.Tensor) (outs []capi.Tensor, err error) {
		err = TidyErr(func() error {
			ts := make([]*Tensor, len(in))
			for k, h := range in {
				c, e := capi.CloneHandle(h)
				check("Recompute", e)
				ts[k] = wrapNew(c)
			}
			rs := fn(ts)
			meta := make([]outMeta, len(rs))
			for k, r := range rs {
				if r == nil {
					if grad {
						// Plain errors: the message reaches the caller
						// through libtorch, which Recompute's *Error names.
						return fmt.Errorf("output %d is a nil *Tensor; with gradients recorded every output must be a tensor", k)
					}
					continue
				}
				meta[k] = outMeta{shape: r.Shape(), dtype: r.DType(), ok: true}
			}
			if first == nil {
				first = meta
			} else if err := sameOutputs(first, meta); err != nil {
				return err
			}
			for _, r := range rs {
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

// outMeta is what Recompute checks of an output across runs.
type outMeta struct {
	shape []int64
	dtype DType
	ok    bool // not nil
}

// sameOutputs reports how the recomputation's outputs (now) differ from
// the first run's (was); nil when they agree.
func sameOutputs(was, now []outMeta) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("the recomputation differs from the first run (fn must be a pure function of its inputs): "+format, args...)
	}
	if len(was) != len(now) {
		return bad("%d outputs, then %d", len(was), len(now))
	}
	for k := range was {
		w, n := was[k], now[k]
		switch {
		case w.ok != n.ok:
			return bad("output %d nil in one run only", k)
		case !slices.Equal(w.shape, n.shape):
			return bad("output %d has shape %v, then %v", k, w.shape, n.shape)
		case w.dtype != n.dtype:
			return bad("output %d has dtype %v, then %v", k, w.dtype, n.dtype)
		}
	}
	return nil
}

// RecomputesLive returns how many recomputed regions still hold their Go
// function (released with their autograd graph).
func RecomputesLive() int { return capi.CheckpointsLive() }
