package ganvit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
)

func tinyViT(classes int64) ViTConfig {
	c := ViTConfigs["tiny"]
	c.Classes = classes
	return c
}

// --vit-weights takes a safetensors file (safetensors.torch.save_file(
// vit.state_dict(), path)), by its extension or by its first bytes, as it
// takes a torch.save file: the weights load exactly, a head of another
// size starts afresh, a damaged file is the user's error.
func TestPretrainedSafetensors(t *testing.T) {
	dir := t.TempDir()
	src, err := NewViT(tinyViT(2))
	require.NoError(t, err)
	defer nn.Free(src)
	named := nn.StateDict(src)
	for _, tc := range []struct {
		name, file string
		classes    int64
		save       func(path string) error
	}{
		{"safetensors", "vit.safetensors", 0, func(p string) error { return safetensors.Save(p, named, map[string]string{"format": "pt"}) }},
		{"safetensors named .pth", "vit.pth", 0, func(p string) error { return safetensors.Save(p, named, nil) }},
		{"safetensors, another head", "vit.safetensors", 3, func(p string) error { return safetensors.Save(p, named, nil) }},
		{"torch.save", "vit.pt", 0, func(p string) error { return ptfile.SaveTensors(p, named) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+"-"+tc.file)
			require.NoError(t, tc.save(path))
			classes := int64(2)
			if tc.classes > 0 {
				classes = tc.classes
			}
			dst, err := NewViT(tinyViT(classes))
			require.NoError(t, err)
			defer nn.Free(dst)
			var logged []string
			require.NoError(t, loadPretrained(dst, path, func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }))
			want := map[string][]float64{}
			for _, p := range nn.StateDict(src) {
				want[p.Name] = p.T.Float64s()
			}
			for _, p := range nn.StateDict(dst) {
				if tc.classes > 0 && strings.HasPrefix(p.Name, "heads.") {
					continue
				}
				require.Equal(t, want[p.Name], p.T.Float64s(), p.Name)
			}
			if tc.classes > 0 {
				require.Len(t, logged, 1)
				require.Contains(t, logged[0], "the head starts from zero")
			}
		})
	}

	full, err := os.ReadFile(filepath.Join(dir, "safetensors-vit.safetensors"))
	require.NoError(t, err)
	damaged := filepath.Join(dir, "damaged.safetensors")
	require.NoError(t, os.WriteFile(damaged, full[:len(full)-1], 0o644))
	dst, err := NewViT(tinyViT(2))
	require.NoError(t, err)
	defer nn.Free(dst)
	err = loadPretrained(dst, damaged, t.Logf)
	require.ErrorIs(t, err, safetensors.ErrBadFile)
	require.ErrorIs(t, err, safetensors.ErrRange)
	require.True(t, recipes.IsUserError(err))
}
