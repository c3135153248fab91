package ptfile_test

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// pyDescribe is a Python function describing a loaded object as JSON the
// Go side (describe) reproduces: order and key types included.
const pyDescribe = `
import collections, base64, io, zipfile
def describe(o):
    if isinstance(o, torch.Tensor):
        return {"tensor": str(o.dtype)[6:], "shape": list(o.shape),
                "values": o.detach().reshape(-1).double().tolist(), "grad": o.requires_grad}
    if isinstance(o, dict):
        return {"dict": type(o).__name__, "items": [[describe(k), describe(v)] for k, v in o.items()]}
    if isinstance(o, list):
        return {"list": [describe(x) for x in o]}
    if isinstance(o, tuple):
        return {"tuple": [describe(x) for x in o]}
    if isinstance(o, bool) or o is None or isinstance(o, str):
        return o
    if isinstance(o, int):
        return {"int": o}
    if isinstance(o, float):
        return {"float": o}
    raise TypeError(type(o))
`

// describe is pyDescribe for Go values.
func describe(t *testing.T, v any) any {
	switch x := v.(type) {
	case *torch.Tensor:
		shape := x.Shape()
		if shape == nil {
			shape = []int64{}
		}
		return map[string]any{"tensor": x.DType().String(), "shape": shape, "values": x.Float64s(), "grad": x.RequiresGrad()}
	case *ptfile.Dict:
		kind := "dict"
		if x.Ordered {
			kind = "OrderedDict"
		}
		items := []any{}
		for _, e := range x.Entries {
			items = append(items, []any{describe(t, e.Key), describe(t, e.Value)})
		}
		return map[string]any{"dict": kind, "items": items}
	case []any:
		out := []any{}
		for _, e := range x {
			out = append(out, describe(t, e))
		}
		return map[string]any{"list": out}
	case ptfile.Tuple:
		out := []any{}
		for _, e := range x {
			out = append(out, describe(t, e))
		}
		return map[string]any{"tuple": out}
	case bool, nil, string:
		return x
	case int64:
		return map[string]any{"int": x}
	case int:
		return map[string]any{"int": x}
	case float64:
		return map[string]any{"float": x}
	}
	t.Fatalf("describe: unexpected %T", v)
	return nil
}

// canon round-trips through JSON so Go and Python descriptions compare.
func canon(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// sampleState builds a state dict covering the dtypes and shapes Save must
// handle, and a nested checkpoint around it.
func sampleState(t *testing.T) (*ptfile.Dict, torch.StateDict) {
	base := torch.FromSlice([]float32{1, 2, 3, 4, 5, 6}, []int64{2, 3})
	named := torch.StateDict{
		{Name: "w.f32", T: torch.FromSlice([]float32{1.5, -2, 3.25}, []int64{3, 1})},
		{Name: "w.f64", T: torch.FromSlice([]float64{1e-300, 2, -3}, nil)},
		{Name: "w.bf16", T: torch.FromSlice([]float32{1, 0.5, -7.25, 3}, []int64{2, 2}, torch.BFloat16)},
		{Name: "w.f16", T: torch.FromSlice([]float32{0.25, 65504}, nil, torch.Float16)},
		{Name: "n.i64", T: torch.FromSlice([]int64{1 << 40, -5, 7}, nil)},
		{Name: "m.bool", T: torch.FromSlice([]bool{true, false, true}, nil)},
		{Name: "scalar", T: torch.FromSlice([]float32{3.5}, []int64{})},
		{Name: "count", T: torch.FromSlice([]int64{0}, []int64{})},
		{Name: "empty", T: torch.FromSlice([]float32{}, []int64{0, 3})},
		{Name: "transposed", T: base.T()}, // non-contiguous source
		{Name: "narrowed", T: base.Narrow(1, 1, 2)},
		{Name: "u8", T: torch.FromSlice([]uint8{0, 255}, nil)},
		{Name: "i32", T: torch.FromSlice([]int32{-1, 1 << 30}, nil)},
	}
	sd := &ptfile.Dict{Ordered: true}
	for _, n := range named {
		sd.Set(n.Name, n.T)
	}
	ckpt := ptfile.NewDict(
		"model", sd,
		"step", 3,
		"lr", 0.1,
		"name", "x",
		"ok", true,
		"none", nil,
		"big", int64(-1)<<40,
		"hist", []any{1, 2.5, "three", ptfile.Tuple{4, 5}},
		"opt", ptfile.NewDict("state", ptfile.NewDict(0, ptfile.NewDict("step", 7, "buf", named[0].T), 1, ptfile.NewDict()),
			"param_groups", []any{ptfile.NewDict("lr", 0.01, "betas", ptfile.Tuple{0.9, 0.999}, "params", []any{0, 1})}),
	)
	return ckpt, named
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ckpt, named := sampleState(t)
	cases := []struct {
		name string
		v    any
		want any // nil: v
	}{
		{"tensor", named[0].T, nil},
		{"checkpoint", ckpt, nil},
		{"scalars", []any{int64(1), 2.5, "s", true, nil}, nil},
		{"tuple", ptfile.Tuple{int64(1), ptfile.Tuple{}, []any{}}, nil},
		{"go map sorted", map[string]*torch.Tensor{"b": named[1].T, "a": named[0].T},
			ptfile.NewDict("a", named[0].T, "b", named[1].T)},
		{"go any map", map[string]any{"z": 1, "y": []int64{2, 3}},
			ptfile.NewDict("y", []any{int64(2), int64(3)}, "z", int64(1))},
		{"int keys", map[int]any{2: "b", 1: "a"}, ptfile.NewDict(1, "a", 2, "b")},
		{"large list", make([]any, 2500), nil},
		{"int edges", []any{int64(255), int64(256), int64(65535), int64(65536), int64(-1), int64(-129),
			int64(1<<31 - 1), int64(1 << 31), int64(-1 << 31), int64(-1<<31 - 1), int64(1<<63 - 1), int64(-1 << 63)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".pt")
			require.NoError(t, ptfile.Save(path, c.v))
			got, err := ptfile.Load(path)
			require.NoError(t, err)
			defer ptfile.FreeAll(got)
			want := c.want
			if want == nil {
				want = c.v
			}
			require.Equal(t, canon(t, describe(t, want)), canon(t, describe(t, got)))
			// LoadBytes of the same bytes agrees.
			b, err := ptfile.SaveBytes(c.v)
			require.NoError(t, err)
			got2, err := ptfile.LoadBytes(b)
			require.NoError(t, err)
			defer ptfile.FreeAll(got2)
			require.Equal(t, canon(t, describe(t, want)), canon(t, describe(t, got2)))
		})
	}
}

func TestSaveTensorsLoadTensors(t *testing.T) {
	_, named := sampleState(t)
	path := filepath.Join(t.TempDir(), "sd.pt")
	require.NoError(t, ptfile.SaveTensors(path, named))
	sd, err := ptfile.LoadTensors(path)
	require.NoError(t, err)
	defer sd.Free()
	require.Equal(t, named.Names(), sd.Names())
	for k, n := range named {
		require.True(t, n.T.Equal(sd[k].T), n.Name)
		require.Equal(t, n.T.Shape(), sd[k].T.Shape(), n.Name)
		require.Equal(t, n.T.DType(), sd[k].T.DType(), n.Name)
	}

	ckpt, _ := sampleState(t)
	require.NoError(t, ptfile.Save(path, ckpt))
	_, err = ptfile.LoadTensors(path)
	require.ErrorContains(t, err, "not a tensor")
}

func TestSaveLoadInTidy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pt")
	require.NoError(t, ptfile.Save(path, ptfile.NewDict("a", torch.Ones([]int64{2}))))
	torch.CollectGarbage()
	before := torch.LiveTensors()
	var kept *torch.Tensor
	torch.Tidy(func() {
		v, err := ptfile.Load(path)
		require.NoError(t, err)
		kept = v.(*ptfile.Dict).Tensor("a").Keep()
		v2, err := ptfile.Load(path)
		require.NoError(t, err)
		_ = v2
	})
	require.Equal(t, before+1, torch.LiveTensors(), "Tidy releases what was not kept, storages included")
	require.Equal(t, []float32{1, 1}, kept.Float32s())
	kept.Free()
}

func TestSaveRejects(t *testing.T) {
	self := []any{nil}
	self[0] = self
	d := ptfile.NewDict()
	d.Set("me", d)
	freed := torch.Ones([]int64{1})
	freed.Free()
	deep := torch.Zeros(make([]int64, torch.MaxDims+1))
	defer deep.Free()
	cases := []struct {
		name string
		v    any
		msg  string
	}{
		{"chan", make(chan int), "cannot save"},
		{"cycle list", self, "itself"},
		{"cycle dict", d, "itself"},
		{"freed", freed, "released"},
		{"bad key", ptfile.NewDict(ptfile.Tuple{1}, 1), "keys must be"},
		{"uint64", uint64(1 << 63), "does not fit"},
		{"unknown dtype", torch.DType(99), "unknown dtype"},
		{"too many dimensions", deep, "17 dimensions"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.pt")
			err := ptfile.Save(path, c.v)
			require.ErrorContains(t, err, c.msg)
			require.NoFileExists(t, path)
			matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*"))
			require.Empty(t, matches, "no temp file left behind")
		})
	}
}

// TestSavePythonReads: Go writes; Python's torch.load reads the same names
// and values with weights_only=False, with weights_only=True and with its
// default (False on 1.13, True since 2.6), except where weights_only=True
// fails on PyTorch 1.13 for Python's own file of the same object too.
// PyTorch 2.x loads with TORCH_SERIALIZATION_DEBUG=1, which checks the
// storage offsets it computes from the records' layout (as mmap and meta
// loads use them) against the real ones.
func TestSavePythonReads(t *testing.T) {
	dir := t.TempDir()
	ckpt, named := sampleState(t)
	model, _ := ckpt.Get("model")
	// PyTorch 1.13's weights_only unpickler lacks BINFLOAT and LONG1, so
	// floats and big ints fail there even in files Python writes itself;
	// intCkpt has neither, and loads with weights_only=True on 1.13 too.
	intCkpt := ptfile.NewDict("model", model, "step", 3, "name", "x", "ok", false, "none", nil,
		"opt", ptfile.NewDict("state", ptfile.NewDict(0, ptfile.NewDict("step", 7), 5, []any{ptfile.Tuple{1, "a"}})))
	wantSD := &ptfile.Dict{Ordered: true}
	for _, n := range named {
		wantSD.Set(n.Name, n.T)
	}
	cases := []struct {
		name          string
		save          func(path string) error
		want          any
		floatsOrLongs bool // BINFLOAT or LONG1 in the pickle: 1.13's weights_only=True fails
	}{
		{"sd.pt", func(p string) error { return ptfile.SaveTensors(p, named) }, wantSD, false},
		{"int_ckpt.pt", func(p string) error { return ptfile.Save(p, intCkpt) }, intCkpt, false},
		{"ckpt.pth", func(p string) error { return ptfile.Save(p, ckpt) }, ckpt, true},
		{"tensor.pt", func(p string) error { return ptfile.Save(p, named[2].T) }, named[2].T, false},
	}
	var paths []string
	for _, c := range cases {
		p := filepath.Join(dir, c.name)
		require.NoError(t, c.save(p))
		paths = append(paths, p)
	}
	var got struct {
		Version [2]int
		Loads   [][3]any // weights_only=False, default, weights_only=True
	}
	pyref.Run(t, pyDescribe+`
import os
os.environ["TORCH_SERIALIZATION_DEBUG"] = "1"
out = []
for p in inp:
    a = torch.load(p, weights_only=False)
    default = describe(torch.load(p))
    try:
        b = describe(torch.load(p, weights_only=True))
    except Exception as e:
        # Does Python's own file of the same object fail the same way?
        buf = io.BytesIO()
        torch.save(a, buf)
        buf.seek(0)
        try:
            torch.load(buf, weights_only=True)
            b = "only Go's file fails: " + str(e)
        except Exception:
            b = "fails for Python's own file too"
    out.append([describe(a), default, b])
emit({"Version": `+pyVersionExpr+`, "Loads": out})
`, paths, &got)
	for k, c := range cases {
		w := canon(t, describe(t, c.want))
		r := got.Loads[k]
		require.Equal(t, w, r[0], "%s: torch.load(weights_only=False)", c.name)
		require.Equal(t, w, r[1], "%s: torch.load, PyTorch %v", c.name, got.Version)
		if c.floatsOrLongs && got.Version[0] == 1 {
			require.Equal(t, "fails for Python's own file too", r[2], "%s: torch.load(weights_only=True), PyTorch 1.13", c.name)
		} else {
			require.Equal(t, w, r[2], "%s: torch.load(weights_only=True), PyTorch %v", c.name, got.Version)
		}
	}
}

// records returns the zip's record names and contents.
func records(t *testing.T, data []byte) map[string][]byte {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	out := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		require.NoError(t, err)
		b, err := io.ReadAll(rc)
		require.NoError(t, err)
		out[f.Name] = b
	}
	return out
}

// torch2Records are the records PyTorch 2.x's torch.save writes besides
// 1.13's data.pkl, data/<key> and version; Save writes them all.
var torch2Records = []string{".data/serialization_id", ".format_version", ".storage_alignment", "byteorder"}

// requireSameFile checks that Go's file is the one PyTorch version
// pyVersion writes. Save writes PyTorch 2.x's layout: against 2.x (2.11
// tested) the whole file is byte-identical — records, their 64-byte
// alignment and padding, data descriptors, central directory and
// serialization id. PyTorch 1.13 writes none of torch2Records (nor the
// padding around them): there every record Python writes is in Go's file,
// byte-identical, and Go's has those four more.
func requireSameFile(t *testing.T, pyVersion [2]int, py, got []byte, what string) {
	t.Helper()
	pyRecs, goRecs := records(t, py), records(t, got)
	for name, b := range pyRecs {
		require.Equal(t, b, goRecs[name], "%s: record %s", what, name)
	}
	var extra []string
	for _, name := range keys(goRecs) {
		if _, ok := pyRecs[name]; !ok {
			extra = append(extra, name[strings.IndexByte(name, '/')+1:])
		}
	}
	if pyVersion[0] == 1 {
		require.Equal(t, torch2Records, extra, "%s: PyTorch %v writes none of 2.x's records", what, pyVersion)
		return
	}
	require.Empty(t, extra, "%s: PyTorch %v writes the records Go writes", what, pyVersion)
	require.True(t, bytes.Equal(py, got), "%s: PyTorch %v: Go's file is Python's, byte for byte", what, pyVersion)
}

// pyVersionExpr is a Python expression for torch's [major, minor].
const pyVersionExpr = `[int(x) for x in torch.__version__.split("+")[0].split(".")[:2]]`

// TestSaveMatchesPython: for a state dict, Go writes the file Python's
// torch.save writes for the same tensors (see requireSameFile).
func TestSaveMatchesPython(t *testing.T) {
	dir := t.TempDir()
	_, named := sampleState(t)
	// A storage starting with a data descriptor's signature: PyTorch folds
	// its bytes into the serialization id.
	named = append(named, torch.Named{Name: "pk", T: torch.FromSlice([]uint8("PK\x07\x08 looks like a descriptor"), nil)})
	goPath := filepath.Join(dir, "go", "model.pt")
	pyPath := filepath.Join(dir, "py", "model.pt")
	require.NoError(t, os.MkdirAll(filepath.Dir(goPath), 0o755))
	require.NoError(t, ptfile.SaveTensors(goPath, named))
	var py struct {
		Version [2]int
		File    string
	}
	pyref.Run(t, `
import os, base64
os.makedirs(os.path.dirname(inp[1]), exist_ok=True)
sd = torch.load(inp[0], weights_only=True)
torch.save(sd, inp[1])
emit({"Version": `+pyVersionExpr+`, "File": base64.b64encode(open(inp[1], "rb").read()).decode()})
`, []string{goPath, pyPath}, &py)
	goBytes := readFile(t, goPath)
	requireSameFile(t, py.Version, decodeB64(t, py.File), goBytes, "state dict")

	// Record data starts at 64-byte boundaries.
	zr, err := zip.NewReader(bytes.NewReader(goBytes), int64(len(goBytes)))
	require.NoError(t, err)
	for _, f := range zr.File {
		off, err := f.DataOffset()
		require.NoError(t, err)
		require.Zero(t, off%64, f.Name)
	}
}

// TestSaveMatchesPythonSizes: files of 0 to 1001 items equal Python's (see
// requireSameFile), for a dict and an OrderedDict of tensors and a list.
// The sizes reach past where PyTorch 2.x's serialization id changes how it
// orders the record names (a hash set that grows at 13, 29, 59...
// records) and where the pickle batches 1000 items, differently for a
// dict, an OrderedDict and a list (_pickle.c's batch_dict_exact,
// batch_dict and batch_list_exact).
func TestSaveMatchesPythonSizes(t *testing.T) {
	sizes := []int{0, 1, 2, 8, 9, 24, 25, 54, 55, 999, 1000, 1001}
	var py struct {
		Version [2]int
		Files   []string
	}
	pyref.Run(t, `
import io, base64, collections
out = []
for n in inp:
    for o in [{str(i): torch.full((i % 3,), float(i)) for i in range(n)},
              collections.OrderedDict((str(i), torch.full((1,), float(i))) for i in range(n)),
              list(range(n))]:
        buf = io.BytesIO()
        torch.save(o, buf)
        out.append(base64.b64encode(buf.getvalue()).decode())
emit({"Version": `+pyVersionExpr+`, "Files": out})
`, sizes, &py)
	for k, n := range sizes {
		d := ptfile.NewDict()
		var sd torch.StateDict
		l := make([]any, n)
		for i := range n {
			d.Set(strconv.Itoa(i), torch.Full([]int64{int64(i % 3)}, float64(i)))
			sd = append(sd, torch.Named{Name: strconv.Itoa(i), T: torch.Full([]int64{1}, float64(i))})
			l[i] = i
		}
		for j, v := range []any{d, sd, l} {
			b, err := ptfile.SaveBytes(v)
			require.NoError(t, err)
			requireSameFile(t, py.Version, decodeB64(t, py.Files[3*k+j]), b, fmt.Sprintf("%d items, %T", n, v))
		}
		ptfile.FreeAll(d)
		ptfile.FreeAll(sd)
	}
}

func readFile(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func decodeB64(t *testing.T, s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	return b
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
