package nn

import (
	"math"
	"strconv"

	"github.com/torchfit/torchfit/torch"
)

// Layers whose parameters, names, shapes and default initialisation are
// PyTorch's (torch.nn). Constructors create float32 CPU parameters; move
// them with To. Exported fields that are not tensors (Eps, Momentum, ...)
// may be changed after construction.

// newParam allocates an uninitialised float32 tensor for a parameter.
func newParam(shape ...int64) *torch.Tensor { return torch.Empty(shape) }

// uniformBias fills b with U(−1/√fanIn, 1/√fanIn), as PyTorch's layers do.
func uniformBias(b *torch.Tensor, fanIn int64) {
	bound := 0.0
	if fanIn > 0 {
		bound = 1 / math.Sqrt(float64(fanIn))
	}
	Uniform(b, -bound, bound)
}

// ---- Linear ----------------------------------------------------------------

// Linear is nn.Linear: y = x·Wᵀ + b. Parameters weight (out, in) and bias (out).
type Linear struct {
	Base
	Weight, Bias *torch.Tensor // Bias is nil without bias
}

// NewLinear returns a Linear layer initialised as PyTorch's.
func NewLinear(in, out int64, bias bool) *Linear {
	l := &Linear{}
	l.Weight = l.RegisterParam("weight", KaimingUniform(newParam(out, in), math.Sqrt(5), FanIn, "leaky_relu"))
	if bias {
		l.Bias = newParam(out)
		uniformBias(l.Bias, in)
		l.RegisterParam("bias", l.Bias)
	}
	return l
}

// Forward maps (..., in) to (..., out).
func (l *Linear) Forward(x *torch.Tensor) *torch.Tensor { return torch.Linear(x, l.Weight, l.Bias) }

// Bilinear is nn.Bilinear: y = x1ᵀ·W·x2 + b, weight (out, in1, in2), bias (out).
type Bilinear struct {
	Base
	Weight, Bias *torch.Tensor
}

// NewBilinear returns a Bilinear layer; weight and bias are U(±1/√in1) as in PyTorch.
func NewBilinear(in1, in2, out int64, bias bool) *Bilinear {
	l := &Bilinear{}
	bound := 1 / math.Sqrt(float64(in1))
	l.Weight = l.RegisterParam("weight", Uniform(newParam(out, in1, in2), -bound, bound))
	if bias {
		l.Bias = l.RegisterParam("bias", Uniform(newParam(out), -bound, bound))
	}
	return l
}

// Forward maps (..., in1) and (..., in2) to (..., out).
func (l *Bilinear) Forward(x1, x2 *torch.Tensor) *torch.Tensor {
	return torch.Bilinear(x1, x2, l.Weight, l.Bias)
}

// ---- convolutions ------------------------------------------------------------

// Conv is nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d or nn.ConvTranspose2d.
// Parameters weight ((out, in/groups, k...) or, transposed, (in,
// out/groups, k...)) and bias (out). Padding is zeros-padding only.
type Conv struct {
	Base
	Weight, Bias *torch.Tensor
	Opts         torch.ConvOpts
	dims         int
	transposed   bool
}

func newConv(dims int, transposed bool, in, out int64, kernel []int64, o torch.ConvOpts, bias bool) *Conv {
	g := o.Groups
	if g == 0 {
		g = 1
	}
	if in%g != 0 || out%g != 0 {
		panic(invalid("in (%d) and out (%d) channels must be divisible by groups (%d)", in, out, g))
	}
	k := kernel
	if len(k) == 1 && dims > 1 {
		k = []int64{k[0], k[0]}
	}
	if len(k) != dims {
		panic(invalid("conv%dd wants %d kernel sizes, got %v", dims, dims, kernel))
	}
	shape := []int64{out, in / g}
	if transposed {
		shape = []int64{in, out / g}
	}
	shape = append(shape, k...)
	c := &Conv{Opts: o, dims: dims, transposed: transposed}
	c.Weight = c.RegisterParam("weight", KaimingUniform(newParam(shape...), math.Sqrt(5), FanIn, "leaky_relu"))
	if bias {
		fanIn, _ := Fans(shape)
		c.Bias = newParam(out)
		uniformBias(c.Bias, fanIn)
		c.RegisterParam("bias", c.Bias)
	}
	return c
}

// NewConv1d is nn.Conv1d(in, out, kernel, stride, padding, dilation, groups, bias).
func NewConv1d(in, out, kernel int64, o torch.ConvOpts, bias bool) *Conv {
	return newConv(1, false, in, out, []int64{kernel}, o, bias)
}

// NewConv2d is nn.Conv2d; kernel holds one size (square) or two. Groups =
// in = out gives a depthwise convolution.
func NewConv2d(in, out int64, kernel []int64, o torch.ConvOpts, bias bool) *Conv {
	return newConv(2, false, in, out, kernel, o, bias)
}

// NewConvTranspose1d is nn.ConvTranspose1d (o.OutputPadding applies).
func NewConvTranspose1d(in, out, kernel int64, o torch.ConvOpts, bias bool) *Conv {
	return newConv(1, true, in, out, []int64{kernel}, o, bias)
}

// NewConvTranspose2d is nn.ConvTranspose2d.
func NewConvTranspose2d(in, out int64, kernel []int64, o torch.ConvOpts, bias bool) *Conv {
	return newConv(2, true, in, out, kernel, o, bias)
}

// Forward convolves x: (N, C, L) for 1-d, (N, C, H, W) for 2-d.
func (c *Conv) Forward(x *torch.Tensor) *torch.Tensor {
	switch {
	case c.dims == 1 && !c.transposed:
		return torch.Conv1d(x, c.Weight, c.Bias, c.Opts)
	case c.dims == 2 && !c.transposed:
		return torch.Conv2d(x, c.Weight, c.Bias, c.Opts)
	case c.dims == 1:
		return torch.ConvTranspose1d(x, c.Weight, c.Bias, c.Opts)
	default:
		return torch.ConvTranspose2d(x, c.Weight, c.Bias, c.Opts)
	}
}

// ---- Embedding -----------------------------------------------------------------

// Embedding is nn.Embedding: parameter weight (num, dim), N(0, 1) initialised;
// the padding row (if any) starts at zero and gets no gradient.
type Embedding struct {
	Base
	Weight     *torch.Tensor
	PaddingIdx int64 // −1: none (normalised to 0 ≤ idx < num when given)
}

// NewEmbedding returns nn.Embedding(num, dim[, padding_idx]); a negative
// padding index counts from the end, as in PyTorch.
func NewEmbedding(num, dim int64, paddingIdx ...int64) *Embedding {
	e := &Embedding{PaddingIdx: -1}
	w := Normal(newParam(num, dim), 0, 1)
	if len(paddingIdx) > 0 {
		p := paddingIdx[0]
		if p < 0 {
			p += num
		}
		if p < 0 || p >= num {
			panic(invalid("padding index %d out of range for %d embeddings", paddingIdx[0], num))
		}
		e.PaddingIdx = p
		torch.NoGrad(func() { w.Select(0, p).ZeroIn().Free() })
	}
	e.Weight = e.RegisterParam("weight", w)
	return e
}

// Forward looks up int64 indices of any shape, adding a trailing dim.
func (e *Embedding) Forward(idx *torch.Tensor) *torch.Tensor {
	return torch.Embedding(e.Weight, idx, e.PaddingIdx)
}

// ---- Dropout and activations -----------------------------------------------------

// Dropout is nn.Dropout: active only in training mode (see Train).
type Dropout struct {
	Base
	P float64
}

// NewDropout returns a dropout layer with drop probability p.
func NewDropout(p float64) *Dropout {
	if p < 0 || p > 1 {
		panic(invalid("dropout probability %v outside [0, 1]", p))
	}
	return &Dropout{P: p}
}

// Forward zeroes elements with probability P in training mode and scales
// the rest by 1/(1−P), with the fused dropout or ATen's (SetFusedDropout);
// in eval mode (or with P = 0) it returns a new reference to x (so the
// caller may Free the result independently).
func (d *Dropout) Forward(x *torch.Tensor) *torch.Tensor {
	if !d.Training() || d.P == 0 {
		return x.Ref()
	}
	return ApplyDropout(x, d.P, true)
}

// Activation is a parameterless layer applying a function elementwise
// (ReLU, GELU, ...). Its state dict is empty.
type Activation struct {
	Base
	Name string
	fn   func(*torch.Tensor) *torch.Tensor
}

// Forward applies the activation.
func (a *Activation) Forward(x *torch.Tensor) *torch.Tensor { return a.fn(x) }

// NewReLU is nn.ReLU.
func NewReLU() *Activation { return &Activation{Name: "ReLU", fn: (*torch.Tensor).Relu} }

// NewGELU is nn.GELU (approximate "none" or "tanh").
func NewGELU(approximate string) *Activation {
	switch approximate {
	case "", "none":
		return &Activation{Name: "GELU", fn: (*torch.Tensor).Gelu}
	case "tanh":
		return &Activation{Name: "GELU(tanh)", fn: (*torch.Tensor).GeluTanh}
	}
	panic(invalid("GELU approximation %q (want none or tanh)", approximate))
}

// NewSiLU is nn.SiLU.
func NewSiLU() *Activation { return &Activation{Name: "SiLU", fn: (*torch.Tensor).Silu} }

// NewTanh is nn.Tanh.
func NewTanh() *Activation { return &Activation{Name: "Tanh", fn: (*torch.Tensor).Tanh} }

// NewSigmoid is nn.Sigmoid.
func NewSigmoid() *Activation { return &Activation{Name: "Sigmoid", fn: (*torch.Tensor).Sigmoid} }

// NewLeakyReLU is nn.LeakyReLU(negative_slope) (PyTorch's default slope: 0.01).
func NewLeakyReLU(slope float64) *Activation {
	return &Activation{Name: "LeakyReLU", fn: func(x *torch.Tensor) *torch.Tensor { return x.LeakyRelu(slope) }}
}

// NewGLU is nn.GLU(dim) (PyTorch's default dim: −1).
func NewGLU(dim int64) *Activation {
	return &Activation{Name: "GLU", fn: func(x *torch.Tensor) *torch.Tensor { return x.Glu(dim) }}
}

// ---- containers --------------------------------------------------------------------

// Sequential is nn.Sequential: layers registered as "0", "1", ... and
// applied in order.
type Sequential struct {
	Base
	Layers []Layer
}

// NewSequential chains layers.
func NewSequential(layers ...Layer) *Sequential {
	s := &Sequential{}
	for _, l := range layers {
		s.Append(l)
	}
	return s
}

// Append adds a layer at the end.
func (s *Sequential) Append(l Layer) *Sequential {
	RegisterModule(&s.Base, strconv.Itoa(len(s.Layers)), l)
	s.Layers = append(s.Layers, l)
	return s
}

// Forward applies the layers in order; intermediate results are released
// at once (autograd keeps what backward needs).
func (s *Sequential) Forward(x *torch.Tensor) *torch.Tensor {
	if len(s.Layers) == 0 {
		return x
	}
	// Each layer's output is released once the next layer has run (what
	// backward needs, it keeps).
	return torch.Pipe(x, len(s.Layers), func(i int, x *torch.Tensor) *torch.Tensor { return s.Layers[i].Forward(x) })
}

// ModuleList is nn.ModuleList: modules registered as "0", "1", ...
type ModuleList[M Module] struct {
	Base
	Items []M
}

// NewModuleList registers ms in order.
func NewModuleList[M Module](ms ...M) *ModuleList[M] {
	l := &ModuleList[M]{}
	for _, m := range ms {
		l.Append(m)
	}
	return l
}

// Append adds a module at the end.
func (l *ModuleList[M]) Append(m M) {
	RegisterModule(&l.Base, strconv.Itoa(len(l.Items)), m)
	l.Items = append(l.Items, m)
}

// Len returns the number of modules.
func (l *ModuleList[M]) Len() int { return len(l.Items) }
