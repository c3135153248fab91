package train

import (
	"fmt"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// OffloadOptions configure an Offload optimizer.
type OffloadOptions struct {
	// Master keeps float32 master weights on the CPU: the host copies are
	// the parameters' true values and the device's are rounded copies of
	// them (for float16/bfloat16 parameters on the device). Without it the
	// host copies are refreshed from the device before each step.
	Master bool
}

// Offload runs an optimizer on the CPU for parameters that live on the
// device: its state (AdamW's two moments: twice the parameters' bytes)
// never occupies device memory — the Mamba seed's "CPU offload", its last
// resort. Each step copies the gradients to the host, updates float32 host
// copies of the parameters there with the inner optimizer, and copies the
// parameters back. It is an nn.Optimizer, so a GradScaler unscales and the
// loop clips the device gradients before it steps. Checkpoints hold the
// inner optimizer's state under the parameters' own names, as without
// offload. With the device being the CPU (a CPU-only build) the same path
// runs, and the parameters follow exactly those of the inner optimizer run
// in place.
type Offload struct {
	inner  nn.Optimizer
	params []*torch.Tensor // the model's parameters, on the device
	host   []*torch.Tensor // float32 copies on the CPU, the inner optimizer's parameters
	master bool
}

// NewOffload builds the inner optimizer with newOpt over CPU float32
// copies of groups' parameters (same names, same groups).
func NewOffload(groups []nn.ParamGroup, newOpt func([]nn.ParamGroup) nn.Optimizer, o OffloadOptions) (*Offload, error) {
	off := &Offload{master: o.Master}
	hostGroups := make([]nn.ParamGroup, len(groups))
	err := torch.Try(func() {
		torch.NoGrad(func() {
			for g, grp := range groups {
				hostGroups[g] = grp
				hostGroups[g].Params = nil
				for _, p := range grp.Params {
					h := p.T.To(torch.CPU, torch.Float32).Clone().SetRequiresGrad(true).Keep()
					off.params = append(off.params, p.T)
					off.host = append(off.host, h)
					hostGroups[g].Params = append(hostGroups[g].Params, nn.Named{Name: p.Name, T: h})
				}
			}
		})
	})
	if err != nil {
		off.freeHost()
		return nil, fmt.Errorf("train: offload: %w", err)
	}
	off.inner = newOpt(hostGroups)
	return off, nil
}

// Step copies the gradients to the host, steps the inner optimizer there
// and copies the parameters back to the device.
func (o *Offload) Step() {
	torch.Tidy(func() {
		torch.NoGrad(func() {
			for k, p := range o.params {
				if !o.master {
					o.host[k].CopyFrom(p) // the device's values, if anything changed them
				}
				g := p.Grad()
				if g == nil {
					o.host[k].SetGrad(nil)
					continue
				}
				o.host[k].SetGrad(g.To(torch.CPU, torch.Float32))
			}
			o.inner.Step()
			for k, p := range o.params {
				if o.host[k].Grad() != nil {
					p.CopyFrom(o.host[k]) // converts to the device and dtype
				}
			}
		})
	})
}

// ZeroGrad sets the device's and the host's gradients to none.
func (o *Offload) ZeroGrad() {
	for _, p := range o.params {
		p.SetGrad(nil)
	}
	o.inner.ZeroGrad()
}

// Groups returns the inner optimizer's groups (schedules set their LR).
func (o *Offload) Groups() []*nn.Group { return o.inner.Groups() }

// Kind returns the inner optimizer's PyTorch class name (nn.KindOf).
func (o *Offload) Kind() string { return nn.KindOf(o.inner) }

// Parameters returns the device parameters (whose gradients a GradScaler
// unscales and the loop clips).
func (o *Offload) Parameters() []*torch.Tensor { return o.params }

// State returns the inner optimizer's state (on the CPU).
func (o *Offload) State() torch.StateDict { return o.inner.State() }

// LoadState restores the inner optimizer's state and, with master
// weights, refreshes the host copies from the device parameters (a
// checkpoint restores those).
func (o *Offload) LoadState(sd map[string]*torch.Tensor) error {
	if err := o.inner.LoadState(sd); err != nil {
		return err
	}
	return torch.Try(func() {
		torch.NoGrad(func() {
			for k, p := range o.params {
				o.host[k].CopyFrom(p)
			}
		})
	})
}

// Free releases the inner optimizer's state and the host copies.
func (o *Offload) Free() {
	o.inner.Free()
	o.freeHost()
}

func (o *Offload) freeHost() {
	for _, h := range o.host {
		h.Free()
	}
	o.host = nil
}

// HostBytes returns the bytes the offloaded state and copies hold on the
// CPU (inner optimizer state plus the float32 parameter copies).
func (o *Offload) HostBytes() int64 {
	var n int64
	for _, s := range o.inner.State() {
		n += s.T.NBytes()
	}
	for _, h := range o.host {
		n += h.NBytes()
	}
	return n
}
