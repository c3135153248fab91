package data

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/torchfit/torchfit/torch"
)

func seq(n, width int, base float32) *torch.Tensor {
	v := make([]float32, n*width)
	for i := range v {
		v[i] = base + float32(i)
	}
	return torch.FromSlice(v, []int64{int64(n), int64(width)})
}

func freeAll(ts ...*torch.Tensor) {
	for _, t := range ts {
		t.Free()
	}
}

func TestPadSequences(t *testing.T) {
	torch.CollectGarbage()
	base := torch.LiveTensors()
	a, b, c := seq(3, 2, 0), seq(1, 2, 10), seq(2, 2, 20) // [L, 2]
	defer freeAll(a, b, c)

	tests := []struct {
		name      string
		dim       int
		in        []*torch.Tensor
		wantShape []int64
		wantLens  []int64
		want      []float32
	}{
		{"dim0", 0, []*torch.Tensor{a, b, c}, []int64{3, 3, 2}, []int64{3, 1, 2}, []float32{
			0, 1, 2, 3, 4, 5,
			10, 11, -1, -1, -1, -1,
			20, 21, 22, 23, -1, -1}},
		{"equal lengths", 0, []*torch.Tensor{b, b}, []int64{2, 1, 2}, []int64{1, 1}, []float32{10, 11, 10, 11}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, l, err := PadSequences(tc.in, tc.dim, -1)
			require.NoError(t, err)
			defer freeAll(p, l)
			require.Equal(t, tc.wantShape, p.Shape())
			require.Equal(t, torch.Int64, l.DType())
			require.Equal(t, tc.wantLens, torch.ToSlice[int64](l))
			require.Equal(t, tc.want, torch.ToSlice[float32](p))
		})
	}

	t.Run("last dim", func(t *testing.T) {
		x, y := seq(2, 3, 0), seq(2, 1, 100) // pad dim -1: [2, 3] and [2, 1]
		defer freeAll(x, y)
		p, l, err := PadSequences([]*torch.Tensor{x, y}, -1, 0)
		require.NoError(t, err)
		defer freeAll(p, l)
		require.Equal(t, []int64{2, 2, 3}, p.Shape())
		require.Equal(t, []int64{3, 1}, torch.ToSlice[int64](l))
		require.Equal(t, []float32{0, 1, 2, 3, 4, 5, 100, 0, 0, 101, 0, 0}, torch.ToSlice[float32](p))
	})

	for _, bad := range []struct {
		name string
		in   []*torch.Tensor
		dim  int
		msg  string
	}{
		{"other dim differs", []*torch.Tensor{a, seq(1, 3, 0)}, 0, "only dimension 0 may differ"},
		{"dim out of range", []*torch.Tensor{a}, 2, "out of range"},
		{"empty", nil, 0, "no tensors"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			p, l, err := PadSequences(bad.in, bad.dim, 0)
			require.ErrorContains(t, err, bad.msg)
			require.Nil(t, p)
			require.Nil(t, l)
			for _, x := range bad.in {
				if x != a {
					x.Free()
				}
			}
		})
	}
	freeAll(a, b, c)
	require.Equal(t, base, torch.LiveTensors())
}

func TestCollate(t *testing.T) {
	torch.CollectGarbage()
	base := torch.LiveTensors()
	mk := func(i int, n int) Sample {
		return Sample{
			"audio": seq(n, 2, float32(10*i)),
			"label": torch.FromSlice([]int64{int64(i)}, []int64{}),
		}
	}
	samples := []Sample{mk(0, 2), mk(1, 3)}
	defer func() {
		for _, s := range samples {
			for _, x := range s {
				x.Free()
			}
		}
	}()

	b, err := PadCollate(map[string]Pad{"audio": {Dim: 0}})(samples)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3, 2}, b.Fields["audio"].Shape())
	require.Equal(t, []int64{2, 3}, torch.ToSlice[int64](b.Lengths["audio"]))
	require.Equal(t, []int64{0, 1}, torch.ToSlice[int64](b.Fields["label"]))
	require.Len(t, b.Tensors(), 3)
	b.Free()

	_, err = Collate(samples)
	require.ErrorContains(t, err, `field "audio"`)
	require.ErrorContains(t, err, "padding collate")

	_, err = PadCollate(map[string]Pad{"text": {}})(samples)
	require.ErrorContains(t, err, `padded field "text"`)

	odd := []Sample{samples[0], {"audio": samples[1]["audio"]}}
	_, err = Collate(odd)
	require.ErrorContains(t, err, "sample 1 has fields")

	for _, s := range samples {
		for _, x := range s {
			x.Free()
		}
	}
	require.Equal(t, base, torch.LiveTensors(), "collate errors must not leak tensors")
}

// Padding to a multiple: the batch and its micro-batch slices come in
// lengths that are multiples, and the lengths themselves are the true ones.
func TestPadCollateToMultiple(t *testing.T) {
	for _, tc := range []struct {
		lens             []int
		multiple         int
		want, wantSlice0 int64 // padded length of the batch, of samples [0, 1)
	}{
		{[]int{3, 9, 5}, 8, 16, 8},
		{[]int{8, 2, 1}, 8, 8, 8},
		{[]int{3, 9, 5}, 1, 9, 3},
		{[]int{3, 9, 5}, 0, 9, 3},
		{[]int{17, 2}, 4, 20, 20},
	} {
		samples := make([]Sample, len(tc.lens))
		for k, n := range tc.lens {
			samples[k] = Sample{"x": seq(n, 2, 0)}
		}
		b, err := PadCollate(map[string]Pad{"x": {Dim: 0, Multiple: tc.multiple}})(samples)
		require.NoError(t, err)
		require.Equal(t, []int64{int64(len(tc.lens)), tc.want, 2}, b.Fields["x"].Shape(), "%+v", tc)
		lens := make([]int64, len(tc.lens))
		for k, n := range tc.lens {
			lens[k] = int64(n)
		}
		require.Equal(t, lens, torch.ToSlice[int64](b.Lengths["x"]))
		s := b.Slice(0, 1, torch.CPU)
		require.Equal(t, tc.wantSlice0, s.Fields["x"].Size(1), "%+v", tc)
		s.Free()
		b.Free()
		for _, sm := range samples {
			sm["x"].Free()
		}
	}
	_, err := PadCollate(map[string]Pad{"x": {Dim: 0, Multiple: -1}})([]Sample{{"x": seq(1, 2, 0)}})
	require.Error(t, err)
}

// A padded batch keeps its lengths on the host: HostLengths and Slice
// read no tensor (on a device each read would wait for every kernel queued
// before it, and could not be captured in a CUDA graph), also after the
// lengths tensor moved in place, as the loader moves a batch to the
// device. A lengths tensor replaced since is read; SetLengths keeps its
// own.
func TestBatchKeepsHostLengths(t *testing.T) {
	samples := []Sample{{"x": seq(3, 2, 0)}, {"x": seq(9, 2, 0)}, {"x": seq(5, 2, 0)}, {"x": seq(2, 2, 0)}}
	defer func() {
		for _, s := range samples {
			s["x"].Free()
		}
	}()
	b, err := PadCollate(map[string]Pad{"x": {Dim: 0}})(samples)
	require.NoError(t, err)
	defer b.Free()
	// The loader's move: the same *Tensor, new contents.
	l := b.Lengths["x"]
	l.Assign(l.Clone())

	var got []int64
	var s *Batch
	calls := torch.CountCalls(func() {
		got = b.HostLengths("x")
		s = b.Slice(2, 4, torch.CPU)
	})
	defer s.Free()
	require.Empty(t, torch.HostTransfers(calls), "no tensor read")
	require.Equal(t, []int64{3, 9, 5, 2}, got)
	require.Equal(t, int64(5), s.Fields["x"].Size(1), "trimmed to the slice's longest")
	require.Equal(t, []int64{5, 2}, torch.ToSlice[int64](s.Lengths["x"]))
	calls = torch.CountCalls(func() { got = s.HostLengths("x") })
	require.Empty(t, torch.HostTransfers(calls), "a slice keeps its part")
	require.Equal(t, []int64{5, 2}, got)

	// Replaced: read, and Slice trims by what it read.
	b.Lengths["x"] = torch.FromSlice([]int64{3, 4, 5, 1}, nil)
	l.Free()
	calls = torch.CountCalls(func() { got = b.HostLengths("x") })
	require.NotEmpty(t, torch.HostTransfers(calls))
	require.Equal(t, []int64{3, 4, 5, 1}, got)
	s2 := b.Slice(0, 2, torch.CPU)
	defer s2.Free()
	require.Equal(t, int64(4), s2.Fields["x"].Size(1))
	require.Equal(t, []int64{3, 4}, s2.HostLengths("x"))

	b.SetLengths("x", []int64{1, 2, 3, 4})
	calls = torch.CountCalls(func() { got = b.HostLengths("x") })
	require.Empty(t, torch.HostTransfers(calls))
	require.Equal(t, []int64{1, 2, 3, 4}, got)
	require.Equal(t, got, torch.ToSlice[int64](b.Lengths["x"]))
	require.Panics(t, func() { b.HostLengths("y") }, "a field without lengths")
}
