package torch

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
)

// TestStringMatchesPython compares String with Python's repr of the same
// tensors, computed at test time.
func TestStringMatchesPython(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		py string
		fn func() *Tensor
	}{
		{"torch.tensor([[1., 2.], [3., 4.]])", func() *Tensor { return FromSlice([]float32{1, 2, 3, 4}, []int64{2, 2}) }},
		{"torch.tensor([1, 2, 3])", func() *Tensor { return FromSlice([]int64{1, 2, 3}, nil) }},
		{"torch.tensor([1.5, -2.25, 3.0])", func() *Tensor { return FromSlice([]float32{1.5, -2.25, 3}, nil) }},
		{"torch.tensor([0.1, 0.123456, -10.5])", func() *Tensor { return FromSlice([]float32{0.1, 0.123456, -10.5}, nil) }},
		{"torch.tensor(3.5)", func() *Tensor { return Scalar(3.5) }},
		{"torch.tensor(3.)", func() *Tensor { return Scalar(3) }},
		{"torch.tensor(-7)", func() *Tensor { return Scalar(-7, Int64) }},
		{"torch.tensor(1e-7)", func() *Tensor { return Scalar(1e-7) }},
		{"torch.tensor(True)", func() *Tensor { return Scalar(1, Bool) }},
		{"torch.tensor([1.5, 2.], dtype=torch.float64)", func() *Tensor { return FromSlice([]float64{1.5, 2}, nil) }},
		{"torch.tensor([1., 2.], requires_grad=True)", func() *Tensor { return FromSlice([]float32{1, 2}, nil, RequiresGrad) }},
		{"torch.tensor(2.5, dtype=torch.float64, requires_grad=True)", func() *Tensor { return Scalar(2.5, Float64, RequiresGrad) }},
		{"torch.tensor([1e-5, 1.0, 100.])", func() *Tensor { return FromSlice([]float32{1e-5, 1, 100}, nil) }},
		{"torch.tensor([1e9, 1.])", func() *Tensor { return FromSlice([]float32{1e9, 1}, nil) }},
		{"torch.tensor([1e10, 2.5])", func() *Tensor { return FromSlice([]float32{1e10, 2.5}, nil) }},
		{"torch.tensor([2000., 1.])", func() *Tensor { return FromSlice([]float32{2000, 1}, nil) }},
		{"torch.tensor([123456.7, 0.5])", func() *Tensor { return FromSlice([]float32{123456.7, 0.5}, nil) }},
		{"torch.tensor([0.00012, 0.5])", func() *Tensor { return FromSlice([]float32{0.00012, 0.5}, nil) }},
		{"torch.tensor([-1e-6, 3e-6])", func() *Tensor { return FromSlice([]float32{-1e-6, 3e-6}, nil) }},
		{"torch.tensor([float('nan'), float('inf'), -float('inf'), 1.5])", func() *Tensor { return FromSlice([]float32{float32(nan), float32(inf), float32(-inf), 1.5}, nil) }},
		{"torch.tensor([float('nan'), 1., 20.])", func() *Tensor { return FromSlice([]float32{float32(nan), 1, 20}, nil) }},
		{"torch.tensor([float('nan'), 1e-6])", func() *Tensor { return FromSlice([]float32{float32(nan), 1e-6}, nil) }},
		{"torch.tensor([-0., 1.])", func() *Tensor { return FromSlice([]float32{float32(math.Copysign(0, -1)), 1}, nil) }},
		{"torch.zeros(2, 3)", func() *Tensor { return Zeros([]int64{2, 3}) }},
		{"torch.zeros(0)", func() *Tensor { return Zeros([]int64{0}) }},
		{"torch.zeros(0, 3)", func() *Tensor { return Zeros([]int64{0, 3}) }},
		{"torch.zeros(0, dtype=torch.int64)", func() *Tensor { return Zeros([]int64{0}, Int64) }},
		{"torch.zeros(2, 0, dtype=torch.float64)", func() *Tensor { return Zeros([]int64{2, 0}, Float64) }},
		{"torch.tensor([True, False, True])", func() *Tensor { return FromSlice([]bool{true, false, true}, nil) }},
		{"torch.tensor([[1, -20], [300, 4]], dtype=torch.int32)", func() *Tensor { return FromSlice([]int32{1, -20, 300, 4}, []int64{2, 2}) }},
		{"torch.tensor([0, 255], dtype=torch.uint8)", func() *Tensor { return FromSlice([]uint8{0, 255}, nil) }},
		{"torch.tensor([1.5, 2.25, 1000.], dtype=torch.float16)", func() *Tensor { return FromSlice([]float32{1.5, 2.25, 1000}, nil, Float16) }},
		{"torch.tensor([1.5, 2.25], dtype=torch.bfloat16)", func() *Tensor { return FromSlice([]float32{1.5, 2.25}, nil, BFloat16) }},
		{"torch.arange(30.) / 7", func() *Tensor { return Arange(0, 30, 1, Float32).DivScalar(7) }},
		{"torch.arange(100)", func() *Tensor { return Arange(0, 100, 1) }},
		{"torch.arange(100, dtype=torch.float64) * 1.5", func() *Tensor { return Arange(0, 100, 1, Float64).MulScalar(1.5) }},
		{"torch.tensor((torch.arange(40.) / 3).tolist(), requires_grad=True)", func() *Tensor {
			return Arange(0, 40, 1, Float32).DivScalar(3).Detach().SetRequiresGrad(true)
		}},
		{"torch.arange(24.).reshape(2, 3, 4)", func() *Tensor { return Arange(0, 24, 1, Float32).Reshape(2, 3, 4) }},
		{"torch.arange(24).reshape(2, 3, 2, 2) - 5", func() *Tensor { return Arange(0, 24, 1).Reshape(2, 3, 2, 2).SubScalar(5) }},
		{"torch.arange(1000.)", func() *Tensor { return Arange(0, 1000, 1, Float32) }},
		{"torch.arange(1001.)", func() *Tensor { return Arange(0, 1001, 1, Float32) }},
		{"torch.arange(2000).reshape(40, 50)", func() *Tensor { return Arange(0, 2000, 1).Reshape(40, 50) }},
		{"(torch.arange(3000.) / 7).reshape(10, 10, 30)", func() *Tensor { return Arange(0, 3000, 1, Float32).DivScalar(7).Reshape(10, 10, 30) }},
		{"torch.arange(1200.).reshape(2, 600)", func() *Tensor { return Arange(0, 1200, 1, Float32).Reshape(2, 600) }},
		{"torch.arange(1200.).reshape(600, 2).t()", func() *Tensor { return Arange(0, 1200, 1, Float32).Reshape(600, 2).T() }},
		{"torch.linspace(-1, 1, 7).reshape(7, 1)", func() *Tensor { return Linspace(-1, 1, 7).Reshape(7, 1) }},
		{"torch.ones(2, 2, dtype=torch.int16)", func() *Tensor { return Ones([]int64{2, 2}, Int16) }},
		{"torch.full((3,), -2.5, dtype=torch.float64, requires_grad=True)", func() *Tensor { return Full([]int64{3}, -2.5, Float64, RequiresGrad) }},
	}
	pys := make([]string, len(cases))
	for k, c := range cases {
		pys[k] = c.py
	}
	var want []string
	pyref.Run(t, `emit([repr(eval(e)) for e in inp])`, pys, &want)
	live := LiveTensors()
	for k, c := range cases {
		t.Run(c.py, func(t *testing.T) {
			x := TidyTensor(c.fn)
			defer x.Free()
			require.Equal(t, want[k], x.String())
		})
	}
	require.Equal(t, live, LiveTensors())

	var freed *Tensor = Scalar(1)
	freed.Free()
	require.Equal(t, "tensor(freed)", freed.String())
	require.Equal(t, "tensor(nil)", (*Tensor)(nil).String())
}
