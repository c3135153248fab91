package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A data command never silently rewrites a data set (issue 24, item 2):
// into a directory that holds one it refuses in one line, exit 2, the
// hand-edited manifest untouched; with --overwrite it says what it
// replaces and writes the new set.
func TestDataRefusesToOverwriteADataSet(t *testing.T) {
	for _, tc := range []struct {
		recipe, marker string
		args           []string
	}{
		{"asr", "train.jsonl", []string{"--utterances", "8"}},
		{"tts", "train.jsonl", []string{"--utterances", "8"}},
		{"clip", "manifest.jsonl", []string{"--images", "20"}},
		{"ganvit", "clips.jsonl", []string{"--clips", "40"}},
	} {
		t.Run(tc.recipe, func(t *testing.T) {
			dir := t.TempDir()
			edited := `{"text": "a caption the user corrected by hand"}` + "\n"
			marker := filepath.Join(dir, tc.marker)
			require.NoError(t, os.WriteFile(marker, []byte(edited), 0o644))
			code, out := runInProcess(append([]string{tc.recipe, "data", "--out", dir}, tc.args...)...)
			require.Equal(t, 2, code, out)
			requireOneLine(t, out, "already holds a data set ("+tc.marker)
			got, err := os.ReadFile(marker)
			require.NoError(t, err)
			require.Equal(t, edited, string(got))
		})
	}
	t.Run("clip --overwrite", func(t *testing.T) {
		bin := binary(t)
		dir := t.TempDir()
		marker := filepath.Join(dir, "manifest.jsonl")
		require.NoError(t, os.WriteFile(marker, []byte("{}\n"), 0o644))
		r := runCLI(t, bin, "clip", "data", "--out", dir, "--images", "20", "--workers", "1", "--overwrite")
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stderr, "--overwrite: replacing the data set in "+dir+" (manifest.jsonl)")
		got, err := os.ReadFile(marker)
		require.NoError(t, err)
		require.NotEqual(t, "{}\n", string(got))
	})
}

// A checkpoint directory the run cannot write in is refused before the
// first step (issue 24, item 6): exit 2, nothing trained.
func TestCheckpointDirCheckedBeforeTraining(t *testing.T) {
	bin := binary(t)
	data := toneCorpus8(t)
	file := filepath.Join(t.TempDir(), "not-a-dir")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	r := runCLI(t, bin, "asr", "train", "--data", data, "--preset", "tiny", "--d-model", "48", "--encoder-layers", "2",
		"--device", "cpu", "--max-steps", "2", "--valid-limit", "1", "--threads", "1", "--checkpoint-dir", file)
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, lastLine(r.stderr), "checkpoint directory "+file)
	require.NotContains(t, r.stderr, "step 1", "no step trained")
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, "x", string(got))
}

// Smaller faults of issue 24 (item 11): values accepted or misnamed before.
func TestSmallBadInputsExitTwo(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"mamba eval batch 0", []string{"mamba", "eval", "--checkpoint", "x.pt", "--batch-size", "0", "--device", "cpu"}, "batch-size 0: must be at least 1"},
		{"mamba eval negative max tokens", []string{"mamba", "eval", "--checkpoint", "x.pt", "--max-tokens", "-5", "--device", "cpu"}, "max-tokens -5: must be at least 0"},
		{"mamba generate denormal temperature", []string{"mamba", "generate", "--checkpoint", "data_test.go", "--temperature", "1e-320", "--device", "cpu"},
			"--temperature 1e-320: must be 0 (greedy) or at least 0.001"},
		{"launch 0 nodes", []string{"launch", "--nnodes", "0", "--", "asr", "train"}, "--nnodes 0: must be at least 1"},
		{"launch negative grace", []string{"launch", "--grace", "-1s", "--", "asr", "train"}, "--grace -1s: must be more than 0"},
		{"launch zero grace", []string{"launch", "--grace", "0", "--", "asr", "train"}, "--grace 0s: must be more than 0"},
		{"ganvit huge GAN batch", []string{"ganvit", "train", "--gan-batch-size", "1000000000", "--device", "cpu"}, "gan-batch-size 1000000000: must be in [1, 16777216]"},
		{"ganvit eval huge generated", []string{"ganvit", "eval", "--checkpoint", "x.pt", "--generated", "1000000000", "--device", "cpu"},
			"generated 1000000000: must be in [0, 1000000]"},
		{"ganvit eval huge batch", []string{"ganvit", "eval", "--checkpoint", "x.pt", "--batch-size", "1000000000", "--device", "cpu"},
			"batch-size 1000000000: must be in [1, 16777216]"},
		{"tts huge codec crop", []string{"tts", "train-codec", "--data", "nodata", "--crop-frames", "1000000000", "--device", "cpu"},
			"crop-frames 1000000000: must be a multiple of 2 in [4, 16384]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := runInProcess(c.args...)
			require.Equal(t, 2, code, out)
			requireOneLine(t, out, c.want)
		})
	}
}

// asr eval --data naming a file, not a corpus directory, is the user's
// error (issue 24, item 11: it was "not a directory", exit 1).
func TestASREvalDataIsADirectory(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "model.pt")
	tinyCheckpoint(t, ckpt)
	file := filepath.Join(dir, "test.jsonl")
	require.NoError(t, os.WriteFile(file, []byte("{}\n"), 0o644))
	for _, c := range []struct {
		name, data, want string
	}{
		{"a file", file, "--data \"" + file + "\": not a directory"},
		{"missing", filepath.Join(dir, "none"), "no such corpus directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := runInProcess("asr", "eval", "--checkpoint", ckpt, "--data", c.data, "--device", "cpu")
			require.Equal(t, 2, code, out)
			requireOneLine(t, out, c.want)
		})
	}
}
