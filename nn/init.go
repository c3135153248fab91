package nn

import (
	"math"

	"github.com/torchfit/torchfit/torch"
)

// Initialisers in the manner of torch.nn.init. Each fills t in place under
// NoGrad (so it works on parameters that require grad) and returns t. With
// the same seed (torch.ManualSeed) and the same calls they draw the same
// numbers as PyTorch's, since both use libtorch's generator.

// FanMode picks the fan that Kaiming initialisation preserves.
type FanMode int

// Fan modes.
const (
	FanIn  FanMode = iota // preserve the forward pass's variance (PyTorch's default)
	FanOut                // preserve the backward pass's variance
)

// CalculateGain is torch.nn.init.calculate_gain: the recommended gain for a
// nonlinearity ("linear", "conv1d", "conv2d", "conv_transpose1d",
// "conv_transpose2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu").
// param is leaky_relu's negative slope (PyTorch's default is 0.01; pass
// math.NaN() for that default).
func CalculateGain(nonlinearity string, param float64) float64 {
	switch nonlinearity {
	case "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid":
		return 1
	case "tanh":
		return 5.0 / 3
	case "relu":
		return math.Sqrt(2.0)
	case "leaky_relu":
		slope := param
		if math.IsNaN(slope) {
			slope = 0.01
		}
		return math.Sqrt(2.0 / (1 + slope*slope))
	case "selu":
		return 3.0 / 4
	}
	panic(invalid("unsupported nonlinearity %q", nonlinearity))
}

// Fans returns fan_in and fan_out of a weight shape as PyTorch computes them:
// dimension 1 and dimension 0 times the receptive field (the product of the
// dimensions after the second). It panics for fewer than two dimensions.
func Fans(shape []int64) (fanIn, fanOut int64) {
	if len(shape) < 2 {
		panic(invalid("fan in and fan out need at least 2 dimensions, got shape %v", shape))
	}
	rf := int64(1)
	for _, s := range shape[2:] {
		rf *= s
	}
	return shape[1] * rf, shape[0] * rf
}

func fan(t *torch.Tensor, mode FanMode) float64 {
	in, out := Fans(t.Shape())
	if mode == FanOut {
		return float64(out)
	}
	return float64(in)
}

func inPlace(t *torch.Tensor, fn func()) *torch.Tensor {
	torch.NoGrad(fn)
	return t
}

// Uniform fills t with samples uniform in [lo, hi).
func Uniform(t *torch.Tensor, lo, hi float64) *torch.Tensor {
	return inPlace(t, func() { t.UniformIn(lo, hi) })
}

// Normal fills t with samples from N(mean, std²).
func Normal(t *torch.Tensor, mean, std float64) *torch.Tensor {
	return inPlace(t, func() { t.NormalIn(mean, std) })
}

// Constant fills t with v.
func Constant(t *torch.Tensor, v float64) *torch.Tensor {
	return inPlace(t, func() { t.FillIn(v) })
}

// Zeros fills t with zeros.
func Zeros(t *torch.Tensor) *torch.Tensor { return inPlace(t, func() { t.ZeroIn() }) }

// Ones fills t with ones.
func Ones(t *torch.Tensor) *torch.Tensor { return Constant(t, 1) }

// KaimingUniform is kaiming_uniform_: U(−b, b) with b = gain·√(3/fan),
// gain = CalculateGain(nonlinearity, a). PyTorch's defaults are a = 0,
// FanIn, "leaky_relu"; its layers use a = √5, which gives b = 1/√fan_in.
func KaimingUniform(t *torch.Tensor, a float64, mode FanMode, nonlinearity string) *torch.Tensor {
	gain := CalculateGain(nonlinearity, a)
	std := gain / math.Sqrt(fan(t, mode))
	bound := math.Sqrt(3.0) * std
	return Uniform(t, -bound, bound)
}

// KaimingNormal is kaiming_normal_: N(0, std²) with std = gain/√fan.
func KaimingNormal(t *torch.Tensor, a float64, mode FanMode, nonlinearity string) *torch.Tensor {
	gain := CalculateGain(nonlinearity, a)
	std := gain / math.Sqrt(fan(t, mode))
	return Normal(t, 0, std)
}

// XavierUniform is xavier_uniform_: U(−b, b) with b = gain·√(6/(fan_in+fan_out)).
func XavierUniform(t *torch.Tensor, gain float64) *torch.Tensor {
	in, out := Fans(t.Shape())
	std := gain * math.Sqrt(2.0/float64(in+out))
	a := math.Sqrt(3.0) * std
	return Uniform(t, -a, a)
}

// XavierNormal is xavier_normal_: N(0, std²) with std = gain·√(2/(fan_in+fan_out)).
func XavierNormal(t *torch.Tensor, gain float64) *torch.Tensor {
	in, out := Fans(t.Shape())
	std := gain * math.Sqrt(2.0/float64(in+out))
	return Normal(t, 0, std)
}

// TruncNormal is trunc_normal_: N(mean, std²) restricted to [a, b], drawn
// by inverse-CDF sampling exactly as PyTorch does (PyTorch's defaults:
// mean 0, std 1, a −2, b 2).
func TruncNormal(t *torch.Tensor, mean, std, a, b float64) *torch.Tensor {
	normCDF := func(x float64) float64 { return (1 + math.Erf(x/math.Sqrt2)) / 2 }
	l := normCDF((a - mean) / std)
	u := normCDF((b - mean) / std)
	return inPlace(t, func() {
		t.UniformIn(2*l-1, 2*u-1)
		t.ErfinvIn()
		t.MulScalarIn(std * math.Sqrt(2.0))
		t.AddScalarIn(mean)
		t.ClampIn(a, b)
	})
}
