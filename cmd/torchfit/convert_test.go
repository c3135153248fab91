package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
)

// torchfit convert takes a state dict or checkpoint from torch.save to
// safetensors and back: the same tensors (in safetensors' order: by
// dtype, then name), a checkpoint's meta as metadata and back.
func TestConvertRoundTrip(t *testing.T) {
	dir := t.TempDir()
	named := torch.StateDict{
		{Name: "w", T: torch.FromSlice([]float32{1.5, -2, 3.25, 0}, []int64{2, 2})},
		{Name: "b", T: torch.FromSlice([]float32{1, 0.5}, nil, torch.BFloat16)},
		{Name: "steps", T: torch.FromSlice([]int64{7}, []int64{})},
		{Name: "mask", T: torch.FromSlice([]bool{true, false}, nil)},
	}
	defer named.Free()
	for _, tc := range []struct {
		name string
		save func(path string) error
		meta map[string]string
	}{
		{"state dict", func(p string) error { return ptfile.SaveTensors(p, named) }, map[string]string{"format": "pt"}},
		{"checkpoint", func(p string) error {
			sd := &ptfile.Dict{Ordered: true}
			for _, nt := range named {
				sd.Set(nt.Name, nt.T)
			}
			return ptfile.Save(p, ptfile.NewDict("model", sd, "meta", ptfile.NewDict("recipe", "clip", "model", `{"x":1}`, "step", int64(3))))
		}, map[string]string{"format": "pt", "recipe": "clip", "model": `{"x":1}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := filepath.Join(dir, tc.name, "a", "w.pt")
			st := filepath.Join(dir, tc.name, "w.safetensors")
			b := filepath.Join(dir, tc.name, "b", "w.pt")
			for _, p := range []string{a, b} {
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			}
			require.NoError(t, tc.save(a))
			code, out := runInProcess("convert", a, st)
			require.Equal(t, 0, code, out)
			f, err := safetensors.Load(st)
			require.NoError(t, err)
			defer f.Free()
			require.Equal(t, tc.meta, f.Metadata)
			got := f.Map()
			for _, nt := range named {
				require.Equal(t, nt.T.Float64s(), got[nt.Name].Float64s(), nt.Name)
				require.Equal(t, nt.T.DType(), got[nt.Name].DType(), nt.Name)
			}

			code, out = runInProcess("convert", st, b)
			require.Equal(t, 0, code, out)
			st2 := filepath.Join(dir, tc.name, "b", "w.safetensors")
			code, out = runInProcess("convert", b, st2)
			require.Equal(t, 0, code, out)
			ws, err := os.ReadFile(st)
			require.NoError(t, err)
			ws2, err := os.ReadFile(st2)
			require.NoError(t, err)
			require.Equal(t, ws, ws2, "safetensors → .pt → safetensors is the same file")
			if tc.meta["recipe"] == "" {
				back, err := ptfile.LoadTensors(b)
				require.NoError(t, err)
				defer back.Free()
				require.Len(t, back, len(named))
				for _, nt := range named {
					got, ok := back.Get(nt.Name)
					require.True(t, ok, nt.Name)
					require.Equal(t, nt.T.Float64s(), got.Float64s(), nt.Name)
				}
				return
			}
			v, err := ptfile.Load(b)
			require.NoError(t, err)
			defer ptfile.FreeAll(v)
			meta, _ := v.(*ptfile.Dict).Get("meta")
			require.Equal(t, []any{"model", "recipe"}, meta.(*ptfile.Dict).Keys())
			model, _ := v.(*ptfile.Dict).Get("model")
			require.Len(t, model.(*ptfile.Dict).Entries, len(named))
		})
	}
}

func TestConvertRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "w.safetensors")
	x := torch.FromSlice([]float32{1, 2}, nil)
	defer x.Free()
	require.NoError(t, safetensors.Save(good, torch.StateDict{{Name: "x", T: x}}, nil))
	full, err := os.ReadFile(good)
	require.NoError(t, err)
	damaged := filepath.Join(dir, "damaged.safetensors")
	require.NoError(t, os.WriteFile(damaged, full[:len(full)-2], 0o644))
	metrics := filepath.Join(dir, "metrics.jsonl")
	require.NoError(t, os.WriteFile(metrics, []byte("{}\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"one argument", []string{"convert", good}, "convert takes IN and OUT, 1 given"},
		{"a damaged file", []string{"convert", damaged, filepath.Join(dir, "out.pt")}, "not a readable safetensors file"},
		{"a missing file", []string{"convert", filepath.Join(dir, "none.pt"), filepath.Join(dir, "out.pt")}, "no such file"},
		{"over another kind of file", []string{"convert", good, metrics}, "OUT"},
		{"an OUT of no format's extension", []string{"convert", good, filepath.Join(dir, "out.txt")}, "its extension chooses the format"},
		{"an OUT without an extension", []string{"convert", good, filepath.Join(dir, "out")}, "its extension chooses the format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runInProcess(tc.args...)
			require.Equal(t, 2, code, out)
			requireOneLine(t, out, tc.want)
			for _, name := range []string{"out.pt", "out.txt", "out"} {
				require.NoFileExists(t, filepath.Join(dir, name))
			}
		})
	}
	b, err := os.ReadFile(metrics)
	require.NoError(t, err)
	require.Equal(t, "{}\n", string(b), "nothing lost")
}

// torch.save's other usual extensions (.pth, Hugging Face's .bin,
// Lightning's .ckpt; any case) are torch.save OUTs.
func TestConvertTorchSaveExtensions(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "w.safetensors")
	x := torch.FromSlice([]float32{1, 2}, nil)
	defer x.Free()
	require.NoError(t, safetensors.Save(good, torch.StateDict{{Name: "x", T: x}}, nil))
	for _, name := range []string{"w.pth", "pytorch_model.bin", "w.ckpt", "W.PT"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(dir, name)
			code, msg := runInProcess("convert", good, out)
			require.Equal(t, 0, code, msg)
			sd, err := ptfile.LoadTensors(out)
			require.NoError(t, err)
			defer sd.Free()
			require.Equal(t, []string{"x"}, sd.Names())
		})
	}
}
