package tts

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
)

// copyDir copies a data set (the shared fixture stays as it is).
func copyDir(t *testing.T, src string) string {
	dst := t.TempDir()
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
	return dst
}

// A phonemes file that lacks the training sentences (issue 24, item 4:
// `{}` was an internal nil-pointer error, exit 1) is the user's error,
// naming the file.
func TestTrainRefusesPhonemesWithoutTheSentences(t *testing.T) {
	cfg := gptConfig(t, t.TempDir())
	cfg.Data = copyDir(t, cfg.Data)
	require.NoError(t, os.WriteFile(filepath.Join(cfg.Data, phonemesFile), []byte("{}"), 0o644))
	_, err := Train(context.Background(), cfg)
	require.Error(t, err)
	require.True(t, recipes.IsUserError(err), "%T %v", err, err)
	require.ErrorContains(t, err, phonemesFile)
}
