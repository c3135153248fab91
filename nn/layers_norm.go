package nn

import (
	"fmt"
	"sync"

	"github.com/torchfit/torchfit/torch"
)

// BatchNorm is nn.BatchNorm1d / nn.BatchNorm2d (affine, tracking running
// statistics): parameters weight, bias (C); buffers running_mean,
// running_var (C) and num_batches_tracked (int64 scalar). In training mode
// it normalises with the batch statistics and updates the running ones; in
// eval mode (SetTraining(m, false)) it uses the running statistics.
type BatchNorm struct {
	Base
	Weight, Bias            *torch.Tensor
	RunningMean, RunningVar *torch.Tensor
	NumBatchesTracked       *torch.Tensor
	Eps                     float64
	Momentum                float64 // PyTorch's 0.1; negative: cumulative average (momentum=None)
	numFeatures             int64
	wantDims1, wantDims2    int
}

func newBatchNorm(c int64, dims ...int) *BatchNorm {
	b := &BatchNorm{Eps: 1e-5, Momentum: 0.1, numFeatures: c, wantDims1: dims[0], wantDims2: dims[len(dims)-1]}
	b.Weight = b.RegisterParam("weight", torch.Ones([]int64{c}))
	b.Bias = b.RegisterParam("bias", torch.Zeros([]int64{c}))
	b.RunningMean = b.RegisterBuffer("running_mean", torch.Zeros([]int64{c}), true)
	b.RunningVar = b.RegisterBuffer("running_var", torch.Ones([]int64{c}), true)
	b.NumBatchesTracked = b.RegisterBuffer("num_batches_tracked", torch.Zeros([]int64{}, torch.Int64), true)
	return b
}

// NewBatchNorm1d is nn.BatchNorm1d(c): input (N, C) or (N, C, L).
func NewBatchNorm1d(c int64) *BatchNorm { return newBatchNorm(c, 2, 3) }

// NewBatchNorm2d is nn.BatchNorm2d(c): input (N, C, H, W).
func NewBatchNorm2d(c int64) *BatchNorm { return newBatchNorm(c, 4) }

// Forward normalises x.
func (b *BatchNorm) Forward(x *torch.Tensor) *torch.Tensor {
	if d := x.Dim(); d != b.wantDims1 && d != b.wantDims2 {
		panic(&torch.Error{Op: "BatchNorm", Msg: fmt.Sprintf("expected %d-d or %d-d input, got %d-d", b.wantDims1, b.wantDims2, d)})
	}
	training := b.Training()
	momentum := b.Momentum
	if training {
		torch.NoGrad(func() { b.NumBatchesTracked.AddScalarIn(1) })
		if momentum < 0 {
			momentum = 1 / float64(b.NumBatchesTracked.ItemInt())
		}
	}
	return torch.BatchNorm(x, b.Weight, b.Bias, b.RunningMean, b.RunningVar, training, momentum, b.Eps)
}

// LayerNorm is nn.LayerNorm(normalized_shape): weight (ones) and bias
// (zeros) of normalized_shape; Eps 1e-5.
type LayerNorm struct {
	Base
	Weight, Bias *torch.Tensor
	Shape        []int64
	Eps          float64
}

// NewLayerNorm normalises over the trailing dimensions shape.
func NewLayerNorm(shape ...int64) *LayerNorm {
	l := &LayerNorm{Shape: append([]int64(nil), shape...), Eps: 1e-5}
	l.Weight = l.RegisterParam("weight", torch.Ones(shape))
	l.Bias = l.RegisterParam("bias", torch.Zeros(shape))
	return l
}

// Forward normalises x's trailing dimensions. A bfloat16 or float16 x
// with float32 parameters (what CPU autocast gives a norm after a
// convolution or a linear layer) is normalised as PyTorch 2.x does, in
// float32 with the result in x's dtype, on libtorch 1.13 too (see
// mixedNorm).
func (l *LayerNorm) Forward(x *torch.Tensor) *torch.Tensor {
	return mixedNorm(x, l.Weight, func(x *torch.Tensor) *torch.Tensor {
		return torch.LayerNorm(x, l.Shape, l.Weight, l.Bias, l.Eps)
	})
}

// GroupNorm is nn.GroupNorm(groups, channels): weight (ones) and bias
// (zeros) of (C,); Eps 1e-5.
type GroupNorm struct {
	Base
	Weight, Bias *torch.Tensor
	Groups       int64
	Eps          float64
}

// NewGroupNorm splits channels into groups.
func NewGroupNorm(groups, channels int64) *GroupNorm {
	if groups <= 0 || channels%groups != 0 {
		panic(invalid("%d channels are not divisible into %d groups", channels, groups))
	}
	g := &GroupNorm{Groups: groups, Eps: 1e-5}
	g.Weight = g.RegisterParam("weight", torch.Ones([]int64{channels}))
	g.Bias = g.RegisterParam("bias", torch.Zeros([]int64{channels}))
	return g
}

// Forward normalises x (N, C, ...); a reduced-precision x with float32
// parameters as LayerNorm's.
func (g *GroupNorm) Forward(x *torch.Tensor) *torch.Tensor {
	return mixedNorm(x, g.Weight, func(x *torch.Tensor) *torch.Tensor {
		return torch.GroupNorm(x, g.Groups, g.Weight, g.Bias, g.Eps)
	})
}

// mixedNorm runs norm on x. PyTorch 2.x's CPU layer_norm and group_norm
// take a bfloat16 or float16 input with float32 parameters (computing in
// float32, writing x's dtype), and CPU autocast relies on it: a norm after
// a convolution or a linear layer gets a bfloat16 input. libtorch 1.13's
// kernels refuse the mix ("expected scalar type BFloat16 but found
// Float"), in Python as here. There, when the kernel would refuse it,
// mixedNorm computes the same thing as casts around norm: x to float32,
// the norm, the result back to x's dtype.
func mixedNorm(x, weight *torch.Tensor, norm func(*torch.Tensor) *torch.Tensor) *torch.Tensor {
	if weight == nil || !castNorms() {
		return norm(x)
	}
	dt := x.DType()
	if dt == weight.DType() || (dt != torch.BFloat16 && dt != torch.Float16) || weight.DType() != torch.Float32 || x.Device() != torch.CPU {
		return norm(x)
	}
	return torch.TidyTensor(func() *torch.Tensor {
		return norm(x.ToDType(torch.Float32)).ToDType(dt)
	})
}

// castNorms reports whether the CPU norms need mixedNorm's casts: libtorch
// before 2.0. A variable so that tests force either path.
var castNorms = sync.OnceValue(func() bool {
	maj, _, _ := torch.LibtorchVersion()
	return maj < 2
})

// RMSNorm is root-mean-square normalisation over the last dimension:
// x·rsqrt(mean(x²) + eps)·weight, with weight (dim) initialised to ones and
// no bias (as LLaMA's RMSNorm and PyTorch 2.4's nn.RMSNorm, whose state
// dict it matches). Eps defaults to 1e-6.
type RMSNorm struct {
	Base
	Weight *torch.Tensor
	Eps    float64
}

// NewRMSNorm normalises over a last dimension of size dim.
func NewRMSNorm(dim int64) *RMSNorm {
	r := &RMSNorm{Eps: 1e-6}
	r.Weight = r.RegisterParam("weight", torch.Ones([]int64{dim}))
	return r
}

// Forward normalises x (..., dim).
func (r *RMSNorm) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		ms := x.Square().MeanDim([]int64{-1}, true)
		return x.Mul(ms.AddScalar(r.Eps).Rsqrt()).Mul(r.Weight)
	})
}
