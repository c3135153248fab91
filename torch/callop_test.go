package torch

import (
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCallOp(t *testing.T) {
	settle()
	live := LiveTensors()
	Tidy(func() {
		a := FromSlice([]float32{1, -2, 3, 4, 5, -6}, []int64{2, 3})
		b := FromSlice([]float32{1, 1, 1, 2, 2, 2}, []int64{2, 3})

		r := CallOp("aten::add", "Tensor", a, b, 2)
		require.Len(t, r, 1)
		require.Equal(t, []float32{3, 0, 5, 8, 9, -2}, r[0].(*Tensor).Float32s())

		// Default and trailing defaults: alpha defaults to 1.
		require.Equal(t, []float32{2, -1, 4, 6, 7, -4}, CallOp("aten::add", "Tensor", a, b, Default)[0].(*Tensor).Float32s())
		require.Equal(t, []float32{2, -1, 4, 6, 7, -4}, CallOp("aten::add", "Tensor", a, b)[0].(*Tensor).Float32s())

		// Tuple results.
		r = CallOp("aten::max", "dim", a, 1, false)
		require.Len(t, r, 2)
		require.Equal(t, []float32{3, 5}, r[0].(*Tensor).Float32s())
		require.Equal(t, []int64{2, 1}, r[1].(*Tensor).Int64s())

		// Lists in and out, strings, int lists, None.
		parts := CallOp("aten::split", "Tensor", a, int64(2), 1)[0].([]*Tensor)
		require.Len(t, parts, 2)
		require.Equal(t, []int64{2, 2}, parts[0].Shape())
		cat := CallOp("aten::cat", "", parts, -1)[0].(*Tensor)
		require.True(t, cat.Equal(a))
		require.Equal(t, []float32{2, 3}, CallOp("aten::sum", "dim_IntList", a, []int{1}, false, nil)[0].(*Tensor).Float32s())
		g := CallOp("aten::gelu", "", a, "tanh")[0].(*Tensor)
		require.InDeltaSlice(t, a.GeluTanh().Float32s(), g.Float32s(), 1e-6)
		v := CallOp("aten::linalg_vector_norm", "", a, 1.0, []int64{0, 1}, false, nil)[0].(*Tensor)
		require.InDelta(t, 21.0, v.Item(), 1e-6)
		w := CallOp("aten::pow", "Tensor_Scalar", a, float32(2))[0].(*Tensor)
		require.Equal(t, []float32{1, 4, 9, 16, 25, 36}, w.Float32s())

		// Factories: DType, Device, nil.
		z := CallOp("aten::zeros", "", []int64{2, 3}, Float64, nil, CPU, nil)[0].(*Tensor)
		require.Equal(t, Float64, z.DType())
		require.Equal(t, []int64{2, 3}, z.Shape())

		// Scalar results.
		require.Equal(t, 5.0, CallOp("aten::item", "", a.Max())[0])
		require.Equal(t, int64(3), CallOp("aten::size", "int", a, 1)[0])
		require.Equal(t, true, CallOp("aten::allclose", "", a, a.Clone())[0])
		require.Equal(t, true, CallOp("aten::is_floating_point", "", a)[0])
		ce := CallOp("aten::cross_entropy_loss", "", Zeros([]int64{1, 4}), FromSlice([]int64{2}, nil), nil, ReduceSum, -100, 0.0)
		require.InDelta(t, math.Log(4), ce[0].(*Tensor).Item(), 1e-6)

		// Autograd goes through CallOp too.
		x := FromSlice([]float32{1, 2, 3}, nil, RequiresGrad)
		y := CallOp("aten::mul", "Tensor", x, x)[0].(*Tensor)
		CallOp("aten::sum", "", y, nil)[0].(*Tensor).Backward()
		require.Equal(t, []float32{2, 4, 6}, x.Grad().Float32s())

		// Errors: unknown op, bad argument type, C++ errors.
		var te *Error
		require.ErrorAs(t, Try(func() { CallOp("aten::no_such_op", "", a) }), &te)
		require.Contains(t, te.Msg, "no operator aten::no_such_op")
		require.ErrorAs(t, Try(func() { CallOp("aten::add", "Tensor", a, struct{}{}) }), &te)
		require.Contains(t, te.Msg, "unsupported type struct {}")
		require.ErrorAs(t, Try(func() { CallOp("aten::mm", "", a, b) }), &te)
		require.Equal(t, "aten::mm", te.Op)
		require.ErrorAs(t, Try(func() { CallOp("aten::add", "Tensor", a, b, 1, 2, 3) }), &te)
	})
	require.Equal(t, live, LiveTensors(), "CallOp results belong to the Tidy scope")
}

// TestFinalizerSafetyNet: tensors dropped without Free are released by the
// slab finalizer once their slab is unreachable.
func TestFinalizerSafetyNet(t *testing.T) {
	settle()
	live := LiveTensors()
	for i := 0; i < 4*slabSize; i++ {
		_ = Ones([]int64{1}) // dropped without Free
	}
	require.Equal(t, live+4*slabSize, LiveTensors())
	// Move allocation on to a fresh slab so the dropped ones' slabs are unreachable.
	for i := 0; i < 2*slabSize; i++ {
		Ones([]int64{1}).Free()
	}
	deadline := time.Now().Add(5 * time.Second)
	for LiveTensors() > live && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, live, LiveTensors())
}

func TestOpSchema(t *testing.T) {
	for _, tc := range []struct {
		name, overload, want string
		ok                   bool
	}{
		{"aten::add", "Tensor", "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", true},
		{"aten::relu", "", "aten::relu(Tensor self) -> Tensor", true},
		{"torchfit_none::nothing", "", "", false},
		{"aten::add", "no_such_overload", "", false},
	} {
		got, err := OpSchema(tc.name, tc.overload)
		if !tc.ok {
			var te *Error
			require.ErrorAs(t, err, &te, "%s.%s", tc.name, tc.overload)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}
