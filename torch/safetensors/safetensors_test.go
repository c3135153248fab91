package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
)

// raw returns a copy of t's element bytes.
func raw(t *testing.T, x *torch.Tensor) []byte {
	var out []byte
	require.NoError(t, x.RawBytes(func(b []byte) error { out = append([]byte{}, b...); return nil }))
	return out
}

// shapeOf is x's shape, [] for a scalar.
func shapeOf(x *torch.Tensor) []int64 {
	if s := x.Shape(); s != nil {
		return s
	}
	return []int64{}
}

// sample is a state dict of every dtype, with special values, a scalar, an
// empty tensor and views.
func sample() torch.StateDict {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negz := float32(math.Copysign(0, -1))
	base := torch.FromSlice([]float32{1, 2, 3, 4, 5, 6}, []int64{2, 3})
	defer base.Free() // the views keep its storage
	return torch.StateDict{
		{Name: "w.f32", T: torch.FromSlice([]float32{1.5, nan, -inf, negz, 1e-45, math.MaxFloat32}, []int64{3, 2})},
		{Name: "w.f64", T: torch.FromSlice([]float64{1e-300, math.Inf(-1), -3, math.Pi}, []int64{2, 1, 2})},
		{Name: "w.bf16", T: torch.FromSlice([]float32{1, 0.5, -7.25, inf}, []int64{2, 2}, torch.BFloat16)},
		{Name: "w.f16", T: torch.FromSlice([]float32{0.25, 65504, negz}, nil, torch.Float16)},
		{Name: "n.i64", T: torch.FromSlice([]int64{1 << 62, -5, math.MinInt64}, nil)},
		{Name: "n.i32", T: torch.FromSlice([]int32{-1, 1 << 30, math.MaxInt32}, nil)},
		{Name: "n.i16", T: torch.FromSlice([]int16{-32768, 7}, nil)},
		{Name: "n.i8", T: torch.FromSlice([]int8{-128, 127, 0}, nil)},
		{Name: "n.u8", T: torch.FromSlice([]uint8{0, 255}, nil)},
		{Name: "m.bool", T: torch.FromSlice([]bool{true, false, true}, nil)},
		{Name: "scalar", T: torch.FromSlice([]float32{3.5}, []int64{})},
		{Name: "empty", T: torch.FromSlice([]float32{}, []int64{0, 3})},
		{Name: "transposed", T: base.T()},
		{Name: "narrowed", T: base.Narrow(1, 1, 2)},
		{Name: "param", T: torch.FromSlice([]float32{1, 2}, nil).SetRequiresGrad(true)},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta map[string]string
	}{
		{"no metadata", nil},
		{"empty metadata", map[string]string{}},
		{"metadata", map[string]string{"format": "pt", "z": "1", "note": "a \"quoted\"\nline\x01 é\u2028"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := torch.LiveTensors()
			ts := sample()
			defer ptfile.FreeAll(ts)
			b, err := safetensors.SaveBytes(ts, tc.meta)
			require.NoError(t, err)
			n := binary.LittleEndian.Uint64(b)
			require.Zero(t, (8+n)%8, "the header is padded to 8 bytes")
			f, err := safetensors.LoadBytes(b)
			require.NoError(t, err)
			require.Equal(t, tc.meta, f.Metadata)
			got := f.Map()
			require.Len(t, got, len(ts))
			for _, nt := range ts {
				g := got[nt.Name]
				require.NotNil(t, g, nt.Name)
				require.Equal(t, nt.T.DType(), g.DType(), nt.Name)
				require.Equal(t, shapeOf(nt.T), shapeOf(g), nt.Name)
				require.Equal(t, raw(t, nt.T), raw(t, g), nt.Name)
				require.False(t, g.RequiresGrad(), nt.Name)
			}
			// Saving what was loaded writes the same bytes.
			again, err := safetensors.SaveBytes(f.Tensors, f.Metadata)
			require.NoError(t, err)
			require.Equal(t, b, again)
			f.Free()
			ptfile.FreeAll(ts)
			ts = nil
			require.Equal(t, before, torch.LiveTensors())
		})
	}
}

// TestLayout checks the bytes against what safetensors 0.8 wrote for the
// same tensors (Python: safetensors.torch.save).
func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   torch.StateDict
		meta map[string]string
		want string
	}{
		{"one", torch.StateDict{{Name: "x", T: torch.FromSlice([]float32{1}, nil)}}, nil,
			"8\x00\x00\x00\x00\x00\x00\x00" + `{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}  ` + "\x00\x00\x80?"},
		{"empty metadata", torch.StateDict{{Name: "x", T: torch.FromSlice([]float32{1}, nil)}}, map[string]string{},
			"H\x00\x00\x00\x00\x00\x00\x00" + `{"__metadata__":{},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}` + "\x00\x00\x80?"},
		{"nothing", nil, nil, "\x08\x00\x00\x00\x00\x00\x00\x00{}      "},
		{"order and escapes", torch.StateDict{
			{Name: "z", T: torch.FromSlice([]float32{1}, nil)},
			{Name: "a", T: torch.FromSlice([]int32{1}, nil)},
			{Name: "m", T: torch.FromSlice([]float32{1}, nil)},
			{Name: "k<>\u2028\x01é", T: torch.FromSlice([]float32{}, []int64{0, 2})},
			{Name: "b", T: torch.FromSlice([]bool{false, false}, nil)},
			{Name: "c", T: torch.FromSlice([]int64{0}, nil)},
		}, map[string]string{"a": "x\"\n"},
			"x\x01\x00\x00\x00\x00\x00\x00" + `{"__metadata__":{"a":"x\"\n"},"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},` +
				`"k<>` + "\u2028" + `\u0001é":{"dtype":"F32","shape":[0,2],"data_offsets":[8,8]},"m":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},` +
				`"z":{"dtype":"F32","shape":[1],"data_offsets":[12,16]},"a":{"dtype":"I32","shape":[1],"data_offsets":[16,20]},` +
				`"b":{"dtype":"BOOL","shape":[2],"data_offsets":[20,22]}}     ` +
				"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80?\x00\x00\x80?\x01\x00\x00\x00\x00\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer ptfile.FreeAll(tc.ts)
			b, err := safetensors.SaveBytes(tc.ts, tc.meta)
			require.NoError(t, err)
			require.Equal(t, tc.want, string(b))
		})
	}
}

func TestSaveRefuses(t *testing.T) {
	x := torch.FromSlice([]float32{1}, nil)
	defer x.Free()
	for _, tc := range []struct {
		name string
		ts   torch.StateDict
		want error
	}{
		{"twice", torch.StateDict{{Name: "a", T: x}, {Name: "a", T: x}}, safetensors.ErrBadName},
		{"metadata key", torch.StateDict{{Name: "__metadata__", T: x}}, safetensors.ErrBadName},
		{"not UTF-8", torch.StateDict{{Name: "a\xff", T: x}}, safetensors.ErrBadName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.safetensors")
			err := safetensors.Save(path, tc.ts, nil)
			require.ErrorIs(t, err, tc.want)
			entries, _ := os.ReadDir(filepath.Dir(path))
			require.Empty(t, entries, "a refused save leaves no file")
		})
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	ts := sample()
	defer ptfile.FreeAll(ts)
	path := filepath.Join(dir, "model.safetensors")
	require.NoError(t, safetensors.Save(path, ts, map[string]string{"format": "pt"}))
	sd, err := safetensors.LoadTensors(path)
	require.NoError(t, err)
	defer sd.Free()
	require.Equal(t, []string{"n.i64", "w.f64", "empty", "narrowed", "param", "scalar", "transposed", "w.f32",
		"n.i32", "w.bf16", "w.f16", "n.i16", "n.i8", "n.u8", "m.bool"}, sd.Names(), "file order: by dtype, then name")
	w, _ := sd.Get("w.f32")
	require.Equal(t, raw(t, ts[0].T), raw(t, w))

	// IsFile: by extension or by the first bytes; a torch.save zip is not one.
	other := filepath.Join(dir, "model.bin")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(other, data, 0o644))
	pt := filepath.Join(dir, "model.pt")
	require.NoError(t, ptfile.SaveTensors(pt, ts))
	require.True(t, safetensors.IsFile(path))
	require.True(t, safetensors.IsFile(other))
	require.False(t, safetensors.IsFile(pt))
	require.False(t, safetensors.IsFile(filepath.Join(dir, "missing")))

	_, err = safetensors.Load(pt)
	require.ErrorIs(t, err, safetensors.ErrBadFile)
	_, err = safetensors.Load(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// file assembles a safetensors file from a header and a buffer.
func file(header string, buf []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), buf...)
}

func TestCorrupt(t *testing.T) {
	good, err := safetensors.SaveBytes(torch.StateDict{{Name: "a", T: torch.FromSlice([]float32{1, 2}, nil)}}, nil)
	require.NoError(t, err)
	buf8 := make([]byte, 8)
	x := torch.FromSlice([]float32{1, 2}, nil)
	defer x.Free()
	zip, err := ptfile.SaveBytes(torch.StateDict{{Name: "a", T: x}}) // a torch.save file named .safetensors
	require.NoError(t, err)
	entry := func(dtype, shape, offsets string) string {
		return `{"a":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":` + offsets + `}}`
	}
	for _, tc := range []struct {
		name string
		data []byte
		kind error
		msg  string
	}{
		{"empty", nil, safetensors.ErrHeader, "shorter than the 8-byte header length"},
		{"header past the end", binary.LittleEndian.AppendUint64(nil, 1000), safetensors.ErrHeader, "a header of 1000 bytes in a file of 8"},
		{"header length absurd", append(binary.LittleEndian.AppendUint64(nil, 1<<62), "{}"...), safetensors.ErrTooLarge, "at most 100000000"},
		{"header length max+1", append(binary.LittleEndian.AppendUint64(nil, safetensors.MaxHeaderSize+1), "{}"...), safetensors.ErrTooLarge, ""},
		{"header too short", file("{", nil), safetensors.ErrHeader, "too short"},
		{"a torch.save zip", zip, safetensors.ErrHeader, "a zip archive, as torch.save writes"},
		{"truncated", good[:len(good)-1], safetensors.ErrRange, "data_offsets [0, 8] past the 7-byte buffer"},
		{"trailing bytes", append(append([]byte{}, good...), 0), safetensors.ErrRange, "hold 8 bytes of the 9-byte buffer"},
		{"not an object", file("[1, 2]", nil), safetensors.ErrHeader, "not a JSON object"},
		{"spaces", file("        ", nil), safetensors.ErrHeader, "not a JSON object"},
		{"bad JSON", file(`{"a":`, nil), safetensors.ErrHeader, "bad JSON"},
		{"two values", file(`{}{}`, nil), safetensors.ErrHeader, "more than one JSON value"},
		{"not UTF-8", file("{\"\xff\":1}", nil), safetensors.ErrHeader, "not UTF-8"},
		{"entry not an object", file(`{"a":[]}`, nil), safetensors.ErrHeader, "not an object"},
		{"no dtype", file(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, buf8), safetensors.ErrHeader, "no dtype"},
		{"no shape", file(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, buf8), safetensors.ErrHeader, "no shape"},
		{"no offsets", file(`{"a":{"dtype":"F32","shape":[2]}}`, buf8), safetensors.ErrHeader, "data_offsets is not [begin, end]"},
		{"one offset", file(entry("F32", "[2]", "[8]"), buf8), safetensors.ErrHeader, "data_offsets is not [begin, end]"},
		{"three offsets", file(entry("F32", "[2]", "[0,8,8]"), buf8), safetensors.ErrHeader, "more than 2 numbers"},
		{"negative dimension", file(entry("F32", "[-2]", "[0,8]"), buf8), safetensors.ErrHeader, "not a non-negative integer"},
		{"fractional dimension", file(entry("F32", "[2.0]", "[0,8]"), buf8), safetensors.ErrHeader, "not a non-negative integer"},
		{"string dimension", file(entry("F32", `["2"]`, "[0,8]"), buf8), safetensors.ErrHeader, "not a number"},
		{"too many dimensions", file(entry("F32", "["+strings.Repeat("1,", torch.MaxDims)+"2]", "[0,8]"), buf8), safetensors.ErrHeader, "more than"},
		{"dimension past 2^64", file(entry("F32", "[18446744073709551616]", "[0,8]"), buf8), safetensors.ErrTooLarge, ""},
		{"dimension past 2^63", file(entry("U8", "[9223372036854775808]", "[0,8]"), buf8), safetensors.ErrTooLarge, "dimension 0"},
		{"shape overflows", file(entry("F32", "[4294967296,4294967296,0]", "[0,0]"), nil), safetensors.ErrTooLarge, "overflows"},
		{"shape overflows bytes", file(entry("F64", "[2305843009213693952]", "[0,8]"), buf8), safetensors.ErrTooLarge, "overflows"},
		{"huge shape, small range", file(entry("F32", "[1000000000000]", "[0,8]"), buf8), safetensors.ErrShape, "is 4000000000000 bytes"},
		{"bytes disagree", file(entry("F32", "[3]", "[0,8]"), buf8), safetensors.ErrShape, "F32 [3] is 12 bytes, data_offsets [0, 8] hold 8"},
		{"dtype disagrees", file(entry("F64", "[2]", "[0,8]"), buf8), safetensors.ErrShape, ""},
		{"unsupported dtype", file(entry("F8_E4M3", "[8]", "[0,8]"), buf8), safetensors.ErrDType, "F8_E4M3, which torchfit has no tensors of"},
		{"unknown dtype", file(entry("F33", "[2]", "[0,8]"), buf8), safetensors.ErrDType, `unknown dtype "F33"`},
		{"reversed offsets", file(entry("F32", "[0]", "[8,0]"), buf8), safetensors.ErrRange, "end before they begin"},
		{"offsets past the buffer", file(entry("F32", "[2]", "[8,16]"), buf8), safetensors.ErrRange, "past the 8-byte buffer"},
		{"offsets far past the buffer", file(entry("U8", "[8]", "[18446744073709551600,18446744073709551608]"), buf8), safetensors.ErrRange, "past the 8-byte buffer"},
		{"offset past 2^64", file(entry("F32", "[2]", "[0,18446744073709551616]"), buf8), safetensors.ErrTooLarge, ""},
		{"gap", file(entry("F32", "[1]", "[4,8]"), buf8), safetensors.ErrRange, "leave a gap after byte 0"},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, buf8),
			safetensors.ErrRange, `overlap "a"'s, which end at 8`},
		{"same range twice", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}`, buf8),
			safetensors.ErrRange, "overlap"},
		{"duplicate name", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}}`, buf8),
			safetensors.ErrHeader, "named twice"},
		{"metadata not strings", file(`{"__metadata__":{"a":1}}`, nil), safetensors.ErrHeader, `__metadata__["a"] is not a string`},
		{"metadata a list", file(`{"__metadata__":[]}`, nil), safetensors.ErrHeader, "not an object of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := torch.LiveTensors()
			f, err := safetensors.LoadBytes(tc.data)
			require.Nil(t, f)
			require.ErrorIs(t, err, safetensors.ErrBadFile)
			require.ErrorIs(t, err, tc.kind)
			var fe *safetensors.FormatError
			require.True(t, errors.As(err, &fe))
			require.Contains(t, err.Error(), tc.msg)
			require.Equal(t, before, torch.LiveTensors())
		})
	}
}

// TestAccepts covers valid files Save would not write: ignored keys,
// null metadata, unsorted entries, whitespace (all of which safetensors 0.8
// loads too).
func TestAccepts(t *testing.T) {
	one := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1))
	two := binary.LittleEndian.AppendUint32(nil, math.Float32bits(2))
	f, err := safetensors.LoadBytes(file(` {"b":{"data_offsets":[4,8],"extra":{"x":[1,{}]},"shape":[],"dtype":"F32"}, "__metadata__":null,`+
		"\n"+`"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}  `+"\t\n", append(append([]byte{}, one...), two...)))
	require.NoError(t, err)
	defer f.Free()
	require.Equal(t, []string{"b", "a"}, f.Names(), "header order")
	require.Nil(t, f.Metadata)
	require.Equal(t, []int64{}, shapeOf(f.Map()["b"]))
	require.Equal(t, []float64{2}, f.Map()["b"].Float64s())
	require.Equal(t, []float64{1}, f.Map()["a"].Float64s())
	require.True(t, bytes.Equal(one, raw(t, f.Map()["a"])))
}
