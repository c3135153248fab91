package ptfile_test

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

type record struct {
	name   string
	data   []byte
	method uint16
}

// mkzip builds a zip of records (stored unless a method is given).
func mkzip(t testing.TB, recs ...record) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, r := range recs {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: r.name, Method: r.method})
		require.NoError(t, err)
		_, err = w.Write(r.data)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	return b.Bytes()
}

func binint(v int64) string {
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], uint32(int32(v)))
	return "J" + string(w[:])
}

func long1(v int64) string {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], uint64(v))
	return "\x8a\x08" + string(w[:])
}

func ints(xs ...int64) string {
	s := "("
	for _, x := range xs {
		s += long1(x)
	}
	return s + "t"
}

// tensorPickle is data.pkl for one tensor via _rebuild_tensor_v2.
func tensorPickle(cls string, numel, offset int64, size, stride string) []byte {
	return []byte("\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(" +
		"(X\x07\x00\x00\x00storagectorch\n" + cls + "\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu" + long1(numel) + "tQ" +
		binint(offset) + size + stride + "\x89}tR.")
}

func withPickle(t testing.TB, pkl []byte, storage []byte) []byte {
	return mkzip(t, record{name: "a/data.pkl", data: pkl}, record{name: "a/data/0", data: storage}, record{name: "a/version", data: []byte("3\n")})
}

func TestLoadCorrupt(t *testing.T) {
	valid, err := ptfile.SaveBytes(ptfile.NewDict("w", torch.Arange(0, 64, 1, torch.Float32), "n", 3))
	require.NoError(t, err)
	twelve := make([]byte, 12)
	crcBad := append([]byte(nil), valid...)
	{
		zr, err := zip.NewReader(bytes.NewReader(valid), int64(len(valid)))
		require.NoError(t, err)
		for _, f := range zr.File {
			if strings.HasSuffix(f.Name, "data/0") {
				off, _ := f.DataOffset()
				crcBad[off+5] ^= 0x40
			}
		}
	}
	cases := []struct {
		name string
		data []byte
		msg  string
	}{
		{"empty", nil, "empty"},
		{"random", []byte("\x13\x99 this is not a checkpoint at all, just bytes"), "not a zip"},
		{"zip without data.pkl", mkzip(t, record{name: "a/version", data: []byte("3\n")}), "no <archive>/data.pkl"},
		{"torchscript", mkzip(t, record{name: "m/constants.pkl", data: []byte("x")}, record{name: "m/code/x.py", data: nil}), "TorchScript"},
		{"missing storage record", mkzip(t, record{name: "a/data.pkl", data: tensorPickle("FloatStorage", 3, 0, ints(3), ints(1))}), "missing"},
		{"record shorter than numel", withPickle(t, tensorPickle("FloatStorage", 4, 0, ints(4), ints(1)), twelve), "holds 12 bytes"},
		{"stride past storage", withPickle(t, tensorPickle("FloatStorage", 3, 0, ints(3), ints(2)), twelve), "needs 5 elements"},
		{"offset past storage", withPickle(t, tensorPickle("FloatStorage", 3, 3, ints(1), ints(1)), twelve), "needs 4 elements"},
		{"huge numel", withPickle(t, tensorPickle("FloatStorage", 1<<60, 0, ints(3), ints(1)), twelve), "holds 12 bytes"},
		{"huge numel bytes", withPickle(t, tensorPickle("DoubleStorage", 1<<61, 0, ints(3), ints(1)), twelve), "declares"},
		{"huge size", withPickle(t, tensorPickle("FloatStorage", 3, 0, ints(1<<40, 1<<40), ints(0, 0)), twelve), "overflows"},
		{"huge empty size", withPickle(t, tensorPickle("FloatStorage", 3, 0, ints(0, 1<<40, 1<<40), ints(1, 1, 1)), twelve), "overflows"},
		{"negative stride", withPickle(t, tensorPickle("FloatStorage", 3, 2, ints(3), ints(-1)), twelve), "invalid"},
		{"negative offset", withPickle(t, tensorPickle("FloatStorage", 3, -1, ints(3), ints(1)), twelve), "offset"},
		{"rank mismatch", withPickle(t, tensorPickle("FloatStorage", 3, 0, ints(3), ints(1, 1)), twelve), "differ in length"},
		{"unknown storage class", withPickle(t, tensorPickle("EvilStorage", 3, 0, ints(3), ints(1)), twelve), "not allowed"},
		{"disallowed global", withPickle(t, []byte("\x80\x02cos\nsystem\nX\x02\x00\x00\x00lsR."), nil), "global os.system is not allowed"},
		{"builtins eval", withPickle(t, []byte("\x80\x02c__builtin__\neval\n."), nil), "not allowed"},
		{"stack global", withPickle(t, []byte("\x80\x04\x8c\x02os\x8c\x06system\x93."), nil), "not allowed"},
		{"unknown opcode", withPickle(t, []byte("\x80\x02I1\n."), nil), "not supported"},
		{"underflow", withPickle(t, []byte("\x80\x02."), nil), "underflow"},
		{"missing memo", withPickle(t, []byte("\x80\x02h\x05."), nil), "memo 5"},
		{"no stop", withPickle(t, []byte("\x80\x02N"), nil), "truncated"},
		{"string past end", withPickle(t, []byte("\x80\x02X\xff\xff\xff\x7fab."), nil), "truncated"},
		{"self-containing list", withPickle(t, []byte("\x80\x02]q\x00h\x00a."), nil), "contains itself"},
		{"list key", withPickle(t, []byte("\x80\x02}]K\x01s."), nil), "key"},
		{"append to int", withPickle(t, []byte("\x80\x02K\x01K\x02a."), nil), "APPEND"},
		{"reduce non-global", withPickle(t, []byte("\x80\x02K\x01)R."), nil), "REDUCE"},
		{"bare storage", withPickle(t, []byte("\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x03tQ."), twelve), "bare storage"},
		{"compressed storage", mkzip(t, record{name: "a/data.pkl", data: tensorPickle("FloatStorage", 3, 0, ints(3), ints(1))},
			record{name: "a/data/0", data: twelve, method: zip.Deflate}), "compressed"},
		{"checksum", crcBad, "checksum"},
		{"big endian", mkzip(t, record{name: "a/data.pkl", data: []byte("\x80\x02N.")}, record{name: "a/byteorder", data: []byte("big")}), "byte order"},
	}
	torch.CollectGarbage()
	before := torch.LiveTensors()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := ptfile.LoadBytes(c.data)
			require.Error(t, err, "loaded %v", v)
			require.ErrorIs(t, err, ptfile.ErrBadFile)
			require.ErrorContains(t, err, c.msg)
		})
	}
	// Every truncation of a valid file is an error.
	for n := 0; n < len(valid); n += 3 {
		_, err := ptfile.LoadBytes(valid[:n])
		require.Error(t, err, "truncated to %d bytes", n)
	}
	require.Equal(t, before, torch.LiveTensors(), "failed loads release what they created")
}

func TestLoadLegacyFormat(t *testing.T) {
	var b64 string
	pyref.Run(t, `
import io, base64
buf = io.BytesIO()
torch.save({"a": torch.ones(2)}, buf, _use_new_zipfile_serialization=False)
emit(base64.b64encode(buf.getvalue()).decode())
`, nil, &b64)
	data := decodeB64(t, b64)
	_, err := ptfile.LoadBytes(data)
	require.ErrorIs(t, err, ptfile.ErrLegacyFormat)
	require.ErrorContains(t, err, "re-save")
	require.True(t, errors.Is(err, ptfile.ErrLegacyFormat))
}
