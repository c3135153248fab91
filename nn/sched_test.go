package nn

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

const schedSteps = 30

// schedCase is a schedule in Go and the same schedule as a Python
// expression that makes a torch.optim.lr_scheduler for `opt` (mostly
// LambdaLR with the lambda written out).
type schedCase struct {
	name string
	fn   LRLambda
	py   string
	tol  float64 // relative
}

var schedCases = []schedCase{
	{"constant", ConstantLR(), "LambdaLR(opt, lambda s: 1.0)", 0},
	{"warmup", WarmupLR(5), "LambdaLR(opt, lambda s: s / max(1, 5) if s < 5 else 1.0)", 0},
	{"warmup0", WarmupLR(0), "LambdaLR(opt, lambda s: 1.0)", 0},
	{"warmup-cosine", WarmupCosineLR(5, 25, 0.1),
		"LambdaLR(opt, lambda s: s / 5 if s < 5 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (s - 5) / 20))))", 1e-14},
	// transformers' get_cosine_schedule_with_warmup, verbatim, up to total
	// (after total it rises again; ours stays at the minimum).
	{"warmup-cosine-transformers", WarmupCosineLR(5, schedSteps, 0),
		"LambdaLR(opt, lambda s: float(s) / float(max(1, 5)) if s < 5 else max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(0.5) * 2.0 * float(s - 5) / float(max(1, 30 - 5))))))", 1e-14},
	// transformers' get_linear_schedule_with_warmup, verbatim.
	{"warmup-linear", WarmupLinearLR(5, 25),
		"LambdaLR(opt, lambda s: float(s) / float(max(1, 5)) if s < 5 else max(0.0, float(25 - s) / float(max(1, 25 - 5))))", 0},
	{"step", StepLR(7, 0.5), "LambdaLR(opt, lambda s: 0.5 ** (s // 7))", 0},
	// PyTorch's own schedulers (recursive updates: a few ulps apart).
	{"step-torch", StepLR(7, 0.3), "StepLR(opt, step_size=7, gamma=0.3)", 1e-14},
	{"cosine-annealing-torch", WarmupCosineLR(0, schedSteps, 0), "CosineAnnealingLR(opt, T_max=30)", 1e-12},
}

// schedBaseLRs are the two groups' base learning rates.
var schedBaseLRs = []float64{0.1, 0.02}

const schedPyScript = `
from torch.optim.lr_scheduler import LambdaLR, StepLR, CosineAnnealingLR
out = []
for ctor in inp["ctors"]:
    p, q = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([{"params": [p], "lr": inp["lrs"][0]}, {"params": [q], "lr": inp["lrs"][1]}], lr=1)
    sched = eval(ctor)
    lrs = []
    for s in range(inp["steps"]):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    out.append(lrs)
emit(out)
`

func schedOpt() (*SGD, func()) {
	p, q := torch.Zeros([]int64{1}).Keep(), torch.Zeros([]int64{1}).Keep()
	opt := NewSGDGroups([]ParamGroup{
		ParamGroup{Params: []Named{{Name: "p", T: p}}}.WithLR(schedBaseLRs[0]),
		ParamGroup{Params: []Named{{Name: "q", T: q}}}.WithLR(schedBaseLRs[1]),
	}, SGDConfig{LR: 1})
	return opt, func() { opt.Free(); p.Free(); q.Free() }
}

func TestScheduleMatchesPyTorch(t *testing.T) {
	var ctors []string
	for _, c := range schedCases {
		ctors = append(ctors, c.py)
	}
	var want [][][]float64 // [case][step][group]
	pyref.Run(t, schedPyScript, map[string]any{"ctors": ctors, "lrs": schedBaseLRs, "steps": schedSteps}, &want)
	require.Len(t, want, len(schedCases))
	for ci, c := range schedCases {
		t.Run(c.name, func(t *testing.T) {
			opt, done := schedOpt()
			defer done()
			s := NewSchedule(opt, c.fn)
			for step := 0; step < schedSteps; step++ {
				require.Equal(t, step, s.LastStep())
				lrs := s.LRs(step)
				require.Equal(t, lrs[0], s.LR(step))
				for g, grp := range opt.Groups() {
					w := want[ci][step][g]
					require.Equal(t, lrs[g], grp.LR, "LR(step) is what Step applied")
					require.InDelta(t, w, grp.LR, c.tol*math.Abs(w), "step %d group %d", step, g)
					require.Equal(t, schedBaseLRs[g], grp.InitialLR)
				}
				s.Step()
			}
		})
	}
}

// TestScheduleResume checks that a schedule and optimizer rebuilt from a
// checkpoint continue with the same learning rates, whatever the order of
// the two LoadState calls.
func TestScheduleResume(t *testing.T) {
	fn := WarmupCosineLR(3, 20, 0.05)
	for _, schedFirst := range []bool{true, false} {
		opt, done := schedOpt()
		s := NewSchedule(opt, fn)
		var straight [][]float64
		ckptOpt := map[string]*torch.Tensor{}
		ckptSched := map[string]*torch.Tensor{}
		for step := 0; step < 20; step++ {
			if step == 8 {
				for _, n := range opt.State() {
					ckptOpt[n.Name] = n.T.Clone().Keep()
				}
				for _, n := range s.State() {
					ckptSched[n.Name] = n.T.Clone().Keep()
				}
			}
			straight = append(straight, []float64{opt.Groups()[0].LR, opt.Groups()[1].LR})
			s.Step()
		}
		s.Free()
		done()
		require.Equal(t, int64(8), ckptSched["last_epoch"].ItemInt())

		opt2, done2 := schedOpt()
		opt2.Groups()[1].LR = 7 // a different configured lr: the checkpoint wins
		var s2 *Schedule
		if schedFirst {
			s2 = NewSchedule(opt2, fn)
			require.NoError(t, s2.LoadState(ckptSched))
			require.NoError(t, opt2.LoadState(ckptOpt))
		} else {
			require.NoError(t, opt2.LoadState(ckptOpt))
			s2 = NewSchedule(opt2, fn)
			require.NoError(t, s2.LoadState(ckptSched))
		}
		for step := 8; step < 20; step++ {
			require.Equal(t, straight[step], []float64{opt2.Groups()[0].LR, opt2.Groups()[1].LR}, "step %d", step)
			s2.Step()
		}
		require.Error(t, s2.LoadState(map[string]*torch.Tensor{"base_lrs.0": ckptSched["base_lrs.0"]}))
		require.Equal(t, 20, s2.LastStep(), "a refused load changes nothing")
		s2.Free()
		done2()
		for _, m := range []map[string]*torch.Tensor{ckptOpt, ckptSched} {
			for _, v := range m {
				v.Free()
			}
		}
	}
}
