package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot/plotter"

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
	path := filepath.Join(t.TempDir(), "runs", "first", "metrics.jsonl") // directories made
	m, err := OpenMetrics(path)
	require.NoError(t, err)
	require.NoError(t, m.Close())
	require.NoError(t, os.Remove(path))
	m, err = OpenMetrics(path)
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

// A file that is not JSONL metrics is refused and left as it was; a record
// torn by a killed run is cut off before the next run appends.
func TestMetricsFileExisting(t *testing.T) {
	rec := `{"step":1,"loss":2}` + "\n"
	for _, tc := range []struct {
		name, body string
		err        bool   // refused with ErrNotMetrics
		want       string // the file after a run appends {"step":2...}: its lines' steps
	}{
		{"metrics", rec, false, "1,2"},
		{"torn record", rec + `{"step":2,"lo`, false, "1,2"},
		{"only a torn record", `{"step":1,"lo`, false, "2"},
		{"a config file", "lr: 0.1\nepochs: 3\n", true, ""},
		{"a config file without its newline", "lr: 0.1", true, ""},
		{"a checkpoint", "PK\x03\x04" + strings.Repeat("\x00", 100), true, ""},
		{"a JSON list", "[1, 2]\n", true, ""},
		{"a line of 64 KiB", strings.Repeat("x", 1<<16+1), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o644))
			m, err := OpenMetrics(path)
			if tc.err {
				require.ErrorIs(t, err, ErrNotMetrics)
				got, rerr := os.ReadFile(path)
				require.NoError(t, rerr)
				require.Equal(t, tc.body, string(got), "untouched")
				return
			}
			require.NoError(t, err)
			m.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: 2, Loss: 1}})
			require.NoError(t, m.Close())
			var steps []string
			for _, r := range readJSONL(t, path) {
				steps = append(steps, fmt.Sprint(r["step"]))
			}
			require.Equal(t, tc.want, strings.Join(steps, ","))
		})
	}
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

// writeMetrics writes steps 1..n (loss falling, lr and memory as given)
// and the evaluations through Metrics, as a training run does.
func writeMetrics(t *testing.T, n int, lr float64, mem int64, evals map[int]map[string]float64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	m, err := OpenMetrics(path)
	require.NoError(t, err)
	for s := 1; s <= n; s++ {
		loss := 3 / float64(s)
		if s == 2 {
			loss = math.NaN() // written as null: no point
		}
		m.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: s, Loss: loss, LR: lr,
			Memory: torch.MemStats{Allocated: mem * int64(s), PeakAllocated: mem * int64(s+2), Reserved: mem * int64(s+1)}}})
		if v, ok := evals[s]; ok {
			m.Sink(train.EvalEvent{Step: s, Epoch: 1, Values: v})
		}
	}
	require.NoError(t, m.Close())
	return path
}

type panelWant struct {
	title    string
	series   []string
	fromZero bool
	top      float64
}

// TestMetricsPanels: which panels and series a metrics file gives, with
// and without evaluations.
func TestMetricsPanels(t *testing.T) {
	asr := map[int]map[string]float64{10: {"val_cer": 1.0, "val_loss": 2.5}, 20: {"val_cer": 0.7, "val_loss": 2.1}}
	mamba := map[int]map[string]float64{20: {"val_loss": 2.1, "val_bits_per_char": 3.0, "val_perplexity": 8.2, "cpu_minutes": 0.5}}
	ganvit := map[int]map[string]float64{20: {"train_loss": 0.9, "valid_accuracy": 0.55}}
	lossOnly := panelWant{"loss", []string{"training loss"}, false, 0}
	lr := panelWant{"learning rate", []string{"lr"}, true, 0}
	mem := panelWant{"memory", []string{"allocated", "peak", "reserved"}, true, 0}
	for _, tc := range []struct {
		name  string
		steps int
		lr    float64
		mem   int64
		evals map[int]map[string]float64
		want  []panelWant
		unit  string
	}{
		{"steps only", 20, 1e-3, 1 << 20, nil, []panelWant{lossOnly, lr, mem}, "MiB"},
		{"no lr, no memory (all zero)", 20, 0, 0, nil, []panelWant{lossOnly}, ""},
		{"asr: CER and validation loss", 20, 1e-3, 1 << 20, asr, []panelWant{
			{"loss", []string{"training loss", "val_loss"}, false, 0},
			{"validation", []string{"val_cer"}, true, 1}, lr, mem}, "MiB"},
		{"mamba: other values get panels, timings none", 20, 1e-3, 1 << 30, mamba, []panelWant{
			{"loss", []string{"training loss", "val_loss"}, false, 0},
			{"val_bits_per_char", []string{"val_bits_per_char"}, false, 0},
			{"val_perplexity", []string{"val_perplexity"}, false, 0}, lr, mem}, "GiB"},
		{"ganvit: an evaluation's train_loss beside the loss", 20, 1e-3, 1 << 20, ganvit, []panelWant{
			{"loss", []string{"training loss", "train_loss"}, false, 0},
			{"validation", []string{"valid_accuracy"}, true, 1}, lr, mem}, "MiB"},
		{"a long run: the loss smoothed", 60, 1e-3, 0, asr, []panelWant{
			{"loss", []string{"training loss", "training loss, mean of 5 steps", "val_loss"}, false, 0},
			{"validation", []string{"val_cer"}, true, 1}, lr}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			panels, err := metricsPanels(writeMetrics(t, tc.steps, tc.lr, tc.mem, tc.evals))
			require.NoError(t, err)
			var got []panelWant
			for _, p := range panels {
				w := panelWant{title: p.Title, fromZero: p.FromZero, top: p.Top}
				for _, s := range p.Series {
					w.series = append(w.series, s.Name)
				}
				got = append(got, w)
			}
			require.Equal(t, tc.want, got)
			for i, p := range panels {
				if i == len(panels)-1 {
					require.Equal(t, "step", p.X, "the bottom panel names the shared axis")
				} else {
					require.Empty(t, p.X)
				}
			}
			loss := panels[0].Series[0]
			require.Len(t, loss.XYs, tc.steps-1, "the NaN step is left out")
			for _, s := range panels[0].Series[1:] {
				if strings.HasPrefix(s.Name, "val_") || s.Name == "train_loss" {
					require.True(t, s.Points, "evaluations are marked")
					require.Len(t, s.XYs, len(tc.evals))
				}
			}
			if tc.unit != "" {
				last := panels[len(panels)-1]
				require.Equal(t, tc.unit, last.Y)
				lo, _, ok := last.YRange()
				require.True(t, ok)
				require.Zero(t, lo, "memory from zero")
			}
			for _, p := range panels {
				if p.Title == "validation" {
					lo, hi, ok := p.YRange()
					require.True(t, ok)
					require.Equal(t, [2]float64{0, 1}, [2]float64{lo, hi}, "fractions on a 0–1 axis")
				}
			}
		})
	}
}

// TestRunningMean: a centred mean, over fewer points at the ends.
func TestRunningMean(t *testing.T) {
	var xys plotter.XYs
	for i, y := range []float64{1, 2, 3, 4, 10} {
		xys = append(xys, plotter.XY{X: float64(i + 1), Y: y})
	}
	got := runningMean(xys, 1)
	want := []float64{1.5, 2, 3, 17.0 / 3, 7}
	for i := range want {
		require.Equal(t, xys[i].X, got[i].X)
		require.InDelta(t, want[i], got[i].Y, 1e-12)
	}
}

func TestPlotMetrics(t *testing.T) {
	path := writeMetrics(t, 20, 1e-3, 1<<20, map[int]map[string]float64{20: {"cer": 0.1}})
	out := filepath.Join(t.TempDir(), "curves.png")
	require.NoError(t, PlotMetrics(path, out))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, 10*96, img.Bounds().Dx()) // 10 in at vgimg's 96 dpi
	require.Equal(t, 998, img.Bounds().Dy())   // 4 panels of 2.6 in
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
			s.Sink(train.EpochEvent{Epoch: 2, Epochs: 2, Batches: 5, LastStep: 9})
		}
		s.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: step, Loss: float64(step), Count: 2, LR: 1e-3 * float64(step),
			Samples: 8, Duration: 100 * time.Millisecond, Memory: torch.MemStats{Allocated: 3 << 20, PeakAllocated: 5 << 20}}})
	}
	stamp := regexp.MustCompile(`(?m)^\[ *\d+\.\ds\] `)
	require.Equal(t, []string{
		"step 1 | epoch 1/2 | loss 1.0000 | lr 1.00e-03 | 80.0 samples/s | memory 3.00 MiB (peak 5.00 MiB)",
		"step 4 | epoch 1/2 | loss 3.0000 | lr 4.00e-03 | 80.0 samples/s | memory 3.00 MiB (peak 5.00 MiB)",
		"step 8/9 | epoch 2/2 | loss 6.5000 | lr 8.00e-03 | 80.0 samples/s | memory 3.00 MiB (peak 5.00 MiB)", // the run's last step, once known
	}, strings.Split(strings.TrimSuffix(stamp.ReplaceAllString(sb.String(), ""), "\n"), "\n"))

	sb.Reset()
	s.SetEvery(0)
	s.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: 12}})
	require.Empty(t, sb.String(), "no lines at cadence 0")
	var nilLog *StepLog
	nilLog.Sink(train.StepEvent{StepInfo: train.StepInfo{Step: 1}}) // does nothing
}
