package atomicfile_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/atomicfile"
)

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFileComplete(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data.bin")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	require.NoError(t, atomicfile.WriteFile(path, data))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, data, got)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o644), st.Mode().Perm())
	require.Equal(t, []string{"data.bin"}, entries(t, dir), "no temporary file is left")

	// Replacing it.
	require.NoError(t, atomicfile.WriteFile(path, []byte("short")))
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "short", string(got))
	require.Equal(t, []string{"data.bin"}, entries(t, dir))
}

func TestWriteFileRelative(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	require.NoError(t, atomicfile.WriteFile("rel.txt", []byte("x")))
	got, err := os.ReadFile(filepath.Join(dir, "rel.txt"))
	require.NoError(t, err)
	require.Equal(t, "x", string(got))
	require.Equal(t, []string{"rel.txt"}, entries(t, dir))
}

// TestWriteTempNameAndLock: while the write runs, the data is in
// .NAME.tmp-PID-RANDOM in the same directory, under an exclusive flock
// (the contract with train's removal of dead writers' temporary files).
func TestWriteTempNameAndLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.pt")
	name := regexp.MustCompile(`^\.ckpt\.pt\.tmp-(\d+)-\d+$`)
	err := atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write([]byte("partial"))
		require.NoError(t, err)
		names := entries(t, dir)
		require.Len(t, names, 1)
		m := name.FindStringSubmatch(names[0])
		require.NotNil(t, m, "temporary file %s", names[0])
		require.Equal(t, strconv.Itoa(os.Getpid()), m[1])
		f, err := os.Open(filepath.Join(dir, names[0]))
		require.NoError(t, err)
		defer f.Close()
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		require.ErrorIs(t, err, syscall.EWOULDBLOCK, "the writer holds the lock")
		_, err = os.Stat(path)
		require.ErrorIs(t, err, fs.ErrNotExist, "the path appears only on commit")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"ckpt.pt"}, entries(t, dir))
}

var errWrite = errors.New("writer failed")

// TestWriteFailureKeepsOld: a write that fails half-way returns its error,
// leaves the old file intact and no temporary file.
func TestWriteFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "meta.json")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o600))
	err := atomicfile.Write(path, func(w io.Writer) error {
		if _, err := w.Write(bytes.Repeat([]byte("n"), 4096)); err != nil {
			return err
		}
		return errWrite
	})
	require.ErrorIs(t, err, errWrite)
	got, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	require.Equal(t, "old", string(got))
	require.Equal(t, []string{"meta.json"}, entries(t, dir))
}

// TestRenameFailureRemovesTemp: a path that cannot be replaced (here a
// directory) fails on the rename; the temporary file is removed.
func TestRenameFailureRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	require.NoError(t, os.Mkdir(path, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(path, "inside"), []byte("x"), 0o644))
	err := atomicfile.WriteFile(path, []byte("new"))
	var le *os.LinkError
	require.ErrorAs(t, err, &le)
	require.Equal(t, []string{"taken"}, entries(t, dir))
	require.Equal(t, []string{"inside"}, entries(t, path))
}

func TestCreateMissingDir(t *testing.T) {
	dir := t.TempDir()
	err := atomicfile.WriteFile(filepath.Join(dir, "no", "such.txt"), []byte("x"))
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.Empty(t, entries(t, dir))
}

func TestCreateCommitClose(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mels.bin")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))

	// Abandoned: Close removes the temporary file, the old file stays.
	f, err := atomicfile.Create(path)
	require.NoError(t, err)
	_, err = f.Write([]byte("abandoned"))
	require.NoError(t, err)
	require.Len(t, entries(t, dir), 2)
	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "Close twice is fine")
	require.ErrorIs(t, f.Commit(), os.ErrClosed)
	_, err = f.Write([]byte("more"))
	require.ErrorIs(t, err, os.ErrClosed)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "old", string(got))
	require.Equal(t, []string{"mels.bin"}, entries(t, dir))

	// Committed: a deferred Close after Commit does nothing.
	f, err = atomicfile.Create(path)
	require.NoError(t, err)
	_, err = f.Write([]byte("new"))
	require.NoError(t, err)
	require.NoError(t, f.Commit())
	require.NoError(t, f.Close())
	require.ErrorIs(t, f.Commit(), os.ErrClosed)
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "new", string(got))
	require.Equal(t, []string{"mels.bin"}, entries(t, dir))
}
