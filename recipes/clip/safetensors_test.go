package clip

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch/safetensors"
)

// --init takes a CLIP state dict in a safetensors file
// (safetensors.torch.save_file(model.state_dict(), path)), by its
// extension or by its first bytes: the configuration is inferred from the
// shapes and the weights load exactly; metadata naming another recipe is
// refused as a torchfit checkpoint's meta is.
func TestReadWeightsSafetensors(t *testing.T) {
	dir := t.TempDir()
	m, err := NewModel(twinConfig)
	require.NoError(t, err)
	defer nn.Free(m)
	named := nn.StateDict(m)
	want := map[string][]float64{}
	for _, p := range named {
		want[p.Name] = p.T.Float64s()
	}
	for _, tc := range []struct {
		name, file string
		meta       map[string]string
		err        string
	}{
		{"by extension", "sd.safetensors", nil, ""},
		{"by first bytes", "sd.bin", map[string]string{"format": "pt"}, ""},
		{"another recipe", "asr.safetensors", map[string]string{"recipe": "asr"}, "a checkpoint of the asr recipe, not CLIP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			require.NoError(t, safetensors.Save(path, named, tc.meta))
			w, err := ReadWeights(path)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.True(t, recipes.IsUserError(err))
				return
			}
			require.NoError(t, err)
			defer w.Free()
			require.Equal(t, twinConfig, w.Meta.Config, "configuration inferred from the shapes")
			got, err := w.Load(path)
			require.NoError(t, err)
			defer nn.Free(got)
			for _, p := range nn.StateDict(got) {
				require.Equal(t, want[p.Name], p.T.Float64s(), p.Name)
			}
		})
	}

	full, err := os.ReadFile(filepath.Join(dir, "sd.safetensors"))
	require.NoError(t, err)
	damaged := filepath.Join(dir, "damaged.safetensors")
	require.NoError(t, os.WriteFile(damaged, full[:len(full)/2], 0o644))
	_, err = ReadWeights(damaged)
	require.ErrorIs(t, err, safetensors.ErrBadFile)
	require.True(t, recipes.IsUserError(err))
}
