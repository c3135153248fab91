package asr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
)

var (
	corpusOnce sync.Once
	corpusDir  string
	corpusErr  error
)

// smallCorpus synthesises one tiny corpus for the training tests.
func smallCorpus(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("espeak-ng"); err != nil {
		t.Skip("espeak-ng missing: run 'make deps'")
	}
	corpusOnce.Do(func() {
		corpusDir, corpusErr = os.MkdirTemp("", "torchfit-asr-train-")
		if corpusErr != nil {
			return
		}
		cfg := speech.DefaultGenerateConfig()
		cfg.OutDir, cfg.Utterances, cfg.Workers = corpusDir, 60, 2
		_, corpusErr = speech.Generate(context.Background(), cfg)
	})
	require.NoError(t, corpusErr)
	return corpusDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if corpusDir != "" {
		os.RemoveAll(corpusDir)
	}
	os.Exit(code)
}

// baseConfig trains a small tiny conformer; its steps and evaluations are
// recorded in dir/metrics.jsonl.
func baseConfig(t *testing.T, data, dir string) asr.TrainConfig {
	m, err := report.OpenMetrics(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return asr.TrainConfig{
		Common: recipes.Common{Data: data, MicroBatch: 4, Accum: 2, Device: torch.CPU, Epochs: 50, MaxSteps: 24, LR: 3e-3, Warmup: 4, ClipNorm: 5, CheckpointDir: filepath.Join(dir, "ck"), CheckpointEvery: 12, Seed: 3},
		Preset: "tiny", DModel: 64, EncoderLayers: 2, Events: m.Sink, ValidLimit: 8,
	}
}

type stepLine struct {
	Step       int      `json:"step"`
	Loss       *float64 `json:"loss"`
	MicroBatch int      `json:"micro_batch"`
	Samples    int      `json:"samples"`
}

func readMetrics(t *testing.T, path string) []stepLine {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []stepLine
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var s stepLine
		require.NoError(t, json.Unmarshal([]byte(l), &s))
		if s.Loss != nil {
			out = append(out, s)
		}
	}
	return out
}

func mean(xs []stepLine) float64 {
	var s float64
	for _, x := range xs {
		s += *x.Loss
	}
	return s / float64(len(xs))
}

func TestTrainLossFallsAndResumes(t *testing.T) {
	data := smallCorpus(t)
	dir := t.TempDir()
	cfg := baseConfig(t, data, dir)
	res, err := asr.Train(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 24, res.Steps)
	steps := readMetrics(t, filepath.Join(dir, "metrics.jsonl"))
	require.Len(t, steps, 24)
	first, last := mean(steps[:4]), mean(steps[len(steps)-4:])
	t.Logf("loss: first 4 steps %.3f, last 4 steps %.3f; params %d; CER %.3f -> %.3f", first, last, res.Params, res.CERStart, res.CER)
	require.Less(t, last, 0.8*first, "the loss falls")

	// Resume from the step-12 checkpoint: it continues at step 13.
	rdir := t.TempDir()
	rcfg := baseConfig(t, data, rdir)
	rcfg.Resume = filepath.Join(cfg.CheckpointDir, "checkpoint_step_000012.pt")
	rres, err := asr.Train(context.Background(), rcfg)
	require.NoError(t, err)
	require.Equal(t, 24, rres.Steps)
	resumed := readMetrics(t, filepath.Join(rdir, "metrics.jsonl"))
	require.Equal(t, 13, resumed[0].Step, "the resumed run continues at the next step")
	require.Len(t, resumed, 12)
	require.InDelta(t, *steps[12].Loss, *resumed[0].Loss, 1e-3, "and sees the batch the straight run saw")

	// Evaluation and transcription from the checkpoint.
	cer, _, n, err := asr.EvaluateSplit(res.Checkpoint, data, "test", torch.CPU)
	require.NoError(t, err)
	require.Positive(t, n)
	require.GreaterOrEqual(t, cer, 0.0)
	_, _, _, err = asr.EvaluateSplit(filepath.Join(dir, "missing.pt"), data, "test", torch.CPU)
	require.Error(t, err)
}

func TestTrainUnderMemoryCapAdaptsMicroBatch(t *testing.T) {
	data := smallCorpus(t)
	peak := func(batch, accum int) int64 {
		cfg := baseConfig(t, data, t.TempDir())
		cfg.MicroBatch, cfg.Accum, cfg.MaxSteps, cfg.CheckpointDir = batch, accum, 3, ""
		res, err := asr.Train(context.Background(), cfg)
		require.NoError(t, err)
		return res.PeakMemory
	}
	p4, p1 := peak(4, 2), peak(1, 8)
	t.Logf("peak memory: micro-batch 4 %s, micro-batch 1 %s", torch.FormatBytes(p4), torch.FormatBytes(p1))
	require.Less(t, p1, p4)
	capDir := t.TempDir()
	cfg := baseConfig(t, data, capDir)
	cfg.MaxSteps, cfg.CheckpointDir = 6, ""
	cfg.MemoryLimit = fmt.Sprint(p1 + (p4-p1)/3)
	var log []string
	cfg.Events = report.Tee(cfg.Events, report.Lines(&log))
	res, err := asr.Train(context.Background(), cfg)
	require.NoError(t, err, strings.Join(log, "\n"))
	require.Positive(t, res.OOMEvents, "the cap forced out-of-memory adaptation")
	require.Less(t, res.MicroBatch, 4)
	for _, s := range readMetrics(t, filepath.Join(capDir, "metrics.jsonl")) {
		require.Equal(t, 8, s.Samples, "every step still sees the effective batch of 8")
	}
	require.Contains(t, strings.Join(log, "\n"), "effective batch 8 unchanged")
}

func TestTrainErrors(t *testing.T) {
	cfg := baseConfig(t, t.TempDir(), t.TempDir())
	_, err := asr.Train(context.Background(), cfg)
	require.ErrorContains(t, err, "torchfit asr data")
	_, err = asr.VRAMPreset("10gb")
	var ce *recipes.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "vram", ce.Field)
	p, err := asr.VRAMPreset("12GB")
	require.NoError(t, err)
	require.Equal(t, "optimized", p.Model)
}
