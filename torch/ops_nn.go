package torch

// The neural-network ops whose signatures need more than ops.list can say:
// convolutions (an options struct), pooling (one size for every spatial
// dimension, stride 0 meaning the kernel size), interpolation (the op
// depends on the mode) and the STFT (several ops). The other nn ops
// (linear algebra, activations, normalisation, losses) are generated into
// ops_gen.go. Losses take a Reduction.

var (
	opConv1d     = defOp("aten::conv1d", "")
	opConv2d     = defOp("aten::conv2d", "")
	opConvT1d    = defOp("aten::conv_transpose1d", "")
	opConvT2d    = defOp("aten::conv_transpose2d", "input")
	opMaxPool1d  = defOp("aten::max_pool1d", "")
	opMaxPool2d  = defOp("aten::max_pool2d", "")
	opAvgPool1d  = defOp("aten::avg_pool1d", "")
	opAvgPool2d  = defOp("aten::avg_pool2d", "")
	opAdaAvg1d   = defOp("aten::adaptive_avg_pool1d", "")
	opAdaAvg2d   = defOp("aten::adaptive_avg_pool2d", "")
	opAdaMax2d   = defOp("aten::adaptive_max_pool2d", "")
	opNearest1d  = defOp("aten::upsample_nearest1d", "")
	opNearest2d  = defOp("aten::upsample_nearest2d", "")
	opLinear1d   = defOp("aten::upsample_linear1d", "")
	opBilinear2d = defOp("aten::upsample_bilinear2d", "")
	opStft       = defOp("aten::stft", "")
	opViewAsReal = defOp("aten::view_as_real", "")
)

// Reduction says how a loss combines its per-element values.
type Reduction int64

// Reductions (libtorch's codes).
const (
	ReduceNone Reduction = 0
	ReduceMean Reduction = 1
	ReduceSum  Reduction = 2
)

// ConvOpts are a convolution's stride, padding, dilation and groups; zero
// values mean stride 1, padding 0, dilation 1, groups 1. Slices hold one
// value per spatial dimension or a single value for all.
type ConvOpts struct {
	Stride, Padding, Dilation, OutputPadding []int64
	Groups                                   int64
}

func expandTo(v []int64, n int, def int64) []int64 {
	if len(v) == 0 {
		v = []int64{def}
	}
	if len(v) == 1 && n > 1 {
		out := make([]int64, n)
		for k := range out {
			out[k] = v[0]
		}
		return out
	}
	return v
}

func (o ConvOpts) groups() int64 {
	if o.Groups == 0 {
		return 1
	}
	return o.Groups
}

// Conv1d convolves x (N, C, L) with w (Cout, C/groups, K); b may be nil.
func Conv1d(x, w, b *Tensor, o ConvOpts) *Tensor {
	var c call
	return c.t(x).t(w).t(b).ints(expandTo(o.Stride, 1, 1)...).ints(expandTo(o.Padding, 1, 0)...).
		ints(expandTo(o.Dilation, 1, 1)...).i(o.groups()).out1(opConv1d)
}

// Conv2d convolves x (N, C, H, W) with w (Cout, C/groups, KH, KW).
func Conv2d(x, w, b *Tensor, o ConvOpts) *Tensor {
	var c call
	return c.t(x).t(w).t(b).ints(expandTo(o.Stride, 2, 1)...).ints(expandTo(o.Padding, 2, 0)...).
		ints(expandTo(o.Dilation, 2, 1)...).i(o.groups()).out1(opConv2d)
}

// ConvTranspose1d is the transposed 1-d convolution; w is (Cin, Cout/groups, K).
func ConvTranspose1d(x, w, b *Tensor, o ConvOpts) *Tensor {
	var c call
	return c.t(x).t(w).t(b).ints(expandTo(o.Stride, 1, 1)...).ints(expandTo(o.Padding, 1, 0)...).
		ints(expandTo(o.OutputPadding, 1, 0)...).i(o.groups()).ints(expandTo(o.Dilation, 1, 1)...).out1(opConvT1d)
}

// ConvTranspose2d is the transposed 2-d convolution; w is (Cin, Cout/groups, KH, KW).
func ConvTranspose2d(x, w, b *Tensor, o ConvOpts) *Tensor {
	var c call
	return c.t(x).t(w).t(b).ints(expandTo(o.Stride, 2, 1)...).ints(expandTo(o.Padding, 2, 0)...).
		ints(expandTo(o.OutputPadding, 2, 0)...).i(o.groups()).ints(expandTo(o.Dilation, 2, 1)...).out1(opConvT2d)
}

// MaxPool1d pools x (N, C, L).
func MaxPool1d(x *Tensor, kernel, stride, padding int64) *Tensor {
	if stride == 0 {
		stride = kernel
	}
	var c call
	return c.t(x).ints(kernel).ints(stride).ints(padding).ints(1).b(false).out1(opMaxPool1d)
}

// MaxPool2d pools x (N, C, H, W) with square windows.
func MaxPool2d(x *Tensor, kernel, stride, padding int64) *Tensor {
	if stride == 0 {
		stride = kernel
	}
	var c call
	return c.t(x).ints(kernel, kernel).ints(stride, stride).ints(padding, padding).ints(1, 1).b(false).out1(opMaxPool2d)
}

// AvgPool1d averages windows of x (N, C, L).
func AvgPool1d(x *Tensor, kernel, stride, padding int64) *Tensor {
	if stride == 0 {
		stride = kernel
	}
	var c call
	return c.t(x).ints(kernel).ints(stride).ints(padding).b(false).b(true).out1(opAvgPool1d)
}

// AvgPool2d averages square windows of x (N, C, H, W).
func AvgPool2d(x *Tensor, kernel, stride, padding int64) *Tensor {
	if stride == 0 {
		stride = kernel
	}
	var c call
	return c.t(x).ints(kernel, kernel).ints(stride, stride).ints(padding, padding).b(false).b(true).none().out1(opAvgPool2d)
}

// AdaptiveAvgPool1d averages x (N, C, L) to length out.
func AdaptiveAvgPool1d(x *Tensor, out int64) *Tensor {
	var c call
	return c.t(x).ints(out).out1(opAdaAvg1d)
}

// AdaptiveAvgPool2d averages x (N, C, H, W) to (h, w).
func AdaptiveAvgPool2d(x *Tensor, h, w int64) *Tensor {
	var c call
	return c.t(x).ints(h, w).out1(opAdaAvg2d)
}

// AdaptiveMaxPool2d max-pools x (N, C, H, W) to (h, w).
func AdaptiveMaxPool2d(x *Tensor, h, w int64) *Tensor {
	var c call
	return c.t(x).ints(h, w).outN(opAdaMax2d, 2)[0]
}

// Interpolate resizes the spatial dimensions of x (N, C, L) or (N, C, H, W)
// to size, with mode "nearest", "linear" (1-d) or "bilinear" (2-d).
func Interpolate(x *Tensor, size []int64, mode string, alignCorners bool) *Tensor {
	var c call
	switch {
	case mode == "nearest" && len(size) == 1:
		return c.t(x).ints(size...).none().out1(opNearest1d)
	case mode == "nearest" && len(size) == 2:
		return c.t(x).ints(size...).none().none().out1(opNearest2d)
	case mode == "linear" && len(size) == 1:
		return c.t(x).ints(size...).b(alignCorners).none().out1(opLinear1d)
	case mode == "bilinear" && len(size) == 2:
		return c.t(x).ints(size...).b(alignCorners).none().none().out1(opBilinear2d)
	}
	throwf("Interpolate", "unsupported mode %q for %d spatial dims", mode, len(size))
	return nil
}

// Stft is the short-time Fourier transform of x (L) or (B, L), centred with
// reflect padding as torch.stft(center=True). It returns the magnitude
// spectrum when power is 1, the power spectrum when 2: (B, nFFT/2+1, frames).
func Stft(x *Tensor, nFFT, hop, winLength int64, window *Tensor, power float64) *Tensor {
	return TidyTensor(func() *Tensor {
		in := x
		squeeze := x.Dim() == 1
		if squeeze {
			in = x.Unsqueeze(0)
		}
		pad := nFFT / 2
		in = in.Unsqueeze(1).PadMode([]int64{pad, pad}, "reflect").SqueezeDim(1)
		var c call
		spec := c.t(in).i(nFFT).i(hop).i(winLength).t(window).b(false).none().b(true).out1(opStft)
		var v call
		re := v.t(spec).out1(opViewAsReal) // (B, F, T, 2)
		p := re.Square().SumDim([]int64{-1}, false)
		if power == 1 {
			p = p.Sqrt()
		} else if power != 2 {
			p = p.Pow(power / 2)
		}
		if squeeze {
			p = p.SqueezeDim(0)
		}
		return p
	})
}

var opSDPA = defOp("aten::scaled_dot_product_attention", "")

// HasSDPA reports whether this libtorch has scaled_dot_product_attention
// (2.0 and later).
func HasSDPA() bool {
	maj, _, _ := LibtorchVersion()
	return maj >= 2
}

// ScaledDotProductAttention is F.scaled_dot_product_attention(q, k, v,
// attn_mask=mask, dropout_p=dropout, is_causal=causal) for q (…, L, E) and
// k, v (…, S, E): softmax(q·kᵀ/√E + mask)·v with libtorch's fused kernels
// (flash attention on the CPU for float inputs; flash or memory-efficient
// on CUDA), which keep no (L, S) attention matrix for backward. mask may be
// nil, bool (true: may attend) or float (added). It needs libtorch 2.0
// (HasSDPA); on 1.13 it panics with *Error.
func ScaledDotProductAttention(q, k, v, mask *Tensor, dropout float64, causal bool) *Tensor {
	if !HasSDPA() {
		maj, min, _ := LibtorchVersion()
		throwf("ScaledDotProductAttention", "needs libtorch 2.0 or later (this is %d.%d)", maj, min)
	}
	var c call
	return c.t(q).t(k).t(v).t(mask).f(dropout).b(causal).out1(opSDPA)
}
