package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    train.Event
		want string
	}{
		{"message", train.Message{Text: "hello"}, "hello"},
		{"oom", train.OOMEvent{Step: 7, From: 8, To: 4, Accum: 4, Effective: 16},
			"out of memory at micro-batch 8 (step 7): redoing the window with micro-batch 4 × 4 accumulation steps; effective batch 16 unchanged"},
		{"memory", train.MemoryEvent{Step: 3, Stats: torch.MemStats{Allocated: 3 << 20, PeakAllocated: 5 << 20, Reserved: 6 << 20}},
			"step 3 | memory allocated 3.00 MiB | peak 5.00 MiB | reserved 6.00 MiB"},
		{"skip", train.SkipEvent{Step: 2, Reason: "inf gradients"}, "step 2: inf gradients; skipping the optimizer step"},
		{"eval", train.EvalEvent{Step: 9, Epoch: 2, Values: map[string]float64{"wer": 0.5, "cer": 0.25}}, "epoch 2: cer 0.2500, wer 0.5000"},
		{"eval with the recipe's line", train.EvalEvent{Step: 9, Epoch: 2, Values: map[string]float64{"val_loss": 1}, Text: "step 9: held-out loss 1.0000"},
			"step 9: held-out loss 1.0000"},
		{"step", train.StepEvent{StepInfo: train.StepInfo{Step: 1}}, ""},
		{"checkpoint", train.CheckpointEvent{Step: 1, Path: "x.pt"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Text(tc.e))
		})
	}
}

func TestTeeSkipsNilSinksAndKeepsOrder(t *testing.T) {
	var a, b []string
	sink := Tee(Lines(&a), nil, Lines(&b))
	sink(train.Message{Text: "one"})
	sink(train.StepEvent{})
	sink(train.Message{Text: "two"})
	require.Equal(t, []string{"one", "two"}, a)
	require.Equal(t, a, b)
}

func TestLoggerLines(t *testing.T) {
	var sb strings.Builder
	l := NewLogger(&sb)
	l.Sink(train.Message{Text: "starting"})
	l.Sink(train.StepEvent{})
	l.Printf("%d steps", 3)
	lines := strings.Split(strings.TrimSuffix(sb.String(), "\n"), "\n")
	require.Len(t, lines, 2)
	stamp := regexp.MustCompile(`^\[ *\d+\.\ds\] `)
	require.Regexp(t, stamp, lines[0])
	require.Equal(t, "starting", stamp.ReplaceAllString(lines[0], ""))
	require.Equal(t, "3 steps", stamp.ReplaceAllString(lines[1], ""))
}

func TestMetricsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	m, err := OpenMetrics(path)
	require.NoError(t, err)
	info := train.StepInfo{Step: 1, Loss: 2.5, LR: 1e-3, GradNorm: math.NaN(), Samples: 8, MicroBatch: 4, Micro: 2,
		Duration: 2 * time.Second, Memory: torch.MemStats{Allocated: 100, PeakAllocated: 300, Reserved: 400}}
	m.Sink(train.StepEvent{StepInfo: info, Epoch: 1})
	m.Sink(train.Message{Text: "not recorded"})
	m.Sink(train.EvalEvent{Step: 1, Epoch: 1, Values: map[string]float64{"cer": 0.5}})
	require.NoError(t, m.Close())

	// Reopening appends.
	m, err = OpenMetrics(path)
	require.NoError(t, err)
	info.Step, info.Loss = 2, math.Inf(1)
	m.Sink(train.StepEvent{StepInfo: info, Epoch: 1})
	require.NoError(t, m.Close())

	recs := readJSONL(t, path)
	require.Len(t, recs, 3)
	require.Equal(t, 1.0, recs[0]["step"])
	require.Equal(t, 2.5, recs[0]["loss"])
	require.Nil(t, recs[0]["grad_norm"], "NaN is written as null")
	require.Equal(t, 4.0, recs[0]["samples_per_sec"])
	require.Equal(t, 300.0, recs[0]["peak"])
	require.Equal(t, map[string]any{"cer": 0.5}, recs[1]["eval"])
	require.Nil(t, recs[2]["loss"], "inf is written as null")
	var nilMetrics *Metrics
	require.NoError(t, nilMetrics.Close())
}

func readJSONL(t *testing.T, path string) []map[string]any {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var recs []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		recs = append(recs, r)
	}
	require.NoError(t, sc.Err())
	return recs
}

func TestPlotMetrics(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.jsonl")
	m, err := OpenMetrics(path)
	require.NoError(t, err)
	for s := 1; s <= 20; s++ {
		m.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: s, Loss: 3 / float64(s), Memory: torch.MemStats{Allocated: int64(s) << 20, PeakAllocated: int64(s+2) << 20}}})
	}
	m.Sink(train.EvalEvent{Step: 20, Values: map[string]float64{"cer": 0.1}})
	require.NoError(t, m.Close())

	out := filepath.Join(dir, "curves.png")
	require.NoError(t, PlotMetrics(path, out))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, 8*96, img.Bounds().Dx()) // 8 × 7 inches at vgimg's 96 dpi
	require.Equal(t, 7*96, img.Bounds().Dy())
	colours := map[[4]uint32]bool{}
	for y := 0; y < img.Bounds().Dy(); y += 3 {
		for x := 0; x < img.Bounds().Dx(); x += 3 {
			r, g, b, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, b, a}] = true
		}
	}
	require.Greater(t, len(colours), 3, "the picture has axes, text and curves")
}

func TestPlotMetricsErrors(t *testing.T) {
	dir := t.TempDir()
	evalOnly := filepath.Join(dir, "eval.jsonl")
	require.NoError(t, os.WriteFile(evalOnly, []byte(`{"step":1,"eval":{"cer":0.5}}`+"\n"), 0o644))
	err := PlotMetrics(evalOnly, filepath.Join(dir, "a.png"))
	require.ErrorIs(t, err, ErrNoSteps)

	corrupt := filepath.Join(dir, "corrupt.jsonl")
	require.NoError(t, os.WriteFile(corrupt, []byte(`{"step":1,"loss":2}`+"\n{\"step\":"), 0o644))
	err = PlotMetrics(corrupt, filepath.Join(dir, "b.png"))
	var syntax *json.SyntaxError
	require.True(t, errors.As(err, &syntax), "got %v", err)

	err = PlotMetrics(filepath.Join(dir, "missing.jsonl"), filepath.Join(dir, "c.png"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, statErr := os.Stat(filepath.Join(dir, "c.png"))
	require.ErrorIs(t, statErr, os.ErrNotExist, "no picture for a missing file")
}

func TestProgressIsNilOffTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	p := NewProgress(f)
	require.Nil(t, p)
	p.Sink(train.EpochEvent{Epoch: 1, Epochs: 1, Batches: 3}) // a nil Progress does nothing
	p.Finish()
}

// Off a terminal, a step line every `every` steps (and the first): the
// epoch, the mean loss and the samples/s over the steps since the last
// line, the step's learning rate and memory.
func TestStepLog(t *testing.T) {
	var sb strings.Builder
	s := NewStepLog(NewLogger(&sb), 4)
	s.Sink(train.EpochEvent{Epoch: 1, Epochs: 2, Batches: 5})
	for step := 1; step <= 9; step++ {
		if step == 6 {
			s.Sink(train.EpochEvent{Epoch: 2, Epochs: 2, Batches: 5})
		}
		s.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: step, Loss: float64(step), Count: 2, LR: 1e-3 * float64(step),
			Samples: 8, Duration: 100 * time.Millisecond, Memory: torch.MemStats{Allocated: 3 << 20, PeakAllocated: 5 << 20}}})
	}
	stamp := regexp.MustCompile(`(?m)^\[ *\d+\.\ds\] `)
	require.Equal(t, []string{
		"step 1 | epoch 1/2 | loss 1.0000 | lr 1.00e-03 | 80.0 samples/s | memory 3.00 MiB (peak 5.00 MiB)",
		"step 4 | epoch 1/2 | loss 3.0000 | lr 4.00e-03 | 80.0 samples/s | memory 3.00 MiB (peak 5.00 MiB)",
		"step 8 | epoch 2/2 | loss 6.5000 | lr 8.00e-03 | 80.0 samples/s | memory 3.00 MiB (peak 5.00 MiB)",
	}, strings.Split(strings.TrimSuffix(stamp.ReplaceAllString(sb.String(), ""), "\n"), "\n"))

	sb.Reset()
	s.SetEvery(0)
	s.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: 12}})
	require.Empty(t, sb.String(), "no lines at cadence 0")
	var nilLog *StepLog
	nilLog.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: 1}}) // does nothing
}
