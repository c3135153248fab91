package torch

import "github.com/torchfit/torchfit/torch/internal/capi"

// RNG is a snapshot of every default random generator: the CPU's and each
// CUDA device's. Restore puts them back, so code run again draws the same
// numbers (dropout masks) as the first time. Free it when done.
type RNG struct{ p capi.RNGSnapshot }

// TakeRNG snapshots the generators.
func TakeRNG() *RNG {
	p, err := capi.TakeRNG()
	check("TakeRNG", err)
	return &RNG{p: p}
}

// Restore sets every generator back to the snapshot.
func (r *RNG) Restore() { check("RNG.Restore", capi.ApplyRNG(r.p)) }

// Free releases the snapshot.
func (r *RNG) Free() {
	if r != nil && r.p != nil {
		capi.FreeRNG(r.p)
		r.p = nil
	}
}
