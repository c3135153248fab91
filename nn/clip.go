package nn

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/torchfit/torchfit/torch"
)

// ErrNonFiniteNorm is returned (wrapped) by ClipGradNorm when the total
// gradient norm is inf or nan.
var ErrNonFiniteNorm = errors.New("non-finite gradient norm")

// ClipGradNorm scales the gradients of params in place so that their total
// normType-norm (over all gradients together, as one vector) is at most
// maxNorm, like torch.nn.utils.clip_grad_norm_, and returns the total norm
// before clipping. Parameters without a gradient are skipped; with none at
// all the norm is 0. normType may be math.Inf(1) (largest |element|).
//
// It computes what PyTorch 2.x's clip_grad_norm_ computes, the same way:
// the gradients are grouped by device and dtype, each group's norms come
// from one _foreach_norm call (on CUDA a handful of kernel launches for
// the whole model instead of one per gradient: a small model's step is
// bound by launches), and the total is the norm of their stack. The scale
// min(1, maxNorm/(total+1e-6)) is computed on the device in the norm's
// dtype, and each group is multiplied by it with one _foreach_mul_ (on
// libtorch 2.1 and later; before, one mul_ per gradient, as 1.13's
// clip_grad_norm_ does). When the scale is surely 1 the gradients are not
// touched. Reading the total costs one host sync.
//
// A non-finite total norm (an inf or nan gradient) is not hidden: it is
// returned together with an error wrapping ErrNonFiniteNorm, and the
// gradients are left unchanged (PyTorch, by default, would scale them by
// 0 or nan). Callers usually skip that optimizer step. Tensor errors are
// returned as *torch.Error.
func ClipGradNorm(params []*torch.Tensor, maxNorm, normType float64) (totalNorm float64, err error) {
	if !(maxNorm >= 0) || math.IsNaN(normType) {
		return 0, fmt.Errorf("nn: ClipGradNorm: invalid max norm %v or norm type %v", maxNorm, normType)
	}
	err = torch.Try(func() {
		torch.Tidy(func() {
			torch.NoGrad(func() {
				groups := gradGroups(params)
				if len(groups) == 0 {
					return
				}
				total := totalGradNorm(groups, normType)
				totalNorm = total.Item()
				if math.IsNaN(totalNorm) || math.IsInf(totalNorm, 0) {
					return
				}
				// Skip the multiply when the clamped coefficient is surely 1.
				if maxNorm/(totalNorm+1e-6) > 1+1e-4 {
					return
				}
				scaleGrads(groups, total, maxNorm)
			})
		})
	})
	if err != nil {
		return 0, err
	}
	if math.IsNaN(totalNorm) || math.IsInf(totalNorm, 0) {
		return totalNorm, fmt.Errorf("nn: ClipGradNorm: %w (%v); gradients left unchanged", ErrNonFiniteNorm, totalNorm)
	}
	return totalNorm, nil
}

// ClipGradNormOnDevice clips as ClipGradNorm does, with PyTorch's
// clip_grad_norm_ defaults, without reading anything on the host: the
// total norm stays a device tensor (returned; the caller owns it, nil when
// no parameter has a gradient) and every gradient is multiplied by
// min(1, maxNorm/(total+1e-6)), which is exactly 1 when nothing is
// clipped. With no host synchronisation it can run inside a captured CUDA
// graph (package cudagraph) and never stalls an eager step on a GPU. A
// non-finite norm is not caught: the gradients are scaled by nan or 0, as
// PyTorch's are (error_if_nonfinite=False); check the returned norm where
// that matters.
func ClipGradNormOnDevice(params []*torch.Tensor, maxNorm, normType float64) (total *torch.Tensor, err error) {
	if !(maxNorm >= 0) || math.IsNaN(normType) {
		return nil, fmt.Errorf("nn: ClipGradNormOnDevice: invalid max norm %v or norm type %v", maxNorm, normType)
	}
	err = torch.Try(func() {
		total = torch.TidyTensor(func() *torch.Tensor {
			var t *torch.Tensor
			torch.NoGrad(func() {
				groups := gradGroups(params)
				if len(groups) == 0 {
					return
				}
				t = totalGradNorm(groups, normType)
				scaleGrads(groups, t, maxNorm)
			})
			return t
		})
	})
	if err != nil {
		return nil, err
	}
	return total, nil
}

// totalGradNorm is the normType-norm of every gradient of groups together,
// on the first group's device: one _foreach_norm per group, then the norm
// of the stacked norms (PyTorch's _get_total_norm).
func totalGradNorm(groups []*gradGroup, normType float64) *torch.Tensor {
	dev := groups[0].dev
	var norms []*torch.Tensor
	for _, g := range groups {
		for _, n := range torch.CallOp("aten::_foreach_norm", "Scalar", g.grads, normType)[0].([]*torch.Tensor) {
			if g.dev != dev {
				n = n.ToDevice(dev)
			}
			norms = append(norms, n)
		}
	}
	return torch.Stack(norms, 0).Norm(normType)
}

// scaleGrads multiplies every gradient of groups by min(1, maxNorm/(total
// + 1e-6)), computed on the device in total's dtype (PyTorch's
// _clip_grads_with_norm_: max_norm / (total + 1e-6) as reciprocal()·max_norm,
// clamped), one _foreach_mul_ per group where libtorch has the Tensor
// overload, one mul_ per gradient before.
func scaleGrads(groups []*gradGroup, total *torch.Tensor, maxNorm float64) {
	dev := groups[0].dev
	coef := total.AddScalar(1e-6).Reciprocal().MulScalar(maxNorm).ClampMax(1)
	for _, g := range groups {
		c := coef
		if g.dev != dev {
			c = coef.ToDevice(g.dev)
		}
		if foreachMulTensor() {
			torch.CallOp("aten::_foreach_mul_", "Tensor", g.grads, c)
			continue
		}
		for _, t := range g.grads {
			t.MulIn(c)
		}
	}
}

// gradGroup is the gradients of one device and dtype, in params' order.
type gradGroup struct {
	dev   torch.Device
	dt    torch.DType
	grads []*torch.Tensor
}

// gradGroups returns the gradients of params grouped by device and dtype,
// the groups in the order of their first gradient (PyTorch's
// _group_tensors_by_device_and_dtype). The gradients belong to the
// enclosing Tidy scope.
func gradGroups(params []*torch.Tensor) []*gradGroup {
	var out []*gradGroup
	for _, p := range params {
		grad := p.Grad()
		if grad == nil {
			continue
		}
		dev, dt := grad.Device(), grad.DType()
		var g *gradGroup
		for _, h := range out {
			if h.dev == dev && h.dt == dt {
				g = h
				break
			}
		}
		if g == nil {
			g = &gradGroup{dev: dev, dt: dt}
			out = append(out, g)
		}
		g.grads = append(g.grads, grad)
	}
	return out
}

// foreachMulTensor reports whether libtorch has _foreach_mul_.Tensor (a
// list times one tensor; 2.1 and later), which ClipGradNorm scales each
// group with; without it, each gradient is scaled by its own mul_. Tests
// replace it to force either path.
var foreachMulTensor = sync.OnceValue(func() bool {
	_, err := torch.OpSchema("aten::_foreach_mul_", "Tensor")
	return err == nil
})

// ClipGradValue clamps every gradient of params to [-clip, clip] in place,
// like torch.nn.utils.clip_grad_value_. Parameters without a gradient are
// skipped. Tensor errors panic with *torch.Error.
func ClipGradValue(params []*torch.Tensor, clip float64) {
	torch.Tidy(func() {
		torch.NoGrad(func() {
			for _, p := range params {
				if g := p.Grad(); g != nil {
					g.ClampIn(-clip, clip)
				}
			}
		})
	})
}
