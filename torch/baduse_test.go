package torch_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// requireTorchPanic runs fn and requires it to panic with a *torch.Error
// (not to crash the process, nor to return quietly).
func requireTorchPanic(t *testing.T, fn func()) *torch.Error {
	t.Helper()
	err := torch.Try(fn)
	require.Error(t, err)
	var te *torch.Error
	require.True(t, errors.As(err, &te), "%T: %v", err, err)
	return te
}

// A DType that is no libtorch ScalarType (negative, or past its int8_t
// range) is an *Error, where libtorch indexed past its tables (SIGSEGV) or
// wrapped it to another type (256 → uint8).
func TestInvalidDTypePanics(t *testing.T) {
	for _, dt := range []torch.DType{-1, -128, 128, 200, 256, 1000} {
		for name, fn := range map[string]func(){
			"Zeros":     func() { torch.Zeros([]int64{2}, dt) },
			"ToDType":   func() { torch.Ones([]int64{2}).ToDType(dt) },
			"ZerosLike": func() { torch.ZerosLike(torch.Ones([]int64{2}), dt) },
		} {
			t.Run(name+"/"+dt.String(), func(t *testing.T) {
				torch.Tidy(func() { requireTorchPanic(t, fn) })
			})
		}
	}
}

// Gradients checks its arguments before libtorch reads them: a nil output
// or input dereferenced a null handle (SIGSEGV), and gradOutputs shorter
// than outputs were read past their end.
func TestGradientsBadArguments(t *testing.T) {
	torch.Tidy(func() {
		x := torch.Randn([]int64{3}, torch.RequiresGrad)
		y := x.Exp()
		for _, tc := range []struct {
			name                 string
			outputs, inputs, gos []*torch.Tensor
			nilTensor            bool
		}{
			{"nil output", []*torch.Tensor{nil}, []*torch.Tensor{x}, nil, true},
			{"nil input", []*torch.Tensor{y.Sum()}, []*torch.Tensor{nil}, nil, true},
			{"too few gradOutputs", []*torch.Tensor{y, y}, []*torch.Tensor{x}, []*torch.Tensor{torch.OnesLike(y)}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := requireTorchPanic(t, func() { torch.Gradients(tc.outputs, tc.inputs, tc.gos, true, false) })
				require.Equal(t, tc.nilTensor, errors.Is(e, torch.ErrNilTensor), "%v", e)
			})
		}
		// A nil gradOutput for a scalar output stays None.
		g := torch.Gradients([]*torch.Tensor{y.Sum()}, []*torch.Tensor{x}, []*torch.Tensor{nil}, false, false)
		require.True(t, g[0].AllClose(y, 1e-6, 1e-6))
	})
}

// SetGrad refuses a gradient that cannot be the tensor's, as PyTorch's
// grad setter does; it was stored, and an optimizer stepped with it.
func TestSetGradMismatch(t *testing.T) {
	torch.Tidy(func() {
		x := torch.Randn([]int64{3}, torch.RequiresGrad)
		for _, tc := range []struct {
			name string
			g    *torch.Tensor
		}{
			{"shape", torch.Ones([]int64{5})},
			{"rank", torch.Ones([]int64{3, 1})},
			{"dtype", torch.Ones([]int64{3}, torch.Float64)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				requireTorchPanic(t, func() { x.SetGrad(tc.g) })
				require.Nil(t, x.Grad())
			})
		}
		x.SetGrad(torch.Ones([]int64{3}))
		require.Equal(t, []float32{1, 1, 1}, x.Grad().Float32s())
		x.SetGrad(nil)
		require.Nil(t, x.Grad())
	})
}

// Recompute's misuse: a nil function, a nil output under grad (libtorch
// 1.13 terminated the process), and a recomputation that returns another
// shape (the gradient was summed into it silently).
func TestRecomputeMisuse(t *testing.T) {
	torch.Tidy(func() {
		x := torch.Randn([]int64{3}, torch.RequiresGrad)
		t.Run("nil fn", func(t *testing.T) {
			requireTorchPanic(t, func() { torch.Recompute(nil, x) })
		})
		t.Run("nil output", func(t *testing.T) {
			requireTorchPanic(t, func() {
				torch.Recompute(func([]*torch.Tensor) []*torch.Tensor { return []*torch.Tensor{nil} }, x)
			})
		})
		t.Run("nil output without grad", func(t *testing.T) {
			torch.NoGrad(func() {
				out := torch.Recompute(func([]*torch.Tensor) []*torch.Tensor { return []*torch.Tensor{nil} }, x)
				require.Equal(t, []*torch.Tensor{nil}, out)
			})
		})
		for _, tc := range []struct {
			name  string
			again func(x *torch.Tensor) *torch.Tensor
		}{
			{"shape", func(x *torch.Tensor) *torch.Tensor { return x.Exp().Sum() }},
			{"dtype", func(x *torch.Tensor) *torch.Tensor { return x.Exp().ToDType(torch.Float64) }},
		} {
			t.Run("impure/"+tc.name, func(t *testing.T) {
				runs := 0
				out := torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
					runs++
					if runs > 1 {
						return []*torch.Tensor{tc.again(in[0])}
					}
					return []*torch.Tensor{in[0].Exp()}
				}, x)
				requireTorchPanic(t, func() { out[0].Sum().Backward() })
				require.Equal(t, 2, runs)
			})
		}
		t.Run("pure", func(t *testing.T) {
			x.SetGrad(nil)
			out := torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor { return []*torch.Tensor{in[0].Exp()} }, x)
			out[0].Sum().Backward()
			require.True(t, x.Grad().AllClose(x.Exp(), 1e-6, 1e-6))
		})
	})
}

// Autocast takes only the dtypes autocast computes in; libtorch 2.4 and
// later took any on the CPU.
func TestAutocastDType(t *testing.T) {
	for _, dt := range []torch.DType{torch.Float32, torch.Int64, torch.Float64, -1} {
		t.Run(dt.String(), func(t *testing.T) {
			ran := false
			requireTorchPanic(t, func() { torch.Autocast(torch.CPU, dt, func() { ran = true }) })
			require.False(t, ran)
		})
	}
}
