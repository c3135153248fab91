package nn

import (
	"errors"
	"fmt"
	"math"

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
// The scale is PyTorch's, computed the same way in the gradients' dtype:
// min(1, maxNorm/(total+1e-6)); when it is exactly 1 the gradients are not
// touched. The norm costs one op per gradient plus one, and one host sync.
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
				var grads []*torch.Tensor
				for _, p := range params {
					if g := p.Grad(); g != nil {
						grads = append(grads, g)
					}
				}
				if len(grads) == 0 {
					return
				}
				dev := grads[0].Device()
				norms := make([]*torch.Tensor, len(grads))
				for k, g := range grads {
					n := g.Norm(normType)
					if n.Device() != dev {
						n = n.ToDevice(dev)
					}
					norms[k] = n
				}
				total := torch.Stack(norms, 0).Norm(normType)
				totalNorm = total.Item()
				if math.IsNaN(totalNorm) || math.IsInf(totalNorm, 0) {
					return
				}
				// Skip the multiply when the clamped coefficient is surely 1.
				if maxNorm/(totalNorm+1e-6) > 1+1e-4 {
					return
				}
				// PyTorch: max_norm / (total + 1e-6) is reciprocal()*max_norm.
				coef := total.AddScalar(1e-6).Reciprocal().MulScalar(maxNorm).ClampMax(1)
				for _, g := range grads {
					c := coef
					if d := g.Device(); d != dev {
						c = coef.ToDevice(d)
					}
					g.MulIn(c)
				}
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
