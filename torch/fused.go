package torch

import (
	"runtime"

	"github.com/torchfit/torchfit/torch/internal/capi"
	"github.com/torchfit/torchfit/torch/internal/fused"
)

// AdamHyper is one parameter's hyperparameters for AdamStep, as
// torch.optim.Adam/AdamW computes them in double for the step: Decay =
// 1 − lr·weight_decay (AdamW; 1: none), WD the weight decay added to the
// gradient (Adam; 0: none), StepSize = lr / (1 − β1^step), BC2Sqrt =
// √(1 − β2^step). Lerp picks the first-moment update of PyTorch 2.1 and
// later, exp_avg.lerp_(grad, 1 − β1); false picks 1.13's (and 2.0's)
// exp_avg.mul_(β1).add_(grad, alpha=1 − β1). The two round differently.
type AdamHyper struct {
	Decay, WD         float64
	Beta1, Beta2, Eps float64
	StepSize, BC2Sqrt float64
	Maximize          bool
	Lerp              bool
}

// AdamStep applies one Adam/AdamW step to every parameter that has a
// gradient in one native call (the work split over libtorch's threads):
// each element goes through the float32 operations of PyTorch's
// single-tensor loop, in its order and with its roundings, in two
// vectorised passes over blocks of memory with libtorch's sqrt between
// them, instead of nine ops per parameter. maxExpAvgSq is nil
// without AMSGrad. It returns which parameters had a gradient and were
// updated, and ok false — nothing changed — when some tensor is not a
// dense, contiguous float32 CPU tensor (the caller then runs the ops).
func AdamStep(params, expAvg, expAvgSq, maxExpAvgSq []*Tensor, h []AdamHyper) (applied []bool, ok bool) {
	n := len(params)
	if len(expAvg) != n || len(expAvgSq) != n || len(h) != n || (maxExpAvgSq != nil && len(maxExpAvgSq) != n) {
		throwf("AdamStep", "%d parameters, %d exp_avg, %d exp_avg_sq, %d max_exp_avg_sq, %d hyperparameters",
			n, len(expAvg), len(expAvgSq), len(maxExpAvgSq), len(h))
	}
	handles := func(ts []*Tensor) []capi.Tensor {
		if ts == nil {
			return nil
		}
		hs := make([]capi.Tensor, len(ts))
		for k, t := range ts {
			hs[k] = t.handle("AdamStep")
		}
		return hs
	}
	fh := make([]fused.AdamHyper, n)
	for k, x := range h {
		fh[k] = fused.AdamHyper{Decay: x.Decay, WD: x.WD, Beta1: x.Beta1, Beta2: x.Beta2, Eps: x.Eps,
			StepSize: x.StepSize, BC2Sqrt: x.BC2Sqrt}
		if x.Maximize {
			fh[k].Maximize = 1
		}
		if x.Lerp {
			fh[k].Lerp = 1
		}
	}
	flags := make([]int32, max(n, 1))
	ok, err := fused.Adam(handles(params), handles(expAvg), handles(expAvgSq), handles(maxExpAvgSq), fh, flags)
	runtime.KeepAlive(params)
	runtime.KeepAlive(expAvg)
	runtime.KeepAlive(expAvgSq)
	runtime.KeepAlive(maxExpAvgSq)
	if err != nil {
		panic(wrapErr("AdamStep", err))
	}
	applied = make([]bool, n)
	for k := range applied {
		applied[k] = flags[k] != 0
	}
	return applied, ok
}

// FusedKernel names the instruction set AdamStep's kernel uses: "avx512",
// "avx2" (with FMA) or "default", the best the CPU runs. All compute the
// same roundings.
func FusedKernel() string { return fused.Kernel() }

// ForceFusedKernel makes AdamStep use the kernel called name, for tests
// that run every kernel the CPU can run, and returns what puts the best
// one back. It fails when the CPU cannot run it.
func ForceFusedKernel(name string) (undo func(), err error) {
	if err := fused.ForceKernel(name); err != nil {
		return nil, &Error{Op: "ForceFusedKernel", Msg: err.Error(), wrapped: err}
	}
	return func() { fused.ForceKernel("") }, nil
}
