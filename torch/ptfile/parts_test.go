package ptfile_test

import (
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// pySaveParts writes a checkpoint whose parts share storages: the model's
// "row" is a view of "shared"'s storage, "same" names the model's weight
// twice, and the optimizer's moments are 16 KB no model load should hold.
// model.pt is the model part saved alone (the same storages).
const pySaveParts = pyDescribe + `
import os
torch.manual_seed(0)
base = torch.arange(24.).reshape(4, 6)
w = torch.nn.Parameter(torch.randn(3, 4))
model = {"w": w, "row": base[1]}
ck = {"model": model, "optimizer": {"state": {0: {"exp_avg": torch.randn(2048), "exp_avg_sq": torch.randn(2048)}}},
      "shared": base, "same": [w, w], "step": 7}
torch.save(ck, os.path.join(inp, "ck.pt"))
torch.save(model, os.path.join(inp, "model.pt"))
torch.save(w, os.path.join(inp, "tensor.pt"))
emit({k: describe(v) for k, v in ck.items()})
`

// allocatedBy returns what load leaves allocated and its peak above that,
// from torchfit's counting allocator.
func allocatedBy(t *testing.T, load func() any) (v any, held, transient int64) {
	t.Helper()
	torch.CollectGarbage()
	before := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	v = load()
	s := torch.MustMemoryStats(torch.CPU)
	return v, s.Allocated - before, s.PeakAllocated - s.Allocated
}

// TestLoadParts: LoadParts returns the parts asked for, as Load does, and
// allocates their storages only — a checkpoint's model part costs what
// the model saved alone costs, with no transient above it.
func TestLoadParts(t *testing.T) {
	dir := t.TempDir()
	var want map[string]any
	pyref.Run(t, pySaveParts, dir, &want)
	ck := filepath.Join(dir, "ck.pt")
	torch.CollectGarbage()
	live := torch.LiveTensors()
	defer func() { torch.CollectGarbage(); require.Equal(t, live, torch.LiveTensors(), "tensors left allocated") }()

	t.Run("the model alone costs what its own file costs", func(t *testing.T) {
		alone, aloneHeld, _ := allocatedBy(t, func() any { v, err := ptfile.Load(filepath.Join(dir, "model.pt")); require.NoError(t, err); return v })
		ptfile.FreeAll(alone)
		whole, wholeHeld, _ := allocatedBy(t, func() any { v, err := ptfile.Load(ck); require.NoError(t, err); return v })
		ptfile.FreeAll(whole)
		d, held, transient := allocatedBy(t, func() any {
			d, keys, err := ptfile.LoadParts(ck, "model")
			require.NoError(t, err)
			require.Equal(t, []any{"model", "optimizer", "shared", "same", "step"}, keys)
			return d
		})
		defer ptfile.FreeAll(d)

		require.Equal(t, aloneHeld, held)
		require.Zero(t, transient)
		require.GreaterOrEqual(t, wholeHeld-held, int64(2*2048*4), "the optimizer's moments")
		m := d.(*ptfile.Dict)
		require.Equal(t, []any{"model"}, m.Keys())
		got, _ := m.Get("model")
		require.Equal(t, want["model"], canon(t, describe(t, got)))
		w := got.(*ptfile.Dict).Tensor("w")
		require.True(t, w.RequiresGrad(), "a Parameter stays one")
	})

	t.Run("a storage two parts share is read once", func(t *testing.T) {
		d, _, err := ptfile.LoadParts(ck, "shared", "model")
		require.NoError(t, err)
		defer ptfile.FreeAll(d)
		require.Equal(t, []any{"model", "shared"}, d.Keys(), "file order")
		m, _ := d.Get("model")
		d.Tensor("shared").AddScalarIn(100)
		require.Equal(t, []float32{106, 107, 108, 109, 110, 111}, m.(*ptfile.Dict).Tensor("row").Float32s())
	})

	t.Run("a tensor named twice is one tensor", func(t *testing.T) {
		d, _, err := ptfile.LoadParts(ck, "same", "step")
		require.NoError(t, err)
		defer ptfile.FreeAll(d)
		same, _ := d.Get("same")
		require.Same(t, same.([]any)[0], same.([]any)[1])
		step, _ := d.Get("step")
		require.Equal(t, int64(7), step)
		require.Equal(t, want["same"], canon(t, describe(t, same)))
	})

	t.Run("every part is Load", func(t *testing.T) {
		d, _, err := ptfile.LoadParts(ck, "model", "optimizer", "shared", "same", "step")
		require.NoError(t, err)
		defer ptfile.FreeAll(d)
		require.Len(t, d.Entries, len(want))
		for _, e := range d.Entries {
			require.Equal(t, want[e.Key.(string)], canon(t, describe(t, e.Value)), e.Key)
		}
	})

	t.Run("a part the file lacks is absent", func(t *testing.T) {
		for _, parts := range [][]string{{"nope"}, nil} {
			_, held, _ := allocatedBy(t, func() any {
				d, keys, err := ptfile.LoadParts(ck, parts...)
				require.NoError(t, err)
				require.Zero(t, d.Len())
				require.Len(t, keys, 5)
				return d
			})
			require.Zero(t, held)
		}
	})

	t.Run("a file that is not a dict", func(t *testing.T) {
		_, _, err := ptfile.LoadParts(filepath.Join(dir, "tensor.pt"), "model")
		require.ErrorIs(t, err, ptfile.ErrBadFile)
	})
}

// TestDescribeParts: DescribePartsFrom gives each tensor of the parts its
// shape and dtype, as LoadParts would load it, allocating nothing, and
// finds a storage record that fails its checksum before anything reads it.
func TestDescribeParts(t *testing.T) {
	dir := t.TempDir()
	var want map[string]any
	pyref.Run(t, pySaveParts, dir, &want)
	raw, err := os.ReadFile(filepath.Join(dir, "ck.pt"))
	require.NoError(t, err)
	parts := []string{"model", "optimizer", "same"}

	v, held, transient := allocatedBy(t, func() any {
		d, keys, err := ptfile.DescribePartsFrom(bytes.NewReader(raw), int64(len(raw)), parts...)
		require.NoError(t, err)
		require.Equal(t, []any{"model", "optimizer", "shared", "same", "step"}, keys)
		return d
	})
	require.Zero(t, held)
	require.Zero(t, transient)
	desc := v.(*ptfile.Dict)
	require.Equal(t, []any{"model", "optimizer", "same"}, desc.Keys())

	loaded, _, err := ptfile.LoadPartsFrom(bytes.NewReader(raw), int64(len(raw)), parts...)
	require.NoError(t, err)
	defer ptfile.FreeAll(loaded)
	// Every tensor of the loaded parts has its description at the same place.
	var walk func(path string, l, d any)
	n := 0
	walk = func(path string, l, d any) {
		switch x := l.(type) {
		case *torch.Tensor:
			info, ok := d.(*ptfile.TensorInfo)
			require.True(t, ok, "%s: %T", path, d)
			require.Equal(t, x.Shape(), info.Shape, path)
			require.Equal(t, x.DType(), info.DType, path)
			n++
		case *ptfile.Dict:
			dd := d.(*ptfile.Dict)
			require.Equal(t, x.Keys(), dd.Keys(), path)
			for k, e := range x.Entries {
				walk(fmt.Sprint(path, ".", e.Key), e.Value, dd.Entries[k].Value)
			}
		case []any:
			for k := range x {
				walk(fmt.Sprint(path, "[", k, "]"), x[k], d.([]any)[k])
			}
		default:
			require.Equal(t, l, d, path)
		}
	}
	walk("", loaded, desc)
	require.Equal(t, 6, n, "w, row, two moments, w twice")
	same, _ := desc.Get("same")
	require.Same(t, same.([]any)[0], same.([]any)[1], "a tensor named twice is described once")
	model, _ := desc.Get("model")
	w, _ := model.(*ptfile.Dict).Get("w")
	require.Equal(t, &ptfile.TensorInfo{Shape: []int64{3, 4}, DType: torch.Float32}, w)

	// One byte changed in every storage record: their checksums fail.
	bad := slices.Clone(raw)
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	require.NoError(t, err)
	for _, f := range zr.File {
		if strings.Contains(f.Name, "/data/") {
			off, err := f.DataOffset()
			require.NoError(t, err)
			bad[off] ^= 0xff
		}
	}
	_, _, err = ptfile.DescribePartsFrom(bytes.NewReader(bad), int64(len(bad)), "model")
	require.ErrorIs(t, err, ptfile.ErrBadFile)
	d, _, err := ptfile.DescribePartsFrom(bytes.NewReader(bad), int64(len(bad)), "step")
	require.NoError(t, err, "a part without tensors reads no storage record")
	step, _ := d.Get("step")
	require.Equal(t, int64(7), step)
	_, _, err = ptfile.DescribePartsFrom(bytes.NewReader(raw[:len(raw)/2]), int64(len(raw)/2), "model")
	require.ErrorIs(t, err, ptfile.ErrBadFile)
}
