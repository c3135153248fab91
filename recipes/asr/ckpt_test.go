package asr_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

func TestTrainReportsAndPrunesOnlyItsOwnCheckpoints(t *testing.T) {
	data := smallCorpus(t)
	cfg := baseConfig(t, data, t.TempDir())
	cfg.MaxSteps, cfg.CheckpointEvery = 2, 1
	require.NoError(t, os.MkdirAll(cfg.CheckpointDir, 0o755))
	other := map[string]string{}
	for n := 138; n <= 140; n++ {
		path := ckpt.StepPath(cfg.CheckpointDir, n)
		other[path] = fmt.Sprintf("another run's step %d", n)
		require.NoError(t, os.WriteFile(path, []byte(other[path]), 0o644))
	}
	unchanged := func() {
		for path, content := range other {
			b, err := os.ReadFile(path)
			require.NoError(t, err, "the other run's %s is still there", filepath.Base(path))
			require.Equal(t, content, string(b))
		}
	}

	res, err := asr.Train(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, ckpt.StepPath(cfg.CheckpointDir, 2), res.Checkpoint, "the summary names this run's checkpoint")
	require.FileExists(t, ckpt.StepPath(cfg.CheckpointDir, 1))
	unchanged()

	// The same command again would write over steps 1 and 2: refused
	// before the baseline evaluation, nothing touched.
	before, err := os.ReadFile(res.Checkpoint)
	require.NoError(t, err)
	var log []string
	cfg.Events = report.Tee(cfg.Events, report.Lines(&log))
	_, err = asr.Train(context.Background(), cfg)
	var conflict *train.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, []string{"checkpoint_step_000001.pt", "checkpoint_step_000002.pt"}, conflict.Files)
	require.NotContains(t, strings.Join(log, "\n"), "validation before training")
	after, err := os.ReadFile(res.Checkpoint)
	require.NoError(t, err)
	require.Equal(t, before, after)
	unchanged()

	// Overwrite replaces them; the other run's files stay.
	cfg.Overwrite = true
	res, err = asr.Train(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, ckpt.StepPath(cfg.CheckpointDir, 2), res.Checkpoint)
	unchanged()
}
