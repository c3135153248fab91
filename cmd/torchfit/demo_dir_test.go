package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
)

// TestDemoRefusesForeignFiles: `demo --dir D` removed all of
// D/checkpoints and D/metrics.jsonl, a real ASR run's beside it too (the
// recipe's default --checkpoint-dir is checkpoints). Files no earlier
// demo wrote are refused before anything is synthesised, in one line
// with exit status 2, and left as they were.
func TestDemoRefusesForeignFiles(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []string // relative to --dir, each holding "mine"
	}{
		{"a checkpoint of another run", []string{"checkpoints/checkpoint_step_000004.pt"}},
		{"a file that is no checkpoint", []string{"checkpoints/notes.txt"}},
		{"another run's metrics", []string{"metrics.jsonl"}},
		{"checkpoints is a file", []string{"checkpoints"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.files {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("mine"), 0o644))
			}
			err := run(newApp(), []string{"torchfit", "demo", "--dir", dir, "--utterances", "12", "--max-steps", "1"})
			var fe *DemoForeignError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, c.files, fe.Files)
			require.True(t, recipes.IsUserError(err))
			code, out := runInProcess("demo", "--dir", dir, "--utterances", "12", "--max-steps", "1")
			require.Equal(t, 2, code)
			requireOneLine(t, out, "--overwrite")
			for _, f := range c.files {
				b, err := os.ReadFile(filepath.Join(dir, f))
				require.NoError(t, err)
				require.Equal(t, "mine", string(b))
			}
			require.NoDirExists(t, filepath.Join(dir, "corpus"), "refused before the synthesis")
		})
	}
}

// TestDemoRecord: the files a demo run wrote are the next run's to
// remove, as long as they are as it left them; what it did not write, or
// what changed since, is not.
func TestDemoRecord(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, rel), []byte(text), 0o644))
	}
	write("checkpoints/notes.txt", "the user's, there before the demo")
	before, err := demoSnapshot(dir)
	require.NoError(t, err)
	// The run writes its checkpoints and metrics.
	write("checkpoints/checkpoint_step_000002.pt", "demo")
	write("checkpoints/checkpoint_step_000004.pt", "demo")
	write("metrics.jsonl", "demo")
	require.NoError(t, recordDemoFiles(dir, before))

	own, foreign, err := demoClaims(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"metrics.jsonl", "checkpoints/checkpoint_step_000002.pt", "checkpoints/checkpoint_step_000004.pt"}, own)
	require.Equal(t, []string{"checkpoints/notes.txt"}, foreign)

	// Someone rewrites one of the demo's files: it is theirs now.
	write("checkpoints/checkpoint_step_000004.pt", "the user's, written over the demo's")
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(dir, "checkpoints/checkpoint_step_000004.pt"), later, later))
	own, foreign, err = demoClaims(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"metrics.jsonl", "checkpoints/checkpoint_step_000002.pt"}, own)
	require.Equal(t, []string{"checkpoints/checkpoint_step_000004.pt", "checkpoints/notes.txt"}, foreign)

	require.NoError(t, removeDemoFiles(dir, own))
	require.NoFileExists(t, filepath.Join(dir, "metrics.jsonl"))
	require.NoFileExists(t, filepath.Join(dir, "checkpoints/checkpoint_step_000002.pt"))
	require.FileExists(t, filepath.Join(dir, "checkpoints/checkpoint_step_000004.pt"))
	require.FileExists(t, filepath.Join(dir, "checkpoints/notes.txt"))

	// A record that does not parse owns nothing.
	write(demoRecord, "{")
	own, _, err = demoClaims(dir)
	require.NoError(t, err)
	require.Empty(t, own)
}

// TestDemoRerun: a demo replaces what the one before it wrote (`make demo`
// twice), --overwrite deletes what no demo wrote, and a file put in
// checkpoints/ after a run is refused by the next, and kept.
func TestDemoRerun(t *testing.T) {
	if testing.Short() {
		t.Skip("synthesises speech and trains")
	}
	bin := binary(t)
	dir := t.TempDir()
	demo := func(extra ...string) result {
		return runCLI(t, bin, append([]string{"demo", "--dir", dir, "--utterances", "24", "--epochs", "1", "--max-steps", "2"}, extra...)...)
	}
	notes := filepath.Join(dir, "checkpoints", "notes.txt")
	require.NoError(t, os.MkdirAll(filepath.Dir(notes), 0o755))
	require.NoError(t, os.WriteFile(notes, []byte("mine"), 0o644))
	r := demo()
	require.Equal(t, 2, r.code, r.stderr)
	require.FileExists(t, notes)

	r = demo("--overwrite")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoFileExists(t, notes, "asked for")
	require.FileExists(t, filepath.Join(dir, "checkpoints", "checkpoint_step_000002.pt"))

	r = demo()
	require.Equal(t, 0, r.code, "the earlier demo's files are replaced: %s", r.stderr)

	require.NoError(t, os.WriteFile(notes, []byte("mine"), 0o644))
	r = demo()
	require.Equal(t, 2, r.code, r.stderr)
	requireOneLine(t, r.stderr, "checkpoints/notes.txt")
	b, err := os.ReadFile(notes)
	require.NoError(t, err)
	require.Equal(t, "mine", string(b))
	require.FileExists(t, filepath.Join(dir, "checkpoints", "checkpoint_step_000002.pt"), "refused before anything was removed")
}
