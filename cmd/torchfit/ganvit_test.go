package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes/ganvit"
)

// The GAN + ViT recipe's exit statuses: bad input 2 with one line (a
// schedule naming a missing layer, a corrupt clip, spectrogram shapes
// that do not match the checkpoint), test-memory 0 when the configuration
// fits and 3 when it does not (also as train --dry-run).
func TestGanvitExitStatus(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	_, err := ganvit.Generate(context.Background(), ganvit.GenerateConfig{OutDir: data, Clips: 24, Seconds: 1, Seed: 1})
	require.NoError(t, err)
	small := []string{"--device", "cpu", "--preset", "cpu", "--n-mels", "16", "--frames", "44", "--vit", "tiny", "--gan-batch-size", "4", "--batch-size", "4"}
	args := func(a ...string) []string { return append(append([]string{}, a...), small...) }
	ck := filepath.Join(dir, "ck")
	code, out := runInProcess(args("ganvit", "train", "--data", data, "--stage", "gan", "--gan-epochs", "1", "--max-steps", "1", "--checkpoint-dir", ck)...)
	require.Equal(t, 0, code, out)
	gan := filepath.Join(ck, "checkpoint_gan_epoch_1.pt")

	corrupt := filepath.Join(dir, "corrupt")
	require.NoError(t, os.CopyFS(corrupt, os.DirFS(data)))
	clips, err := ganvit.ReadManifest(corrupt)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(corrupt, clips[2].Path), []byte("RIFF"), 0o644))

	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"schedule names a missing layer", args("ganvit", "train", "--data", data, "--unfreeze", "{0: [7]}", "--checkpoint-dir", filepath.Join(dir, "x")), 2, "names encoder layer 7; the ViT has 2"},
		{"bad schedule", args("ganvit", "train", "--data", data, "--unfreeze", "8: eleven"), 2, "--unfreeze"},
		{"no data", args("ganvit", "train", "--data", filepath.Join(dir, "none"), "--checkpoint-dir", filepath.Join(dir, "x")), 2, "torchfit ganvit data --out"},
		{"corrupt clip", args("ganvit", "train", "--data", corrupt, "--checkpoint-dir", filepath.Join(dir, "x")), 2, clips[2].Path},
		{"resume with other mels", append(args("ganvit", "train", "--data", data, "--resume", gan, "--checkpoint-dir", ck), "--n-mels", "32"), 2, "do not match the checkpoint"},
		{"resume with another latent size", append(args("ganvit", "train", "--data", data, "--resume", gan, "--checkpoint-dir", ck), "--latent-dim", "7"), 2, "--latent-dim 7 (it has "},
		{"eval with other frames", []string{"ganvit", "eval", "--checkpoint", gan, "--data", data, "--frames", "1292", "--device", "cpu"}, 2, "spectrograms of 16 mels × 1292 frames do not match the checkpoint"},
		{"eval generating past memory", []string{"ganvit", "eval", "--checkpoint", gan, "--data", data, "--generated", "500000", "--device", "cpu"}, 2,
			"generated 500000: must be in [0, 381300]"},
		{"eval of a missing file", []string{"ganvit", "eval", "--checkpoint", filepath.Join(dir, "none.pt"), "--data", data}, 2, "no such file"},
		{"test-memory fits", args("ganvit", "test-memory"), 0, ""},
		// Train's flags that test-memory cannot honour: refused, one line.
		{"test-memory writes no metrics", args("ganvit", "test-memory", "--metrics", filepath.Join(dir, "m.jsonl")), 2, "--metrics"},
		{"test-memory saves no checkpoint", args("ganvit", "test-memory", "--checkpoint-dir", filepath.Join(dir, "tm")), 2, "saves and logs nothing"},
		{"test-memory reads no data", args("ganvit", "test-memory", "--data", data), 2, "reads no data"},
		{"train --dry-run fits", args("ganvit", "train", "--dry-run"), 0, ""},
		{"test-memory out of memory", args("ganvit", "test-memory", "--memory-limit", "1MiB"), 3, "test-memory: the GAN step ran out of memory"},
		{"train --dry-run out of memory", args("ganvit", "train", "--dry-run", "--memory-limit", "1MiB"), 3, "out of memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := runInProcess(c.args...)
			require.Equal(t, c.code, code, out)
			if c.code != 0 {
				requireOneLine(t, out, c.want)
			}
		})
	}
	// memory-table's --batch-size (BATCH_SIZE, the train verb's spelling)
	// is the classifier's micro-batch it measures; it was read by nothing
	// and every value gave the preset's 12.
	r := runCLIIn(t, dir, binary(t), append(args("ganvit", "memory-table", "--data", data), "--batch-size", "2")...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "BATCH_SIZE 2,")
	// Nothing was written where the failed runs pointed.
	require.NoDirExists(t, filepath.Join(dir, "x"))
	require.NoDirExists(t, filepath.Join(dir, "tm"))
	require.NoFileExists(t, filepath.Join(dir, "m.jsonl"))
	entries, err := os.ReadDir(ck)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, "checkpoint_gan_epoch_1.pt", strings.Join(names, " "))
}
