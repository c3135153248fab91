package ckpt_test

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// resumeCase is one optimizer, built alike in Go and in Python (pySetup
// defines opt over the model m).
type resumeCase struct {
	name    string
	newOpt  func(m nn.Module) nn.Optimizer
	pySetup string
}

var resumeCases = []resumeCase{
	{"SGD", func(m nn.Module) nn.Optimizer {
		return nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01})
	}, `opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)`},
	{"SGD without momentum", func(m nn.Module) nn.Optimizer {
		return nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.05})
	}, `opt = torch.optim.SGD(m.parameters(), lr=0.05)`},
	{"Adam AMSGrad", func(m nn.Module) nn.Optimizer {
		c := nn.AdamDefaults(0.01)
		c.AMSGrad, c.WeightDecay = true, 0.01
		return nn.NewAdam(nn.Parameters(m), c)
	}, `opt = torch.optim.Adam(m.parameters(), lr=0.01, amsgrad=True, weight_decay=0.01)`},
	{"AdamW decay groups", func(m nn.Module) nn.Optimizer {
		return nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.1), nn.AdamWDefaults(0.01))
	}, `
		ps = list(m.named_parameters())
		opt = torch.optim.AdamW([
		    {"params": [p for n, p in ps if p.dim() > 1 and not n.endswith("bias")], "weight_decay": 0.1},
		    {"params": [p for n, p in ps if p.dim() <= 1 or n.endswith("bias")], "weight_decay": 0.0}], lr=0.01)`},
	// A recipe's wrapper (the ASR recipe counts its optimizer's state):
	// its method set has no Kind, its state is the embedded AdamW's.
	{"AdamW in a wrapper", func(m nn.Module) nn.Optimizer {
		return &countingOptimizer{Optimizer: nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(0.01))}
	}, `opt = torch.optim.AdamW(m.parameters(), lr=0.01)`},
}

// countingOptimizer wraps an optimizer by embedding it, as a recipe
// wraps one to count its steps.
type countingOptimizer struct {
	nn.Optimizer
	steps int
}

func (c *countingOptimizer) Step() {
	c.Optimizer.Step()
	c.steps++
}

// The same model, data, loss, schedule (StepLR(2, 0.5)) and scaler
// (growth every 3 clean steps) in Python; setup defines opt.
const pyResumeCommon = `
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).double()
x = torch.tensor(inp["x"], dtype=torch.float64).reshape(4, 3)
y = torch.tensor(inp["y"], dtype=torch.float64).reshape(4, 2)
exec(inp["setup"])
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5 ** (e // 2))
scaler = GradScaler(growth_interval=3)
def step():
    loss = ((m(x) - y) ** 2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    opt.zero_grad()
def params():
    return {k: t2l(v.flatten()) for k, v in m.state_dict().items()}
def keys(sd):
    # sorted: a group's own settings come first in PyTorch's dict
    return {"groups": [sorted(g.keys()) for g in sd["param_groups"]],
            # 1.13's SGD without momentum keeps {"momentum_buffer": None}: no state
            "state": {str(k): sorted(b for b, t in v.items() if t is not None)
                      for k, v in sd["state"].items() if any(t is not None for t in v.values())}}
`

var (
	resumeX = []float64{1, 2, 3, -1, 0.5, 2, 0, 1, -2, 3, 1, 1}
	resumeY = []float64{0.5, -1, 1, 0, -0.5, 2, 1, 1}
)

type goRun struct {
	m      *nn.Sequential
	opt    nn.Optimizer
	sched  *nn.Schedule
	scaler *amp.GradScaler
	x, y   *torch.Tensor
}

func newGoRun(c resumeCase) *goRun {
	torch.ManualSeed(0)
	r := &goRun{m: nn.NewSequential(nn.NewLinear(3, 4, true), nn.NewReLU(), nn.NewLinear(4, 2, true))}
	nn.To(r.m, torch.CPU, torch.Float64)
	r.opt = c.newOpt(r.m)
	r.sched = nn.NewSchedule(r.opt, nn.StepLR(2, 0.5))
	r.scaler = amp.NewGradScaler(torch.CPU, amp.ScalerOptions{GrowthInterval: 3})
	r.x = torch.FromSlice(resumeX, []int64{4, 3}).Keep()
	r.y = torch.FromSlice(resumeY, []int64{4, 2}).Keep()
	return r
}

func (r *goRun) step() {
	torch.Tidy(func() {
		loss := r.m.Forward(r.x).Sub(r.y).Square().Mean()
		r.scaler.Scale(loss).Backward()
		r.scaler.Step(r.opt)
		r.scaler.Update()
		r.sched.Step()
		r.opt.ZeroGrad()
	})
}

func (r *goRun) params() map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range nn.StateDict(r.m) {
		out[p.Name] = p.T.Float64s()
	}
	return out
}

func (r *goRun) free() {
	r.opt.Free()
	r.sched.Free()
	nn.Free(r.m)
	r.x.Free()
	r.y.Free()
}

func (r *goRun) save(t *testing.T, path string) {
	w := ckpt.NewWriter()
	w.Module("model", r.m)
	w.Optimizer("optimizer", r.opt)
	w.Schedule("scheduler", r.sched)
	w.Scaler("scaler", r.scaler)
	w.Int("step", 2)
	require.NoError(t, w.Save(path))
}

func (r *goRun) load(t *testing.T, path string) {
	f, err := ckpt.Read(path)
	require.NoError(t, err)
	defer f.Free()
	require.NoError(t, f.Module("model", r.m))
	require.NoError(t, f.CheckOptimizer("optimizer", r.opt))
	require.NoError(t, f.Optimizer("optimizer", r.opt))
	require.NoError(t, f.Schedule("scheduler", r.sched))
	require.NoError(t, f.Scaler("scaler", r.scaler))
}

func requireSameParams(t *testing.T, want map[string][]float64, got map[string][]float64) {
	t.Helper()
	require.Equal(t, len(want), len(got))
	worst := 0.0
	for k, w := range want {
		require.Contains(t, got, k)
		require.InDeltaSlice(t, w, got[k], 1e-6, k)
		for i := range w {
			worst = max(worst, abs(w[i]-got[k][i]))
		}
	}
	t.Logf("largest difference %.3g", worst)
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

type pyResult struct {
	Params    map[string][]float64 `json:"params"`
	Scale     float64              `json:"scale"`
	LR        []float64            `json:"lr"`
	FileKeys  pyKeys               `json:"file_keys"`
	OwnKeys   pyKeys               `json:"own_keys"`
	SchedKeys [2][]string          `json:"sched_keys"`
	ScaleKeys [2][]string          `json:"scaler_keys"`
	Version   string               `json:"version"`
}

type pyKeys struct {
	Groups [][]string          `json:"groups"`
	State  map[string][]string `json:"state"`
}

// A torchfit checkpoint resumed by a Python loop (load_state_dict of the
// model, optimizer, LambdaLR and GradScaler) takes the steps torchfit
// takes after it; its optimizer, scheduler and scaler parts have the keys
// PyTorch's own state_dict()s have, and PyTorch 2.x opens it with
// weights_only=True.
func TestGoCheckpointResumesInPython(t *testing.T) {
	for _, c := range resumeCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "go.pt")
			r := newGoRun(c)
			defer r.free()
			r.step()
			r.step()
			r.save(t, path)
			r.step()
			r.step()

			var got pyResult
			pyref.Run(t, pyref.WithCPUGradScaler(pyResumeCommon+dedent(`
				v2 = int(torch.__version__.split(".")[0]) >= 2
				ck = torch.load(inp["path"], weights_only=v2)
				# PyTorch's own state dicts' keys, after two steps of a fresh copy
				m0 = m
				import copy
				m = copy.deepcopy(m0)
				exec(inp["setup"])
				own_sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5 ** (e // 2))
				own_scaler = GradScaler(growth_interval=3)
				for _ in range(2):
				    ((m(x) - y) ** 2).mean().backward(); opt.step(); own_sched.step(); opt.zero_grad()
				own = keys(opt.state_dict())
				m = m0
				exec(inp["setup"])
				sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5 ** (e // 2))
				m.load_state_dict(ck["model"])
				opt.load_state_dict(ck["optimizer"])
				sched.load_state_dict(ck["scheduler"])
				scaler.load_state_dict(ck["scaler"])
				if scaler._scale is None:
				    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
				step(); step()
				emit({"params": params(), "scale": scaler.get_scale(), "lr": [g["lr"] for g in opt.param_groups],
				      "file_keys": keys(ck["optimizer"]), "own_keys": own,
				      "sched_keys": [list(ck["scheduler"].keys()), list(own_sched.state_dict().keys())],
				      "scaler_keys": [list(ck["scaler"].keys()), list(own_scaler.state_dict().keys())],
				      "version": torch.__version__})
			`)), map[string]any{"path": path, "setup": dedent(c.pySetup), "x": resumeX, "y": resumeY}, &got)
			t.Logf("Python torch %s", got.Version)
			requireSameParams(t, r.params(), got.Params)
			require.Equal(t, r.scaler.ScaleValue(), got.Scale)
			lrs := make([]float64, len(r.opt.Groups()))
			for k, g := range r.opt.Groups() {
				lrs[k] = g.LR
			}
			require.InDeltaSlice(t, lrs, got.LR, 1e-15)
			require.Equal(t, got.OwnKeys, got.FileKeys, "the optimizer's keys are PyTorch's")
			require.Equal(t, got.SchedKeys[1], got.SchedKeys[0], "the scheduler's keys are LambdaLR's")
			require.Equal(t, got.ScaleKeys[1], got.ScaleKeys[0], "the scaler's keys are GradScaler's")
		})
	}
}

// A Python checkpoint (torch.save of the state_dict()s) resumed by
// torchfit takes the steps Python takes after it.
func TestPythonCheckpointResumesInGo(t *testing.T) {
	for _, c := range resumeCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "py.pt")
			var got pyResult
			pyref.Run(t, pyref.WithCPUGradScaler(pyResumeCommon+dedent(`
				if scaler._scale is None:
				    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
				step(); step()
				torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
				            "scaler": scaler.state_dict(), "step": 2}, inp["path"])
				step(); step()
				emit({"params": params(), "scale": scaler.get_scale(), "lr": [g["lr"] for g in opt.param_groups]})
			`)), map[string]any{"path": path, "setup": dedent(c.pySetup), "x": resumeX, "y": resumeY}, &got)

			r := newGoRun(c)
			defer r.free()
			r.load(t, path)
			r.step()
			r.step()
			requireSameParams(t, got.Params, r.params())
			require.Equal(t, got.Scale, r.scaler.ScaleValue())
			for k, g := range r.opt.Groups() {
				require.InDelta(t, got.LR[k], g.LR, 1e-15)
			}
		})
	}
}

// dedent removes the indentation of a Go raw-string Python snippet.
func dedent(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	indent := ""
	for k, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ws := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if k == 0 || len(ws) < len(indent) {
			indent = ws
		}
	}
	for k, l := range lines {
		lines[k] = strings.TrimPrefix(l, indent)
	}
	return strings.Join(lines, "\n")
}

// testdata/old_flat.pt was written by torchfit before checkpoints took
// PyTorch's layouts (a Sequential(Linear(3, 4), ReLU, Linear(4, 2)), AdamW
// over DecayGroups(0.1), StepLR(2, 0.5), a scaler with growth interval 3,
// two steps): optimizer "state.0.weight.exp_avg", "param_groups.0.lr", ...,
// scheduler "last_epoch", "base_lrs.0", scaler "growth_tracker",
// "enabled". It still loads: every value as the file has it.
func TestOldFlatCheckpointLoads(t *testing.T) {
	path := filepath.Join("testdata", "old_flat.pt")
	m := nn.NewSequential(nn.NewLinear(3, 4, true), nn.NewReLU(), nn.NewLinear(4, 2, true))
	defer nn.Free(m)
	opt := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.5), nn.AdamWDefaults(0.5))
	defer opt.Free()
	sched := nn.NewSchedule(opt, nn.StepLR(2, 0.5))
	defer sched.Free()
	sc := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{GrowthInterval: 3})

	f, err := ckpt.Read(path)
	require.NoError(t, err)
	defer f.Free()
	require.NoError(t, f.Module("model", m))
	require.NoError(t, f.CheckOptimizer("optimizer", opt))
	require.NoError(t, f.Optimizer("optimizer", opt))
	require.NoError(t, f.Schedule("scheduler", sched))
	require.NoError(t, f.Scaler("scaler", sc))

	file, err := f.Tensors("optimizer")
	require.NoError(t, err)
	st := opt.State()
	byName := file.Map()
	names := st.Names()
	for _, s := range st {
		require.True(t, s.T.Equal(byName[s.Name].ToDType(s.T.DType())), s.Name)
	}
	want := file.Names()
	sort.Strings(names)
	sort.Strings(want)
	require.Equal(t, want, names)
	require.Equal(t, 2, sched.LastStep())
	require.Equal(t, []float64{0.01, 0.01}, sched.BaseLRs())
	require.InDelta(t, 0.005, opt.Groups()[0].LR, 1e-12) // 0.01·0.5^(2/2)
	require.Equal(t, 65536.0, sc.ScaleValue())
	require.Equal(t, 2.0, sc.State()["growth_tracker"])

	// Written again, it is PyTorch's layout.
	out := filepath.Join(t.TempDir(), "new.pt")
	w := ckpt.NewWriter()
	w.Optimizer("optimizer", opt)
	w.Schedule("scheduler", sched)
	w.Scaler("scaler", sc)
	require.NoError(t, w.Save(out))
	g, err := ckpt.Read(out)
	require.NoError(t, err)
	defer g.Free()
	_, err = g.Tensors("optimizer")
	require.Error(t, err, "no longer flat")
	opt2 := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.5), nn.AdamWDefaults(0.5))
	defer opt2.Free()
	require.NoError(t, g.Optimizer("optimizer", opt2))
	for k, s := range opt2.State() {
		require.Equal(t, st[k].Name, s.Name)
		require.True(t, s.T.Equal(st[k].T), s.Name)
	}
}

// A PyTorch optimizer state of another model or grouping is refused
// before anything changes, with a *ckpt.Error.
func TestOptimizerLayoutRefusals(t *testing.T) {
	torch.ManualSeed(0)
	m := nn.NewSequential(nn.NewLinear(3, 4, true), nn.NewReLU(), nn.NewLinear(4, 2, true))
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(0.01))
	defer opt.Free()
	path := filepath.Join(t.TempDir(), "a.pt")
	w := ckpt.NewWriter()
	w.Optimizer("optimizer", opt)
	require.NoError(t, w.Save(path))
	f, err := ckpt.Read(path)
	require.NoError(t, err)
	defer f.Free()

	other := nn.NewSequential(nn.NewLinear(3, 5, true), nn.NewReLU(), nn.NewLinear(5, 2, true))
	defer nn.Free(other)
	grouped := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.1), nn.AdamWDefaults(0.01))
	defer grouped.Free()
	fewer := nn.NewAdamW(nn.Parameters(m)[:2], nn.AdamWDefaults(0.01))
	defer fewer.Free()
	for _, c := range []struct {
		name string
		opt  nn.Optimizer
		msg  string
	}{
		{"other groups", grouped, "1 parameter groups, this one 2"},
		{"other parameters", fewer, "has 4 parameters, this optimizer's group 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := f.CheckOptimizer("optimizer", c.opt)
			var ce *ckpt.Error
			require.ErrorAs(t, err, &ce)
			require.Contains(t, err.Error(), c.msg)
			require.ErrorAs(t, f.Optimizer("optimizer", c.opt), &ce)
		})
	}
	// After a step (state of every parameter), a model of other shapes.
	torch.Tidy(func() {
		m.Forward(torch.Ones([]int64{2, 3})).Sum().Backward()
		opt.Step()
	})
	w = ckpt.NewWriter()
	w.Optimizer("optimizer", opt)
	require.NoError(t, w.Save(path))
	g, err := ckpt.Read(path)
	require.NoError(t, err)
	defer g.Free()
	optOther := nn.NewAdamW(nn.Parameters(other), nn.AdamWDefaults(0.01))
	defer optOther.Free()
	err = g.CheckOptimizer("optimizer", optOther)
	var ce *ckpt.Error
	require.ErrorAs(t, err, &ce)
	require.Contains(t, err.Error(), "has shape [4 3], the parameter [5 3]")
}

// What torch.load(path, weights_only=True) does with a checkpoint: loads
// it on PyTorch 2.x; refuses it on 1.13, whose weights-only unpickler has
// no BINFLOAT opcode (71, 'G'): any float, as in PyTorch's own optimizer
// state_dict(), which it refuses alike.
func TestWeightsOnly(t *testing.T) {
	torch.ManualSeed(0)
	m := nn.NewLinear(3, 2, true)
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(0.01))
	defer opt.Free()
	path := filepath.Join(t.TempDir(), "a.pt")
	w := ckpt.NewWriter()
	w.Module("model", m)
	w.RNG()
	modelOnly := filepath.Join(t.TempDir(), "model.pt")
	require.NoError(t, w.Save(modelOnly))
	w.Optimizer("optimizer", opt)
	w.Scaler("scaler", amp.NewGradScaler(torch.CPU, amp.ScalerOptions{}))
	require.NoError(t, w.Save(path))
	var got struct {
		Major     int    `json:"major"`
		Go        string `json:"go"`
		OwnOpt    string `json:"own"`
		ModelOnly string `json:"model_only"`
	}
	pyref.Run(t, `
		import io
		def try_load(f):
		    try:
		        torch.load(f, weights_only=True)
		        return "ok"
		    except Exception as e:
		        return str(e).splitlines()[-1]
		b = io.BytesIO()
		p = torch.nn.Parameter(torch.zeros(2))
		torch.save(torch.optim.AdamW([p]).state_dict(), b)
		b.seek(0)
		emit({"major": int(torch.__version__.split(".")[0]), "go": try_load(inp["path"]), "own": try_load(b),
		      "model_only": try_load(inp["model"])})
	`, map[string]any{"path": path, "model": modelOnly}, &got)
	require.Equal(t, "ok", got.ModelOnly, "a model and the RNG state load weights-only")
	if got.Major >= 2 {
		require.Equal(t, "ok", got.Go)
		require.Equal(t, "ok", got.OwnOpt)
		return
	}
	require.Contains(t, got.Go, "Unsupported operand 71")
	require.Contains(t, got.OwnOpt, "Unsupported operand 71", "PyTorch 1.13 refuses its own optimizer state alike")
}
