package train_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// The regression model, AdamW and WarmupCosineLR(3, 24, 0.1) of fitRun,
// in Python.
const pyRegression = `
import math
class Regression(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = torch.nn.Linear(16, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 1)
m = Regression()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
def warmup_cosine(step, warmup=3, total=24, min_ratio=0.1):
    if step < warmup:
        return step / max(1, warmup)
    progress = min(1, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
v2 = int(torch.__version__.split(".")[0]) >= 2
`

// A checkpoint Fit wrote is resumed by a Python loop with PyTorch's own
// load_state_dict: model, AdamW, LambdaLR (and weights_only=True on 2.x).
func TestFitCheckpointResumesInPython(t *testing.T) {
	dir := t.TempDir()
	fitRun(t, dir, 3, "", nil)
	f, err := ckpt.Read(ckpt.StepPath(dir, 3))
	require.NoError(t, err)
	defer f.Free()
	var got struct {
		LR      float64   `json:"lr"`
		Steps   []float64 `json:"steps"`
		Last    int       `json:"last_epoch"`
		ExpAvg  []float64 `json:"exp_avg"`
		Groups  int       `json:"groups"`
		Scaler  []string  `json:"scaler"`
		Indices []int     `json:"indices"`
	}
	pyref.Run(t, pyRegression+`
ck = torch.load(inp["path"], weights_only=v2)
m.load_state_dict(ck["model"])
opt.load_state_dict(ck["optimizer"])
sched.load_state_dict(ck["scheduler"])
st = opt.state_dict()
emit({"lr": opt.param_groups[0]["lr"], "steps": [float(s["step"]) for s in st["state"].values()],
      "last_epoch": sched.last_epoch, "exp_avg": t2l(opt.state[m.l1.weight]["exp_avg"].flatten()[:4]),
      "groups": len(st["param_groups"]), "scaler": sorted(ck["scaler"].keys()),
      "indices": sorted(st["state"].keys())})
`, map[string]any{"path": ckpt.StepPath(dir, 3)}, &got)
	require.Equal(t, 3, got.Last)
	require.Equal(t, []float64{3, 3, 3, 3, 3, 3}, got.Steps)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, got.Indices)
	require.Equal(t, 1, got.Groups)
	require.InDelta(t, 1e-3, got.LR, 1e-12) // step 3: warm-up over, cosine at 0
	require.Empty(t, got.Scaler, "a disabled scaler's state is GradScaler's: {}")
}

// A Python run's torch.save (model, optimizer, scheduler, scaler, and
// torchfit's position keys) is resumed by Trainer.LoadCheckpoint: the
// optimizer's moments and steps, the schedule's step and LR.
func TestTrainerLoadsPythonCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "py.pt")
	var want struct {
		ExpAvg []float64 `json:"exp_avg"`
		LR     float64   `json:"lr"`
	}
	pyref.Run(t, pyRegression+`
torch.manual_seed(0)
x, y = torch.randn(8, 32, 16), torch.randn(8)
for _ in range(5):
    loss = ((m.l3(torch.relu(m.l2(torch.relu(m.l1(x))))).mean(1) - y) ** 2).mean()
    loss.backward(); opt.step(); sched.step(); opt.zero_grad()
torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "loader": {"epoch": 0, "batch": 5, "seed": 42}, "step": 5, "epoch": 0, "micro_batch": 4, "accum": 2},
           inp["path"])
emit({"exp_avg": t2l(opt.state[m.l2.bias]["exp_avg"][:8]), "lr": opt.param_groups[0]["lr"]})
`, map[string]any{"path": path}, &want)

	m := newRegression(7)
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU})
	require.NoError(t, err)
	tr.Sched = nn.NewSchedule(opt, nn.WarmupCosineLR(3, 24, 0.1))
	defer tr.Sched.Free()
	tr.Scaler = amp.NewGradScaler(torch.CPU, amp.ScalerOptions{})
	c, err := tr.LoadCheckpoint(path)
	require.NoError(t, err)
	require.Equal(t, 5, c.Step)
	require.Equal(t, 5, tr.Sched.LastStep())
	require.InDelta(t, want.LR, opt.Groups()[0].LR, 1e-15)
	for _, s := range opt.State() {
		switch s.Name {
		case "state.l2.bias.exp_avg":
			require.InDeltaSlice(t, want.ExpAvg, s.T.Float64s()[:8], 0)
		case "state.l2.bias.step":
			require.Equal(t, 5.0, s.T.Item())
		}
	}
	require.False(t, math.IsNaN(tr.Scaler.ScaleValue()))
	require.Equal(t, 65536.0, tr.Scaler.ScaleValue(), "no scaler in the file: the trainer's own")
}
