package recipes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An output path may be new, empty or a file of the kind written; a
// directory or a file of another kind (metrics, a checkpoint) is refused.
func TestCheckOutput(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	png := file("old.png", "\x89PNG\r\n\x1a\nrest")
	wav := file("old.wav", "RIFF\x24\x00\x00\x00WAVEfmt ")
	metrics := file("m.jsonl", `{"step":1,"loss":2}`+"\n")
	ckpt := file("checkpoint_step_000001.pt", "PK\x03\x04zip")
	empty := file("empty.png", "")
	for _, tc := range []struct {
		path string
		kind OutputKind
		ok   bool
	}{
		{filepath.Join(dir, "new.png"), PNG, true},
		{png, PNG, true},
		{empty, PNG, true},
		{wav, WAV, true},
		{metrics, PNG, false},
		{ckpt, WAV, false},
		{png, WAV, false},
		{dir, PNG, false},
	} {
		err := CheckOutput("out", tc.path, tc.kind)
		if tc.ok {
			require.NoError(t, err, tc.path)
			continue
		}
		require.Error(t, err, tc.path)
		require.True(t, IsUserError(err), "%v", err)
	}
}

// A data command refuses a directory that holds a data set unless
// --overwrite, and then says what it replaces.
func TestCheckDataOut(t *testing.T) {
	dir := t.TempDir()
	line, err := CheckDataOut(dir, false, "manifest.jsonl", "meta.json")
	require.NoError(t, err)
	require.Empty(t, line)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta.json"), []byte("{}"), 0o644))
	_, err = CheckDataOut(dir, false, "manifest.jsonl", "meta.json")
	require.ErrorContains(t, err, "already holds a data set (meta.json)")
	require.True(t, IsUserError(err))
	line, err = CheckDataOut(dir, true, "manifest.jsonl", "meta.json")
	require.NoError(t, err)
	require.Contains(t, line, "replacing the data set in "+dir)
}
