package recipes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	require.NoError(t, WriteFileAtomic(path, []byte("one")))
	require.NoError(t, WriteFileAtomic(path, []byte("two")))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "two", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")

	missing := filepath.Join(dir, "no", "b.json")
	err = WriteFileAtomic(missing, nil)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "write "+missing+": ")
}
