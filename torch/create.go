package torch

import (
	"runtime"
	"unsafe"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// Opt configures a created tensor: a DType, a Device, or RequiresGrad.
type Opt interface{ apply(*options) }

type options struct {
	dtype    DType
	hasDType bool
	device   Device
	grad     bool
}

func (d DType) apply(o *options)  { o.dtype, o.hasDType = d, true }
func (d Device) apply(o *options) { o.device = d }

type requiresGrad bool

func (r requiresGrad) apply(o *options) { o.grad = bool(r) }

// RequiresGrad makes a created tensor a leaf that records gradients.
const RequiresGrad = requiresGrad(true)

func makeOptions(opts []Opt) options {
	o := options{dtype: Float32, device: CPU}
	for _, op := range opts {
		op.apply(&o)
	}
	return o
}

// tensorOpts appends the (dtype, layout, device, pin_memory) arguments of a factory.
func (c *call) tensorOpts(o options) *call {
	return c.dtype(o.dtype).none().device(o.device).none()
}

func (o options) finish(t *Tensor) *Tensor {
	if o.grad {
		t.SetRequiresGrad(true)
	}
	return t
}

var (
	opArange   = defOp("aten::arange", "start_step")
	opRandint  = defOp("aten::randint", "low")
	opRandperm = defOp("aten::randperm", "")
)

// Arange returns start, start+step, ... below end. Without a DType option the
// result is int64 when all three are integral (as PyTorch), else float32.
func Arange(start, end, step float64, opts ...Opt) *Tensor {
	o := makeOptions(opts)
	if !o.hasDType && start == float64(int64(start)) && end == float64(int64(end)) && step == float64(int64(step)) {
		o.dtype = Int64
	}
	var c call
	return o.finish(c.scalar(start).scalar(end).scalar(step).tensorOpts(o).out1(opArange))
}

// Randint returns integers uniform in [low, high) (int64 unless opts say otherwise).
func Randint(low, high int64, shape []int64, opts ...Opt) *Tensor {
	o := makeOptions(opts)
	if !o.hasDType {
		o.dtype = Int64
	}
	var c call
	return o.finish(c.i(low).i(high).ints(shape...).tensorOpts(o).out1(opRandint))
}

// Randperm returns a random permutation of 0..n-1 (int64).
func Randperm(n int64, opts ...Opt) *Tensor {
	o := makeOptions(opts)
	if !o.hasDType {
		o.dtype = Int64
	}
	var c call
	return o.finish(c.i(n).tensorOpts(o).out1(opRandperm))
}

// likeOptions collects opts for a *_like factory: what they do not set
// stays the input's.
func likeOptions(opts []Opt) options {
	o := options{dtype: -1, device: Device{Type: -1}}
	for _, op := range opts {
		op.apply(&o)
	}
	return o
}

// likeOpts appends a *_like factory's (dtype, layout, device, pin_memory),
// None ("as the input") where o does not set them.
func (c *call) likeOpts(o options) *call {
	if o.hasDType {
		c.dtype(o.dtype)
	} else {
		c.none()
	}
	c.none()
	if o.device.Type >= 0 {
		c.device(o.device)
	} else {
		c.none()
	}
	return c.none()
}

// Element is a Go type that maps to a DType.
type Element interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~int16 | ~int8 | ~uint8 | ~bool
}

func dtypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int64:
		return Int64
	case int32:
		return Int32
	case int16:
		return Int16
	case int8:
		return Int8
	case uint8:
		return Uint8
	case bool:
		return Bool
	}
	panic(&Error{Op: "FromSlice", Msg: "unsupported element type"})
}

func checkShape(op string, n int, shape []int64) []int64 {
	if shape == nil {
		return []int64{int64(n)}
	}
	total := int64(1)
	for _, s := range shape {
		if s < 0 {
			throwf(op, "negative dimension in shape %v", shape)
		}
		total *= s
	}
	if total != int64(n) {
		throwf(op, "shape %v holds %d elements, data has %d", shape, total, n)
	}
	return shape
}

// FromSlice copies data into a new CPU tensor of the given shape (1-d when
// shape is omitted). Opts may move it to a device, convert it, or make it
// require grad.
func FromSlice[T Element](data []T, shape []int64, opts ...Opt) *Tensor {
	shape = checkShape("FromSlice", len(data), shape)
	var ptr unsafe.Pointer
	if len(data) > 0 {
		ptr = unsafe.Pointer(&data[0])
	}
	var z T
	h, err := capi.FromData(ptr, len(data)*int(unsafe.Sizeof(z)), shape, int32(dtypeOf[T]()))
	runtime.KeepAlive(data)
	check("FromSlice", err)
	t := wrapNew(h)
	o := makeOptions(opts)
	if (o.hasDType && o.dtype != t.DType()) || o.device != CPU {
		dt := t.DType()
		if o.hasDType {
			dt = o.dtype
		}
		u := t.To(o.device, dt)
		t.Free()
		t = u
	}
	return o.finish(t)
}

// Scalar returns a 0-d float32 tensor (or of the dtype in opts).
func Scalar(v float64, opts ...Opt) *Tensor { return Full([]int64{}, v, opts...) }

// ToSlice copies t's elements (any device, any layout) into a new Go slice.
// T must match t's dtype; use To to convert first.
func ToSlice[T Element](t *Tensor) []T {
	if want := dtypeOf[T](); t.DType() != want {
		throwf("ToSlice", "tensor is %v, slice is %v: convert with To first", t.DType(), want)
	}
	out := make([]T, t.Numel())
	var ptr unsafe.Pointer
	if len(out) > 0 {
		ptr = unsafe.Pointer(&out[0])
	}
	var z T
	err := capi.CopyTo(t.handle("ToSlice"), ptr, len(out)*int(unsafe.Sizeof(z)))
	runtime.KeepAlive(t)
	check("ToSlice", err)
	return out
}

// Float32s returns t's elements converted to float32.
func (t *Tensor) Float32s() []float32 {
	if t.DType() == Float32 {
		return ToSlice[float32](t)
	}
	u := t.To(CPU, Float32)
	defer u.Free()
	return ToSlice[float32](u)
}

// Float64s returns t's elements converted to float64.
func (t *Tensor) Float64s() []float64 {
	if t.DType() == Float64 {
		return ToSlice[float64](t)
	}
	u := t.To(CPU, Float64)
	defer u.Free()
	return ToSlice[float64](u)
}

// Int64s returns t's elements converted to int64.
func (t *Tensor) Int64s() []int64 {
	if t.DType() == Int64 {
		return ToSlice[int64](t)
	}
	u := t.To(CPU, Int64)
	defer u.Free()
	return ToSlice[int64](u)
}

var opItem = defOp("aten::item", "")

// Item returns the value of a one-element tensor as float64.
func (t *Tensor) Item() float64 {
	var c call
	v := c.t(t).outScalar(opItem)
	switch v.Kind {
	case capi.KDouble:
		return v.D
	case capi.KInt, capi.KBool:
		return float64(v.I)
	}
	throwf("Item", "unexpected result")
	return 0
}

// ItemInt returns the value of a one-element integral tensor.
func (t *Tensor) ItemInt() int64 {
	var c call
	v := c.t(t).outScalar(opItem)
	switch v.Kind {
	case capi.KInt, capi.KBool:
		return v.I
	case capi.KDouble:
		return int64(v.D)
	}
	throwf("ItemInt", "unexpected result")
	return 0
}

// ManualSeed seeds every libtorch generator (CPU and CUDA).
func ManualSeed(seed uint64) { check("ManualSeed", capi.ManualSeed(seed)) }

// SetNumThreads sets libtorch's intra-op parallelism.
func SetNumThreads(n int) { check("SetNumThreads", capi.SetNumThreads(n)) }

// NumThreads returns libtorch's intra-op parallelism.
func NumThreads() int { return capi.NumThreads() }

// LibtorchVersion returns the libtorch version torchfit was built against.
func LibtorchVersion() (major, minor, patch int) { return capi.Version() }

// CUDAAvailable reports whether a CUDA device can be used.
func CUDAAvailable() bool { return capi.CUDADeviceCount() > 0 }

// CUDADeviceCount returns the number of CUDA devices.
func CUDADeviceCount() int { return capi.CUDADeviceCount() }

// RNGState returns a copy of the default CPU generator's state (uint8), for
// checkpoints; SetRNGState restores it, so a resumed run draws the same
// random numbers (dropout masks, shuffles done with torch) as an unbroken one.
func RNGState() *Tensor {
	h, err := capi.RNGState()
	check("RNGState", err)
	return wrapNew(h)
}

// SetRNGState restores a state returned by RNGState.
func SetRNGState(state *Tensor) {
	err := capi.SetRNGState(state.handle("SetRNGState"))
	runtime.KeepAlive(state)
	check("SetRNGState", err)
}

// Synchronize waits until every kernel queued on device d has finished (a
// no-op on the CPU, whose ops finish when they return). Time CUDA work
// between two calls of it.
func Synchronize(d Device) error {
	if d.Type != DeviceCUDA {
		return nil
	}
	if err := CheckDevice(d); err != nil {
		return err
	}
	_, idx := devArgs(d)
	if err := capi.CUDASynchronize(idx); err != nil {
		return wrapErr("Synchronize", err)
	}
	return nil
}
