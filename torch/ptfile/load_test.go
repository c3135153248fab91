package ptfile_test

import (
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

		names, m, err := ptfile.LoadTensors(filepath.Join(dir, "sd.pt"))
		require.NoError(t, err)
		defer ptfile.FreeAll(m)
		require.Equal(t, []string{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"}, names)
		require.Len(t, m, 7)
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
