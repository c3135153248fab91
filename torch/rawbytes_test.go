package torch

import (
	"bytes"
	bin "encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// le returns vs as little-endian bytes (what torch.save stores on x86/arm).
func le(t *testing.T, vs any) []byte {
	var b bytes.Buffer
	require.NoError(t, bin.Write(&b, bin.LittleEndian, vs))
	return b.Bytes()
}

func TestRawBytes(t *testing.T) {
	settle()
	live := LiveTensors()
	// view returns fn(base) for a new base 2×3 tensor.
	view := func(fn func(base *Tensor) *Tensor) func() *Tensor {
		return func() *Tensor {
			base := FromSlice([]float32{1, 2, 3, 4, 5, 6}, []int64{2, 3})
			defer base.Free() // the view keeps its storage
			return fn(base)
		}
	}
	cases := []struct {
		name  string
		t     func() *Tensor
		want  func(t *testing.T) []byte
		alias bool // data is the tensor's own memory
	}{
		{"contiguous float32", view((*Tensor).Ref), func(t *testing.T) []byte { return le(t, []float32{1, 2, 3, 4, 5, 6}) }, true},
		{"transposed view", view((*Tensor).T), func(t *testing.T) []byte { return le(t, []float32{1, 4, 2, 5, 3, 6}) }, false},
		{"narrowed view", view(func(b *Tensor) *Tensor { return b.Narrow(1, 1, 2) }), func(t *testing.T) []byte { return le(t, []float32{2, 3, 5, 6}) }, false},
		{"contiguous row view", view(func(b *Tensor) *Tensor { return b.Narrow(0, 1, 1) }), func(t *testing.T) []byte { return le(t, []float32{4, 5, 6}) }, true},
		{"int64", func() *Tensor { return FromSlice([]int64{-1, 1 << 40}, nil) }, func(t *testing.T) []byte { return le(t, []int64{-1, 1 << 40}) }, true},
		{"bfloat16", func() *Tensor { return FromSlice([]float32{1, -2}, nil, BFloat16) }, func(t *testing.T) []byte { return []byte{0x80, 0x3f, 0x00, 0xc0} }, true},
		{"bool", func() *Tensor { return FromSlice([]bool{true, false}, nil) }, func(t *testing.T) []byte { return []byte{1, 0} }, true},
		{"empty", func() *Tensor { return Zeros([]int64{0, 3}) }, func(t *testing.T) []byte { return nil }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := c.t()
			defer x.Free()
			var got []byte
			require.NoError(t, x.RawBytes(func(data []byte) error {
				got = append([]byte(nil), data...)
				if c.alias {
					// Writing to the tensor shows in data: no copy.
					x.FillIn(0)
					require.Equal(t, make([]byte, len(data)), data, "data aliases the tensor's memory")
				}
				return nil
			}))
			require.Equal(t, len(c.want(t)), len(got))
			if len(got) > 0 {
				require.Equal(t, c.want(t), got)
			}
		})
	}

	t.Run("f's error", func(t *testing.T) {
		errStop := errors.New("stop")
		x := Ones([]int64{2})
		defer x.Free()
		require.ErrorIs(t, x.RawBytes(func([]byte) error { return errStop }), errStop)
	})
	t.Run("freed", func(t *testing.T) {
		x := Ones([]int64{2})
		x.Free()
		called := false
		err := x.RawBytes(func([]byte) error { called = true; return nil })
		require.ErrorIs(t, err, ErrFreed)
		require.False(t, called)
	})
	require.Equal(t, live, LiveTensors())
}

func TestFromReader(t *testing.T) {
	settle()
	live := LiveTensors()
	t.Run("round trip", func(t *testing.T) {
		for _, src := range []*Tensor{
			FromSlice([]float32{1.5, -2, 3, 4, 5, 6}, []int64{2, 3}),
			FromSlice([]int64{-1, 1 << 40, 7}, []int64{3, 1}),
			FromSlice([]float32{1, 0.5, -7.25, 3}, []int64{2, 2}, BFloat16),
			FromSlice([]bool{true, false, true}, nil),
			FromSlice([]float64{3.5}, []int64{}),
		} {
			var data []byte
			require.NoError(t, src.RawBytes(func(b []byte) error { data = append([]byte(nil), b...); return nil }))
			r := bytes.NewReader(append(data, "tail"...))
			got, err := FromReader(r, src.Shape(), src.DType())
			require.NoError(t, err)
			require.Equal(t, src.Shape(), got.Shape())
			require.Equal(t, src.DType(), got.DType())
			require.True(t, got.Equal(src), "%v", src)
			require.True(t, got.IsContiguous())
			require.Equal(t, CPU, got.Device())
			rest, _ := io.ReadAll(r)
			require.Equal(t, "tail", string(rest), "reads exactly the tensor's bytes")
			got.Free()
			src.Free()
		}
	})
	t.Run("no elements", func(t *testing.T) {
		got, err := FromReader(bytes.NewReader(nil), []int64{0, 4}, Float32)
		require.NoError(t, err)
		require.Equal(t, []int64{0, 4}, got.Shape())
		got.Free()
	})
	errs := []struct {
		name  string
		r     io.Reader
		shape []int64
		dt    DType
		is    error // matched with errors.Is; nil: an *Error
	}{
		{"short", bytes.NewReader(make([]byte, 10)), []int64{3}, Float32, io.ErrUnexpectedEOF},
		{"nothing", bytes.NewReader(nil), []int64{3}, Float32, io.EOF},
		{"reader fails", io.MultiReader(bytes.NewReader(make([]byte, 4)), iotestErr{}), []int64{3}, Float32, errIOTest},
		{"unknown dtype", bytes.NewReader(make([]byte, 12)), []int64{3}, DType(99), nil},
		{"negative size", bytes.NewReader(make([]byte, 12)), []int64{-3}, Float32, nil},
	}
	for _, c := range errs {
		t.Run(c.name, func(t *testing.T) {
			got, err := FromReader(c.r, c.shape, c.dt)
			require.Nil(t, got)
			require.Error(t, err)
			if c.is != nil {
				require.ErrorIs(t, err, c.is)
			} else {
				var te *Error
				require.ErrorAs(t, err, &te)
			}
		})
	}
	t.Run("out of memory", func(t *testing.T) {
		settle()
		before := LiveTensors()
		require.NoError(t, SetMemoryLimit(CPU, MustMemoryStats(CPU).Allocated+1<<20))
		defer SetMemoryLimit(CPU, 0)
		r := bytes.NewReader(make([]byte, 8<<20))
		got, err := FromReader(r, []int64{2 << 20}, Float32)
		require.Nil(t, got)
		require.ErrorIs(t, err, ErrOutOfMemory)
		require.Equal(t, int64(8<<20), int64(r.Len()), "nothing read when the tensor cannot be allocated")
		require.Equal(t, before, LiveTensors())
	})
	require.Equal(t, live, LiveTensors(), "failed reads release the tensor")
}

var errIOTest = errors.New("disk on fire")

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errIOTest }
