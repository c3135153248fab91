package asr_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// testdata/old_format.pt was written by torchfit before the training core
// was rebuilt (issue 11; commit 5a50d82, `torchfit asr train --preset tiny
// --d-model 32 --encoder-layers 1 --decoder-layers 1 --max-steps 2` on a
// 24-utterance corpus), and old_format.txt is what that build transcribed
// from a sox sine sweep (`sox -D -n -r 16000 -c 1 -b 16 x.wav synth 1.5 sine
// 300-2000`, undithered). The checkpoint package reads it: the same transcript, and a
// run resumes from it.
func TestOldCheckpointsLoad(t *testing.T) {
	path := filepath.Join("testdata", "old_format.pt")
	want, err := os.ReadFile(filepath.Join("testdata", "old_format.txt"))
	require.NoError(t, err)
	wav := filepath.Join(t.TempDir(), "sweep.wav")
	require.NoError(t, exec.Command("sox", "-D", "-n", "-r", "16000", "-c", "1", "-b", "16", wav, "synth", "1.5", "sine", "300-2000").Run())
	got, err := asr.TranscribeFiles(path, []string{wav}, torch.CPU)
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(want)), got[0])

	f, err := ckpt.Read(path)
	require.NoError(t, err)
	defer f.Free()
	step, err := f.Int("step")
	require.NoError(t, err)
	require.Equal(t, 2, step)
	id, files, err := f.Run()
	require.NoError(t, err)
	require.NotEmpty(t, id)
	require.Equal(t, []string{"checkpoint_step_000002.pt"}, files)

	// A run resumes from it (its model, optimizer, schedule and position).
	data := smallCorpus(t)
	cfg := baseConfig(t, data, t.TempDir())
	cfg.Preset, cfg.Resume, cfg.MaxSteps, cfg.MicroBatch, cfg.Accum = "", path, 3, 2, 2
	res, err := asr.Train(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 3, res.Steps)
}
