package train_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// fitRun trains the regression model with dropout and Adam for up to
// maxSteps steps (2 epochs of 8 steps max 16... see below), checkpointing
// every step into dir, and returns the final parameters.
func fitRun(t testing.TB, dir string, maxSteps int, resume string, onStep func(train.StepInfo)) []float32 {
	torch.SetNumThreads(1) // bit-exact CPU results need one intra-op thread
	ds := regressionData(96)
	defer ds.Free()
	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	loss := func(b *data.Batch) *torch.Tensor {
		h := m.l1.Forward(b.Fields["x"]).Relu().Dropout(0.2, true)
		h = m.l2.Forward(h).Relu()
		return torch.MSELoss(m.l3.Forward(h).MeanDim([]int64{1}, false), b.Fields["y"], torch.ReduceMean)
	}
	tr, err := train.New(m, opt, loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU})
	if err != nil {
		t.Fatal(err)
	}
	tr.Sched = nn.NewSchedule(opt, nn.WarmupCosineLR(3, 24, 0.1))
	defer tr.Sched.Free()
	tr.OnStep = onStep
	newLoader := func(st *data.State) (train.Loader, error) {
		return data.NewLoader(data.Dataset[data.Sample](ds), data.Collate,
			data.Options{BatchSize: 8, Shuffle: true, Seed: 42, Workers: 1, Resume: st})
	}
	ctx := context.Background()
	if os.Getenv("TORCHFIT_FIT_SIGNAL") != "" {
		var stop context.CancelFunc
		ctx, stop = report.SignalContext(ctx)
		defer stop()
	}
	_, err = train.Fit(ctx, tr, newLoader, train.FitConfig{
		Epochs: 3, MaxSteps: maxSteps, CheckpointDir: dir, CheckpointEvery: 1, KeepLast: 3, Resume: resume,
	})
	if err != nil && !(errors.Is(err, train.ErrInterrupted) && os.Getenv("TORCHFIT_FIT_SIGNAL") != "") {
		t.Fatal(err)
	}
	var out []float32
	for _, p := range nn.Parameters(m) {
		out = append(out, p.T.Float32s()...)
	}
	return out
}

// TestFitChild is the child process of TestResumeAfterKillIsBitExact.
func TestFitChild(t *testing.T) {
	dir := os.Getenv("TORCHFIT_FIT_CHILD")
	if dir == "" {
		t.Skip("child process only")
	}
	hang, _ := strconv.Atoi(os.Getenv("TORCHFIT_FIT_HANG"))
	term, _ := strconv.Atoi(os.Getenv("TORCHFIT_FIT_SIGNAL"))
	fitRun(t, dir, 20, "", func(s train.StepInfo) {
		if s.Step == hang {
			os.Stdout.WriteString("HANG\n")
			time.Sleep(time.Hour)
		}
		if s.Step == term {
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
		}
	})
	os.Stdout.WriteString("CHILD DONE\n")
}

func TestResumeAfterKillIsBitExact(t *testing.T) {
	straight := fitRun(t, t.TempDir(), 20, "", nil)

	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFitChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TORCHFIT_FIT_CHILD="+dir, "TORCHFIT_FIT_HANG=11")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	hung := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "HANG") {
			hung = true
			break
		}
	}
	require.True(t, hung, "the child reached step 11")
	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no chance to clean up
	cmd.Wait()

	ckpt := ckpt.StepPath(dir, 10)
	require.FileExists(t, ckpt)
	resumed := fitRun(t, t.TempDir(), 20, ckpt, nil)
	require.Equal(t, straight, resumed, "10 steps + kill -9 + 10 resumed steps == 20 straight steps, bit for bit")
}

func TestSIGTERMFinishesTheStepAndSaves(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFitChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TORCHFIT_FIT_CHILD="+dir, "TORCHFIT_FIT_SIGNAL=3")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the process exits 0 after a SIGTERM:\n%s", out)
	require.Contains(t, string(out), "CHILD DONE")
	require.FileExists(t, ckpt.StepPath(dir, 3), "the step in flight finished and was saved")
	require.NoFileExists(t, ckpt.StepPath(dir, 5), "training stopped")
	// The saved step resumes.
	fitRun(t, t.TempDir(), 5, ckpt.StepPath(dir, 3), nil)
}

func TestCheckpointFromAnotherModelIsRefused(t *testing.T) {
	dir := t.TempDir()
	fitRun(t, dir, 2, "", nil)
	ckpt := ckpt.StepPath(dir, 2)
	before, err := os.ReadFile(ckpt)
	require.NoError(t, err)

	torch.ManualSeed(1)
	other := &regression{}
	other.l1 = nn.RegisterModule(&other.Base, "l1", nn.NewLinear(16, 128, true))
	other.l2 = nn.RegisterModule(&other.Base, "l2", nn.NewLinear(128, 128, true))
	other.l3 = nn.RegisterModule(&other.Base, "l3", nn.NewLinear(128, 1, true))
	defer nn.Free(other)
	opt := nn.NewAdam(nn.Parameters(other), nn.AdamDefaults(1e-3))
	defer opt.Free()
	tr, err := train.New(other, opt, other.loss, train.Config{MicroBatch: 1, Accum: 1, Device: torch.CPU})
	require.NoError(t, err)
	want := nn.Parameters(other)[0].T.Float32s()
	_, err = tr.LoadCheckpoint(ckpt)
	require.ErrorContains(t, err, "saved from another model: l1.weight has shape [256 16] in the checkpoint, [128 16] in this model")
	require.Equal(t, want, nn.Parameters(other)[0].T.Float32s(), "the model is untouched")

	corrupt := filepath.Join(dir, "corrupt.pt")
	require.NoError(t, os.WriteFile(corrupt, before[:len(before)/2], 0o644))
	_, err = tr.LoadCheckpoint(corrupt)
	require.Error(t, err)
	require.True(t, errors.Is(err, ptfile.ErrBadFile), "a truncated file is reported as such: %v", err)
	after, err := os.ReadFile(ckpt)
	require.NoError(t, err)
	require.Equal(t, before, after, "loading never writes the checkpoint")
}

func TestCheckpointLoadsInPython(t *testing.T) {
	dir := t.TempDir()
	params := fitRun(t, dir, 3, "", nil)
	var got struct {
		Keys   []string  `json:"keys"`
		First  []float64 `json:"first"`
		Step   int       `json:"step"`
		Loader []int     `json:"loader"`
		Opt    int       `json:"opt"`
	}
	pyref.Run(t, `
		ck = torch.load(inp["path"])
		sd = ck["model"]
		emit({"keys": list(sd.keys()), "first": sd["l1.weight"].flatten()[:5].tolist(), "step": ck["step"],
		      "loader": [ck["loader"]["epoch"], ck["loader"]["batch"]], "opt": len(ck["optimizer"])})
	`, map[string]any{"path": ckpt.StepPath(dir, 3)}, &got)
	require.Equal(t, []string{"l1.weight", "l1.bias", "l2.weight", "l2.bias", "l3.weight", "l3.bias"}, got.Keys)
	require.InDeltaSlice(t, params[:5], got.First, 0)
	require.Equal(t, 3, got.Step)
	require.Equal(t, []int{0, 3}, got.Loader)
	require.Positive(t, got.Opt)
}

func TestMetricsAndPlot(t *testing.T) {
	dir := t.TempDir()
	metrics := filepath.Join(dir, "metrics.jsonl")
	ds := regressionData(64)
	defer ds.Free()
	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.01})
	defer opt.Free()
	tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU})
	require.NoError(t, err)
	mf, err := report.OpenMetrics(metrics)
	require.NoError(t, err)
	_, err = train.Fit(context.Background(), tr, func(st *data.State) (train.Loader, error) {
		return data.NewLoader(data.Dataset[data.Sample](ds), data.Collate, data.Options{BatchSize: 8, Resume: st})
	}, train.FitConfig{Epochs: 2, Events: mf.Sink,
		Eval: func(int) (map[string]float64, error) { return map[string]float64{"val_loss": 1}, nil }})
	require.NoError(t, err)
	require.NoError(t, mf.Close())
	raw, err := os.ReadFile(metrics)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 16+2, "one line per step and per evaluation")
	require.Contains(t, lines[0], `"allocated":`)
	png := filepath.Join(dir, "curves.png")
	require.NoError(t, report.PlotMetrics(metrics, png))
	st, err := os.Stat(png)
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(10000))
}
