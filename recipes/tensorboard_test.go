package recipes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// prepareWith runs Prepare on a train command given args, then fn with
// the Run (closed after), and returns Prepare's error.
func prepareWith(t *testing.T, args []string, fn func(r *Run)) error {
	t.Helper()
	var got error
	cmd := &cli.Command{Name: "train", Flags: Flags(Defaults{MicroBatch: 4, Accum: 2, Epochs: 2, LR: 1e-2}),
		Action: func(c *cli.Context) error {
			r, err := Prepare(c, Spec{Name: "x", OneProcess: "a test"})
			got = err
			if err == nil {
				fn(r)
				require.NoError(t, r.Close())
			}
			return nil
		}}
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	require.NoError(t, app.Run(append([]string{"x", "train"}, args...)))
	return got
}

// --tensorboard names a directory: a file there is refused (a user error,
// exit 2), on the command line or in the --config file, before anything
// is written; a directory below a file cannot be made.
func TestTensorBoardFlagRefusesAFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "metrics.jsonl")
	require.NoError(t, os.WriteFile(file, []byte("{}\n"), 0o644))
	cfg := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("tensorboard: "+file+"\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a file", []string{"--tensorboard", file}, `--tensorboard "` + file + `": is a file, not a directory`},
		{"a file in the config", []string{"--config", cfg}, "--config " + cfg + `: tensorboard "` + file + `": is a file`},
		{"below a file", []string{"--tensorboard", filepath.Join(file, "tb")}, "--tensorboard: report: tensorboard " + filepath.Join(file, "tb")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := prepareWith(t, tc.args, func(*Run) { t.Fatal("prepared") })
			require.Error(t, err)
			require.True(t, IsUserError(err), "%v", err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "\n")
			b, rerr := os.ReadFile(file)
			require.NoError(t, rerr)
			require.Equal(t, "{}\n", string(b), "the file is left as it was")
		})
	}
}

// A run prepared with --tensorboard writes its steps and evaluations, as
// Fit reports them, to a new event file that TensorBoard reads; a second
// run adds a file beside it.
func TestTensorBoardFlagWritesTheRun(t *testing.T) {
	tbDir := filepath.Join(t.TempDir(), "tb")
	var losses []float64
	for run := range 2 {
		err := prepareWith(t, []string{"--tensorboard", tbDir, "--device", "cpu"}, func(r *Run) {
			losses = append(losses, fitTiny(t, r.Events, run*4)...)
		})
		require.NoError(t, err)
	}
	entries, err := os.ReadDir(tbDir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "a file per run")
	for _, e := range entries {
		require.True(t, strings.HasPrefix(e.Name(), report.TensorBoardFilePrefix), e.Name())
	}
	if !pyref.HasModule("tensorboard") {
		t.Skipf("%s has no tensorboard module (the PyTorch 2.11 venv has it: make venv)", pyref.Python)
	}
	var got map[string][][2]float64
	pyref.Run(t, `
		from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
		acc = EventAccumulator(inp)
		acc.Reload()
		emit({tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]})
	`, tbDir, &got)
	for _, tag := range []string{report.TagLoss, report.TagLR, report.TagRate, report.TagAllocated, report.TagPeak, report.TagReserved} {
		require.Len(t, got[tag], 8, tag)
		for k, p := range got[tag] {
			require.Equal(t, float64(k+1), p[0], "%s: step-aligned", tag)
			if tag == report.TagLoss {
				require.InEpsilon(t, losses[k], p[1], 1e-6, "step %d", k+1)
			}
		}
	}
	require.Equal(t, [][2]float64{{2, 0.5}, {4, 0.5}, {6, 0.5}, {8, 0.5}}, got[report.TagEval+"val_loss"])
}

// fitTiny fits a linear model for 2 epochs of 2 steps from step first,
// reporting to events, and returns the steps' losses.
func fitTiny(t *testing.T, events train.Sink, first int) []float64 {
	t.Helper()
	torch.ManualSeed(1)
	x := torch.Randn([]int64{16, 3}).Keep()
	ds, err := data.NewTensorDataset(map[string]*torch.Tensor{"x": x, "y": x.SumDim([]int64{1}, true).Keep()})
	require.NoError(t, err)
	defer ds.Free()
	m := nn.NewLinear(3, 1, true)
	defer nn.Free(m)
	opt := nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.01})
	defer opt.Free()
	loss := func(b *data.Batch) *torch.Tensor {
		return torch.MSELoss(m.Forward(b.Fields["x"]), b.Fields["y"], torch.ReduceMean)
	}
	tr, err := train.New(m, opt, loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU, Events: events})
	require.NoError(t, err)
	tr.SetSteps(first)
	var losses []float64
	tr.OnStep = func(i train.StepInfo) { losses = append(losses, i.Loss) }
	newLoader := func(st *data.State) (train.Loader, error) {
		return data.NewLoader(data.Dataset[data.Sample](ds), data.Collate, data.Options{BatchSize: 8, Resume: st})
	}
	_, err = train.Fit(context.Background(), tr, newLoader, train.FitConfig{Epochs: 2,
		Eval: func(int) (map[string]float64, error) { return map[string]float64{"val_loss": 0.5}, nil }})
	require.NoError(t, err)
	return losses
}
