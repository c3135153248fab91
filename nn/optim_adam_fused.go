package nn

import (
	"sync"

	"github.com/torchfit/torchfit/torch"
)

// libtorchFusedAdam reports whether Adam's step on parameters of device d
// runs libtorch's own fused kernel (_fused_adam_ / _fused_adamw_, what
// torch.optim.Adam(fused=True) calls): on CUDA with libtorch 2.1 or later.
// There one kernel launch per parameter bucket replaces about ten per
// parameter, which on a GPU is host time the device waits for. The
// kernels also exist for the CPU from 2.4; tests replace this function
// to run them there.
var libtorchFusedAdam = func(d torch.Device) bool {
	return d.IsCUDA() && libtorchHasFusedAdam()
}

var libtorchHasFusedAdam = sync.OnceValue(func() bool {
	maj, min, _ := torch.LibtorchVersion()
	return maj > 2 || maj == 2 && min >= 1
})

// adamBucket is the parameters one libtorch fused call updates: one
// group's parameters of one device and dtype.
type adamBucket struct {
	g                     *Group
	dev                   torch.Device
	params, grads, ms, vs []*torch.Tensor
	vmaxs                 []*torch.Tensor
	states                []*optimParamState
}

// libtorchStep runs the step through libtorch's fused Adam kernels when
// every parameter with a gradient qualifies (libtorchFusedAdam of its
// device, a floating dtype, contiguous parameter and gradient); false,
// with nothing changed, when one does not. The kernel computes in float32
// (opmath) what Step's ops compute, the bias corrections included (from
// the step count it is given), as PyTorch's fused Adam does: it agrees
// with the per-op step to float32 rounding, not bit for bit.
func (o *Adam) libtorchStep() bool {
	var buckets []*adamBucket
	ok := true
	torch.NoGrad(func() {
		torch.Tidy(func() {
			for _, g := range o.groups {
				byKey := map[[2]int]*adamBucket{}
				for _, p := range g.Params {
					grad := p.T.Grad()
					if grad == nil {
						continue
					}
					dev, dt := p.T.Device(), p.T.DType()
					if !libtorchFusedAdam(dev) || !dt.IsFloat() || grad.DType() != dt ||
						!p.T.IsContiguous() || !grad.IsContiguous() {
						ok = false
						return
					}
					key := [2]int{int(dev.Type)<<8 | (dev.Index + 1), int(dt)}
					b := byKey[key]
					if b == nil {
						b = &adamBucket{g: g, dev: dev}
						byKey[key] = b
						buckets = append(buckets, b)
					}
					b.params, b.grads = append(b.params, p.T), append(b.grads, grad)
				}
			}
			if !ok || len(buckets) == 0 {
				return
			}
			// State is made once every parameter is known to qualify, so a
			// step that falls back changes nothing.
			for _, b := range buckets {
				for _, p := range b.params {
					st := o.state[p]
					if st == nil {
						st = &optimParamState{bufs: map[string]*torch.Tensor{}}
						o.state[p] = st
					}
					m, v := st.bufs["exp_avg"], st.bufs["exp_avg_sq"]
					if m == nil {
						m, v = optimZeros(p), optimZeros(p)
						st.bufs["exp_avg"], st.bufs["exp_avg_sq"] = m, v
					}
					b.ms, b.vs, b.states = append(b.ms, m), append(b.vs, v), append(b.states, st)
					if b.g.AMSGrad {
						vm := st.bufs["max_exp_avg_sq"]
						if vm == nil {
							vm = optimZeros(p)
							st.bufs["max_exp_avg_sq"] = vm
						}
						b.vmaxs = append(b.vmaxs, vm)
					}
				}
			}
			for _, b := range buckets {
				o.runBucket(b)
			}
		})
	})
	return ok
}

// runBucket calls the kernel on one bucket. The kernel reads each
// parameter's step count from a float32 tensor on the parameters' device
// (PyTorch keeps them there for fused Adam); the host count stays the
// state's, and each distinct count becomes one scalar tensor for the call.
func (o *Adam) runBucket(b *adamBucket) {
	steps := make([]*torch.Tensor, len(b.params))
	byStep := map[float32]*torch.Tensor{}
	for k, st := range b.states {
		n := st.step + 1
		t := byStep[n]
		if t == nil {
			t = torch.Full([]int64{}, float64(n), torch.Float32, b.dev)
			byStep[n] = t
		}
		steps[k] = t
	}
	g := b.g
	op, decay := "aten::_fused_adam_", g.WeightDecay
	if o.decoupled {
		op = "aten::_fused_adamw_"
	}
	vmaxs := b.vmaxs
	if vmaxs == nil {
		vmaxs = []*torch.Tensor{}
	}
	torch.CallOp(op, "", b.params, b.grads, b.ms, b.vs, vmaxs, steps,
		g.LR, g.Beta1, g.Beta2, decay, g.Eps, g.AMSGrad, g.Maximize, nil, nil)
	for _, st := range b.states {
		st.step++
	}
}
