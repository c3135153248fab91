package torch

// Linear algebra, activations and the neural-network functional ops
// (torch.nn.functional). Losses take a Reduction.

var (
	opMatmul     = defOp("aten::matmul", "")
	opBmm        = defOp("aten::bmm", "")
	opMm         = defOp("aten::mm", "")
	opEinsum     = defOp("aten::einsum", "")
	opLinear     = defOp("aten::linear", "")
	opAddmm      = defOp("aten::addmm", "")
	opBilinear   = defOp("aten::bilinear", "")
	opOuter      = defOp("aten::outer", "")
	opSoftmax    = defOp("aten::softmax", "int")
	opLogSoftmax = defOp("aten::log_softmax", "int")
	opRelu       = defOp("aten::relu", "")
	opGelu       = defOp("aten::gelu", "")
	opSilu       = defOp("aten::silu", "")
	opSoftplus   = defOp("aten::softplus", "")
	opSigmoid    = defOp("aten::sigmoid", "")
	opTanh       = defOp("aten::tanh", "")
	opGlu        = defOp("aten::glu", "")
	opLeakyRelu  = defOp("aten::leaky_relu", "")
	opElu        = defOp("aten::elu", "")
	opMish       = defOp("aten::mish", "")
	opDropout    = defOp("aten::dropout", "")
	opConv1d     = defOp("aten::conv1d", "")
	opConv2d     = defOp("aten::conv2d", "")
	opConvT1d    = defOp("aten::conv_transpose1d", "")
	opConvT2d    = defOp("aten::conv_transpose2d", "input")
	opBatchNorm  = defOp("aten::batch_norm", "")
	opLayerNorm  = defOp("aten::layer_norm", "")
	opGroupNorm  = defOp("aten::group_norm", "")
	opEmbedding  = defOp("aten::embedding", "")
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
	opHann       = defOp("aten::hann_window", "periodic")
	opViewAsReal = defOp("aten::view_as_real", "")
	opCrossEnt   = defOp("aten::cross_entropy_loss", "")
	opNLL        = defOp("aten::nll_loss_nd", "")
	opCTC        = defOp("aten::ctc_loss", "Tensor")
	opBCELogits  = defOp("aten::binary_cross_entropy_with_logits", "")
	opL1         = defOp("aten::l1_loss", "")
	opMSE        = defOp("aten::mse_loss", "")
	opSmoothL1   = defOp("aten::smooth_l1_loss", "")
)

// Reduction says how a loss combines its per-element values.
type Reduction int64

// Reductions (libtorch's codes).
const (
	ReduceNone Reduction = 0
	ReduceMean Reduction = 1
	ReduceSum  Reduction = 2
)

// Matmul is torch.matmul (broadcasting batched matrix product).
func (t *Tensor) Matmul(o *Tensor) *Tensor { return binary(opMatmul, t, o) }

// Mm is the 2-d matrix product.
func (t *Tensor) Mm(o *Tensor) *Tensor { return binary(opMm, t, o) }

// Bmm is the batched matrix product of 3-d tensors.
func (t *Tensor) Bmm(o *Tensor) *Tensor { return binary(opBmm, t, o) }

// Outer is the outer product of two vectors.
func (t *Tensor) Outer(o *Tensor) *Tensor { return binary(opOuter, t, o) }

// Einsum evaluates an Einstein-summation equation.
func Einsum(eq string, ts ...*Tensor) *Tensor {
	var c call
	return c.str(eq).tensors(ts).out1(opEinsum)
}

// Linear is x·wᵀ + b (b may be nil).
func Linear(x, w, b *Tensor) *Tensor {
	var c call
	return c.t(x).t(w).t(b).out1(opLinear)
}

// Bilinear is x1ᵀ·W·x2 + b (b may be nil).
func Bilinear(x1, x2, w, b *Tensor) *Tensor {
	var c call
	return c.t(x1).t(x2).t(w).t(b).out1(opBilinear)
}

// Addmm is beta·t + alpha·(a·b).
func (t *Tensor) Addmm(a, b *Tensor, beta, alpha float64) *Tensor {
	var c call
	return c.t(t).t(a).t(b).scalar(beta).scalar(alpha).out1(opAddmm)
}

// Softmax along dim.
func (t *Tensor) Softmax(dim int64) *Tensor {
	var c call
	return c.t(t).i(dim).none().out1(opSoftmax)
}

// LogSoftmax along dim.
func (t *Tensor) LogSoftmax(dim int64) *Tensor {
	var c call
	return c.t(t).i(dim).none().out1(opLogSoftmax)
}

// Relu is max(0, t).
func (t *Tensor) Relu() *Tensor { return unary(opRelu, t) }

// Gelu is the exact GELU; GeluTanh the tanh approximation.
func (t *Tensor) Gelu() *Tensor {
	var c call
	return c.t(t).str("none").out1(opGelu)
}

// GeluTanh is GELU with the tanh approximation.
func (t *Tensor) GeluTanh() *Tensor {
	var c call
	return c.t(t).str("tanh").out1(opGelu)
}

// Silu is t·σ(t) (swish).
func (t *Tensor) Silu() *Tensor { return unary(opSilu, t) }

// Softplus is ln(1 + e^(βt))/β, linear above threshold.
func (t *Tensor) Softplus(beta, threshold float64) *Tensor {
	var c call
	return c.t(t).scalar(beta).scalar(threshold).out1(opSoftplus)
}

// Sigmoid is 1/(1 + e^−t).
func (t *Tensor) Sigmoid() *Tensor { return unary(opSigmoid, t) }

// Tanh is the hyperbolic tangent.
func (t *Tensor) Tanh() *Tensor { return unary(opTanh, t) }

// Glu splits dim in halves a, b and returns a·σ(b).
func (t *Tensor) Glu(dim int64) *Tensor {
	var c call
	return c.t(t).i(dim).out1(opGlu)
}

// LeakyRelu is max(0,t) + slope·min(0,t).
func (t *Tensor) LeakyRelu(slope float64) *Tensor { return withScalar(opLeakyRelu, t, slope) }

// Elu is the exponential linear unit.
func (t *Tensor) Elu(alpha float64) *Tensor { return withScalar(opElu, t, alpha) }

// Mish is t·tanh(softplus(t)).
func (t *Tensor) Mish() *Tensor { return unary(opMish, t) }

// Dropout zeroes elements with probability p when train is true (scaling
// the rest by 1/(1−p)).
func (t *Tensor) Dropout(p float64, train bool) *Tensor {
	var c call
	return c.t(t).f(p).b(train).out1(opDropout)
}

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

// BatchNorm normalises over the batch (and spatial) dimensions. In training
// it updates runningMean/runningVar in place (when given) with momentum.
func BatchNorm(x, weight, bias, runningMean, runningVar *Tensor, training bool, momentum, eps float64) *Tensor {
	var c call
	return c.t(x).t(weight).t(bias).t(runningMean).t(runningVar).b(training).f(momentum).f(eps).b(true).out1(opBatchNorm)
}

// LayerNorm normalises over the trailing dimensions in shape.
func LayerNorm(x *Tensor, shape []int64, weight, bias *Tensor, eps float64) *Tensor {
	var c call
	return c.t(x).ints(shape...).t(weight).t(bias).f(eps).b(true).out1(opLayerNorm)
}

// GroupNorm normalises channel groups.
func GroupNorm(x *Tensor, groups int64, weight, bias *Tensor, eps float64) *Tensor {
	var c call
	return c.t(x).i(groups).t(weight).t(bias).f(eps).b(true).out1(opGroupNorm)
}

// Embedding looks up rows of weight; rows at paddingIdx (≥ 0) get no gradient.
func Embedding(weight, indices *Tensor, paddingIdx int64) *Tensor {
	var c call
	return c.t(weight).t(indices).i(paddingIdx).b(false).b(false).out1(opEmbedding)
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

// HannWindow returns a periodic (or symmetric) Hann window of length n.
func HannWindow(n int64, periodic bool, opts ...Opt) *Tensor {
	o := makeOptions(opts)
	var c call
	return c.i(n).b(periodic).tensorOpts(o).out1(opHann)
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
		re := unary(opViewAsReal, spec) // (B, F, T, 2)
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

// CrossEntropy is F.cross_entropy on logits (N, C[, ...]) and int64 class
// targets; weight may be nil; ignoreIndex -100 is PyTorch's default.
func CrossEntropy(logits, target, weight *Tensor, red Reduction, ignoreIndex int64, labelSmoothing float64) *Tensor {
	var c call
	return c.t(logits).t(target).t(weight).i(int64(red)).i(ignoreIndex).f(labelSmoothing).out1(opCrossEnt)
}

// NLLLoss is F.nll_loss on log-probabilities.
func NLLLoss(logProbs, target, weight *Tensor, red Reduction, ignoreIndex int64) *Tensor {
	var c call
	return c.t(logProbs).t(target).t(weight).i(int64(red)).i(ignoreIndex).out1(opNLL)
}

// CTCLoss is F.ctc_loss on log-probabilities (T, N, C) with targets (N, S)
// or concatenated, and int64 length tensors.
func CTCLoss(logProbs, targets, inputLengths, targetLengths *Tensor, blank int64, red Reduction, zeroInfinity bool) *Tensor {
	var c call
	return c.t(logProbs).t(targets).t(inputLengths).t(targetLengths).i(blank).i(int64(red)).b(zeroInfinity).out1(opCTC)
}

// BCEWithLogits is F.binary_cross_entropy_with_logits; weight and posWeight may be nil.
func BCEWithLogits(logits, target, weight, posWeight *Tensor, red Reduction) *Tensor {
	var c call
	return c.t(logits).t(target).t(weight).t(posWeight).i(int64(red)).out1(opBCELogits)
}

// L1Loss is mean/sum |x − y|.
func L1Loss(x, y *Tensor, red Reduction) *Tensor {
	var c call
	return c.t(x).t(y).i(int64(red)).out1(opL1)
}

// MSELoss is mean/sum (x − y)².
func MSELoss(x, y *Tensor, red Reduction) *Tensor {
	var c call
	return c.t(x).t(y).i(int64(red)).out1(opMSE)
}

// SmoothL1Loss is the Huber-like loss with threshold beta.
func SmoothL1Loss(x, y *Tensor, red Reduction, beta float64) *Tensor {
	var c call
	return c.t(x).t(y).i(int64(red)).f(beta).out1(opSmoothL1)
}
