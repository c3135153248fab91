package ptfile_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// pySave writes the Python-side fixtures into dir: a raw state_dict()
// (OrderedDict with _metadata, num_batches_tracked 0-d int64), views with
// storage offsets and strides, a nested checkpoint with an Adam state dict
// (int keys, tuples, 0-d float tensors), every dtype, and a Parameter. It
// emits describe() of each object, by file name.
const pySave = pyDescribe + `
import os
torch.manual_seed(0)
d = inp
m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
m.train()
m(torch.randn(4, 3))
sd = m.state_dict()
opt = torch.optim.Adam(m.parameters(), lr=0.1)
m(torch.randn(4, 3)).sum().backward()
opt.step()
base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
views = {"base": base, "rows": base[1:3], "cols": base[:, 1::2], "t": base.t(), "elem": base[2, 3],
         "expanded": torch.arange(3.).expand(2, 3), "empty_view": base[:, 6:]}
ckpt = {"model": sd, "step": 3, "lr": 0.1, "name": "x", "opt": opt.state_dict(),
        "flags": [True, None, (1, "a")], "neg": -2**40, "f": 1e-310, "e": -0.5}
dtypes = {str(dt)[6:]: (torch.arange(-3, 3) % 2 == 0).to(dt) if dt == torch.bool else torch.arange(-3, 3).to(dt) * (0.5 if dt.is_floating_point else 1)
          for dt in [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                     torch.int16, torch.int8, torch.uint8, torch.bool]}
param = torch.nn.Parameter(torch.ones(2))
objs = {"sd.pt": sd, "views.pt": views, "ckpt.pt": ckpt, "dtypes.pt": dtypes, "param.pt": param,
        "tensor.bin": torch.full((2, 2), 7.0)}
out = {}
for name, o in objs.items():
    torch.save(o, os.path.join(d, name))
    out[name] = describe(o)
out["strides"] = {k: [list(v.stride()), v.storage_offset()] for k, v in views.items()}
emit(out)
`

// TestLoadPythonFiles: Python's torch.save output loads in Go with the same
// names, order, key types and values.
func TestLoadPythonFiles(t *testing.T) {
	dir := t.TempDir()
	var want map[string]any
	pyref.Run(t, pySave, dir, &want)
	for _, name := range []string{"sd.pt", "views.pt", "ckpt.pt", "dtypes.pt", "param.pt", "tensor.bin"} {
		t.Run(name, func(t *testing.T) {
			got, err := ptfile.Load(filepath.Join(dir, name))
			require.NoError(t, err)
			defer ptfile.FreeAll(got)
			require.Equal(t, want[name], canon(t, describe(t, got)))
		})
	}

	t.Run("state dict metadata", func(t *testing.T) {
		v, err := ptfile.Load(filepath.Join(dir, "sd.pt"))
		require.NoError(t, err)
		defer ptfile.FreeAll(v)
		sd := v.(*ptfile.Dict)
		require.True(t, sd.Ordered)
		meta, ok := sd.Attrs.Get("_metadata")
		require.True(t, ok)
		bn, ok := meta.(*ptfile.Dict).Get("1")
		require.True(t, ok)
		ver, _ := bn.(*ptfile.Dict).Get("version")
		require.Equal(t, int64(2), ver)
		nbt := sd.Tensor("1.num_batches_tracked")
		require.Equal(t, torch.Int64, nbt.DType())
		require.Empty(t, nbt.Shape())

		tensors, err := ptfile.LoadTensors(filepath.Join(dir, "sd.pt"))
		require.NoError(t, err)
		defer tensors.Free()
		require.Equal(t, []string{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"}, tensors.Names())
	})

	t.Run("views share storage", func(t *testing.T) {
		v, err := ptfile.Load(filepath.Join(dir, "views.pt"))
		require.NoError(t, err)
		defer ptfile.FreeAll(v)
		d := v.(*ptfile.Dict)
		strides := want["strides"].(map[string]any)
		for _, e := range d.Entries {
			k := e.Key.(string)
			if k == "empty_view" {
				continue
			}
			st := strides[k].([]any)
			require.Equal(t, canon(t, st[0]), canon(t, append([]int64{}, e.Value.(*torch.Tensor).Strides()...)), k)
		}
		// Writing through one view shows in the others, as in Python.
		d.Tensor("rows").AddScalarIn(100)
		require.Equal(t, 109.0, d.Tensor("base").Float64s()[9])
		require.Equal(t, 109.0, d.Tensor("t").Float64s()[3*4+1])
	})

	t.Run("parameter requires grad", func(t *testing.T) {
		v, err := ptfile.Load(filepath.Join(dir, "param.pt"))
		require.NoError(t, err)
		defer ptfile.FreeAll(v)
		require.True(t, v.(*torch.Tensor).RequiresGrad())
	})

	// Loading Python's files and saving them again gives files Python reads
	// back as the originals (OrderedDict, _metadata, tuples, int keys).
	t.Run("resave", func(t *testing.T) {
		out := t.TempDir()
		var paths [][2]string
		for _, name := range []string{"sd.pt", "ckpt.pt", "dtypes.pt", "views.pt"} {
			v, err := ptfile.Load(filepath.Join(dir, name))
			require.NoError(t, err)
			p := filepath.Join(out, name)
			require.NoError(t, ptfile.Save(p, v))
			ptfile.FreeAll(v)
			paths = append(paths, [2]string{filepath.Join(dir, name), p})
		}
		var diffs []string
		pyref.Run(t, pyDescribe+`
diffs = []
for a, b in inp:
    x, y = torch.load(a), torch.load(b)
    if describe(x) != describe(y):
        diffs.append(b)
    if hasattr(x, "_metadata") and getattr(y, "_metadata", None) != x._metadata:
        diffs.append(b + ": _metadata")
    if b.endswith("sd.pt"):
        torch.load(b, weights_only=True)
        m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
        m.load_state_dict(y)
emit(diffs)
`, paths, &diffs)
		require.Empty(t, diffs)
	})
}

// TestLoadTorch2File: a state dict PyTorch 2.11's torch.save wrote
// (testdata/torch2_state_dict.pt, with 2.x's .format_version,
// .storage_alignment, byteorder and .data/serialization_id records, and a
// storage starting like a data descriptor) loads without a PyTorch 2.x at
// hand, and saving what it holds writes the same bytes.
func TestLoadTorch2File(t *testing.T) {
	const path = "testdata/torch2_state_dict.pt"
	data := readFile(t, path)
	sd, err := ptfile.LoadTensors(path)
	require.NoError(t, err)
	defer sd.Free()
	names, m := sd.Names(), sd.Map()
	want := []struct {
		name   string
		dtype  torch.DType
		shape  []int64
		values []float64
	}{
		{"w", torch.Float32, []int64{2, 3}, []float64{0, 0.25, 0.5, 0.75, 1, 1.25}},
		{"b", torch.Float16, []int64{3}, []float64{0.5, -1.5, 2}},
		{"bf", torch.BFloat16, []int64{2}, []float64{1, -3.5}},
		{"steps", torch.Int64, []int64{}, []float64{7}},
		{"mask", torch.Bool, []int64{4}, []float64{1, 0, 1, 1}},
		{"empty", torch.Float32, []int64{0, 4}, []float64{}},
		{"pk", torch.Uint8, []int64{9}, []float64{'P', 'K', 7, 8, ' ', 'd', 'a', 't', 'a'}},
	}
	var wantNames []string
	var named torch.StateDict
	for _, w := range want {
		wantNames = append(wantNames, w.name)
		got := m[w.name]
		require.NotNil(t, got, w.name)
		require.Equal(t, w.dtype, got.DType(), w.name)
		require.Equal(t, w.shape, append([]int64{}, got.Shape()...), w.name)
		require.Equal(t, w.values, append([]float64{}, got.Float64s()...), w.name)
		named = append(named, torch.Named{Name: w.name, T: got})
	}
	require.Equal(t, wantNames, names)

	var b bytes.Buffer
	require.NoError(t, ptfile.WriteTo(&b, "torch2_state_dict", named))
	require.True(t, bytes.Equal(data, b.Bytes()), "WriteTo writes PyTorch 2.11's file")
	resaved := filepath.Join(t.TempDir(), "torch2_state_dict.pt")
	require.NoError(t, ptfile.SaveTensors(resaved, named))
	require.True(t, bytes.Equal(data, readFile(t, resaved)), "SaveTensors writes PyTorch 2.11's file")
}

// TestSaveArchiveName: the folder inside the zip is the one PyTorch's
// torch.save names after the path: the base name up to its last dot, or
// "archive" when that is empty or, as PyTorch 2.x does (it then writes
// through a Python stream), for a non-ASCII path; PyTorch 1.13 uses the
// name there too.
func TestSaveArchiveName(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		file, archive string
		ascii         bool
	}{
		{"model.pt", "model", true},
		{"model", "model", true},
		{"model.best.pt", "model.best", true},
		{"a.b.c", "a.b", true},
		{".hidden.pt", ".hidden", true},
		{"ünï.pt", "archive", false},
	}
	var paths []string
	for _, c := range cases {
		p := filepath.Join(dir, c.file)
		require.NoError(t, ptfile.Save(p, int64(1)))
		got := records(t, readFile(t, p))
		require.Contains(t, got, c.archive+"/data.pkl", c.file)
		paths = append(paths, p)
	}
	var py struct {
		Version [2]int
		Names   []string
	}
	pyref.Run(t, `
import zipfile
names = []
for p in inp:
    torch.save(1, p)
    names.append(zipfile.ZipFile(p).namelist()[0].split("/")[0])
emit({"Version": `+pyVersionExpr+`, "Names": names})
`, paths, &py)
	for k, c := range cases {
		if c.ascii || py.Version[0] >= 2 {
			require.Equal(t, c.archive, py.Names[k], "%s: PyTorch %v", c.file, py.Version)
		} else {
			require.Equal(t, "ünï", py.Names[k], "%s: PyTorch 1.13 keeps a non-ASCII name", c.file)
		}
	}
}
