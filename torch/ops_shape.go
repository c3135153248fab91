package torch

// Shape, layout and indexing operations. Dimensions may be negative (counted
// from the end), as in PyTorch. Views share storage with their input. Most
// are generated into ops_gen.go from ops.list; here are those built on other
// wrappers or choosing an op by a mode.

var (
	opReflPad1d = defOp("aten::reflection_pad1d", "")
	opReplPad1d = defOp("aten::replication_pad1d", "")
)

// T swaps the last two dimensions (matrix transpose for 2-d).
func (t *Tensor) T() *Tensor { return t.Transpose(-2, -1) }

// PadMode pads the last dimension of a 2-d/3-d tensor with "reflect" or "replicate".
func (t *Tensor) PadMode(pads []int64, mode string) *Tensor {
	var c call
	switch mode {
	case "reflect":
		return c.t(t).ints(pads...).out1(opReflPad1d)
	case "replicate":
		return c.t(t).ints(pads...).out1(opReplPad1d)
	case "constant":
		return t.Pad(pads, 0)
	}
	throwf("PadMode", "unknown mode %q (want constant, reflect or replicate)", mode)
	return nil
}

// To converts t to a device and dtype (t's data when nothing changes).
func (t *Tensor) To(d Device, dt DType) *Tensor { return t.to(d, dt, false, false) }

// ToAsync is To with non_blocking=true: with pinned host memory and a CUDA
// target the copy overlaps with compute; elsewhere it is synchronous.
func (t *Tensor) ToAsync(d Device, dt DType) *Tensor { return t.to(d, dt, true, false) }

// ToDevice moves t to d keeping its dtype.
func (t *Tensor) ToDevice(d Device) *Tensor { return t.to(d, t.DType(), false, false) }

// ToDType converts t's dtype keeping its device.
func (t *Tensor) ToDType(dt DType) *Tensor { return t.to(t.Device(), dt, false, false) }
