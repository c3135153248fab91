package amp

import (
	"sync"
	"sync/atomic"

	"github.com/torchfit/torchfit/torch"
)

// unscaleGrads multiplies grads by inv in place and returns a 0-d float32
// tensor that is 1 when any gradient holds inf or nan. On CUDA it is
// libtorch's fused kernel; libtorch 1.13 has no CPU kernel for it, so the
// CPU runs the same arithmetic with ordinary ops.
func unscaleGrads(grads []*torch.Tensor, inv *torch.Tensor, device torch.Device) *torch.Tensor {
	found := torch.Zeros([]int64{}, torch.Float32, device)
	if len(grads) == 0 {
		return found
	}
	if device.IsCUDA() {
		torch.AmpUnscale(grads, found, inv)
		return found
	}
	torch.Tidy(func() {
		flags := make([]*torch.Tensor, len(grads))
		for k, g := range grads {
			flags[k] = g.IsFinite().LogicalNot().Any()
			g.MulIn(inv.ToDType(g.DType()))
		}
		found.CopyFrom(torch.Stack(flags, 0).Any())
	})
	return found
}

// hostUpdate makes updateScale take its host arithmetic on the CPU even
// where libtorch has a CPU kernel (tests force each path).
var hostUpdate atomic.Bool

// cpuUpdateKernel reports whether this libtorch has a CPU kernel for
// _amp_update_scale_ (2.11 has; 1.13's is CUDA's only), probed once on
// scratch tensors.
var cpuUpdateKernel = sync.OnceValue(func() bool {
	return torch.Try(func() {
		torch.Tidy(func() {
			torch.AmpUpdateScale(torch.Full([]int64{}, 1, torch.Float32), torch.Zeros([]int64{}, torch.Int32),
				torch.Zeros([]int64{}, torch.Float32), 2, 0.5, 2000)
		})
	}) == nil
})

// updateScale is _amp_update_scale_: the fused kernel on CUDA, and on the
// CPU where libtorch has one, which reads nothing on the host; elsewhere its
// arithmetic: scale·backoff and tracker 0 after inf/nan; otherwise tracker+1,
// and at the interval scale·growth (when still finite) and tracker 0.
func updateScale(scale, tracker, found *torch.Tensor, growth, backoff float64, interval int) {
	if scale.Device().IsCUDA() || (!hostUpdate.Load() && cpuUpdateKernel()) {
		torch.AmpUpdateScale(scale, tracker, found, growth, backoff, int64(interval))
		return
	}
	if found.Item() != 0 {
		scale.MulScalarIn(backoff)
		tracker.ZeroIn()
		return
	}
	n := tracker.ItemInt() + 1
	if n == int64(interval) {
		grown := scale.Item() * growth
		if !isInf(grown) {
			scale.FillIn(grown)
		}
		tracker.ZeroIn()
		return
	}
	tracker.FillIn(float64(n))
}

func isInf(v float64) bool { return v > 3.4028234663852886e38 || v < -3.4028234663852886e38 || v != v }
