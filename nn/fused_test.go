package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/cpu"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

// fusedPyScript: AdamW (PyTorch's default single-tensor path) on two
// groups for inp["steps"] steps at 2 threads, gradients drawn from the
// seeded generator before each step; emits the final parameters and the
// sum of every parameter after each step.
const fusedPyScript = `
torch.set_num_threads(2)
torch.manual_seed(11)
ps = [torch.randn(s).requires_grad_() for s in inp["shapes"]]
opt = torch.optim.AdamW([{"params": ps[:1]}, {"params": ps[1:], "weight_decay": 0.0}], lr=1e-2, weight_decay=0.05)
sums = []
for s in range(inp["steps"]):
    torch.manual_seed(1000 + s)
    for p in ps:
        p.grad = torch.randn(p.shape)
    opt.step()
    sums.append([p.detach().double().sum().item() for p in ps])
emit({"final": [p.detach().reshape(-1).double().tolist() for p in ps], "sums": sums})
`

// TestFusedAdamWMatchesPyTorch100Steps: 100 steps of the fused AdamW
// against PyTorch's AdamW on a parameter large enough to be split over two
// threads. On CPUs where libtorch runs its AVX2/AVX-512 kernels (FMA) the
// trajectory is bitwise PyTorch's; elsewhere (libtorch's generic kernels
// round a·b+c twice where the fused kernel rounds once) it must stay
// within 1e-6 relative.
func TestFusedAdamWMatchesPyTorch100Steps(t *testing.T) {
	const steps = 100
	shapes := [][]int64{{300, 257}, {257}, {3, 7}}
	var want struct {
		Final [][]float64 `json:"final"`
		Sums  [][]float64 `json:"sums"`
	}
	pyref.Run(t, fusedPyScript, map[string]any{"shapes": shapes, "steps": steps}, &want)

	prevThreads := torch.NumThreads()
	defer torch.SetNumThreads(prevThreads)
	// 1 thread runs the kernel's serial branch, 2 split the large
	// parameter between threads (at::parallel_for).
	// Every kernel the CPU runs is forced in turn (the machine picks the
	// best: AVX-512, AVX2+FMA, or the default build's library fmaf).
	for _, tc := range []struct {
		fused   bool
		kernel  string
		threads int
	}{{true, "avx512", 1}, {true, "avx512", 2}, {true, "avx2", 1}, {true, "avx2", 2}, {true, "default", 1}, {false, "", 1}} {
		fused := tc.fused
		name := fmt.Sprintf("ops/%d-threads", tc.threads)
		if fused {
			name = fmt.Sprintf("fused-%s/%d-threads", tc.kernel, tc.threads)
		}
		t.Run(name, func(t *testing.T) {
			torch.SetNumThreads(tc.threads)
			defer SetFusedOptimizers(SetFusedOptimizers(fused))
			if fused {
				undo, err := torch.ForceFusedKernel(tc.kernel)
				if err != nil {
					t.Skipf("%v", err)
				}
				defer undo()
				require.Equal(t, tc.kernel, torch.FusedKernel())
			}
			torch.ManualSeed(11)
			var ps []Named
			for k, s := range shapes {
				ps = append(ps, Named{Name: string(rune('a' + k)), T: torch.Randn(s).Keep()})
			}
			defer optimFree(ps)
			opt := NewAdamWGroups([]ParamGroup{{Params: ps[:1]}, ParamGroup{Params: ps[1:]}.WithWeightDecay(0)},
				AdamConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.05})
			defer opt.Free()
			worst := 0.0
			for s := 0; s < steps; s++ {
				torch.ManualSeed(uint64(1000 + s))
				torch.Tidy(func() {
					for _, p := range ps {
						p.T.SetGrad(torch.Randn(p.T.Shape()))
					}
				})
				opt.Step()
				for k, p := range ps {
					var sum float64
					torch.Tidy(func() { sum = p.T.ToDType(torch.Float64).Sum().Item() })
					w := want.Sums[s][k]
					worst = math.Max(worst, math.Abs(sum-w)/math.Max(1, math.Abs(w)))
				}
			}
			exact, total := 0, 0
			for k, p := range ps {
				got := p.T.Float32s()
				for i, g := range got {
					w := want.Final[k][i]
					total++
					if float64(g) == w {
						exact++
					}
					worst = math.Max(worst, math.Abs(float64(g)-w)/math.Max(1, math.Abs(w)))
				}
			}
			t.Logf("after %d steps: %d of %d parameters bitwise equal to PyTorch's AdamW; largest relative difference %.2e", steps, exact, total, worst)
			require.LessOrEqual(t, worst, 1e-6)
			if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
				require.Equal(t, total, exact, "bitwise on a CPU with AVX2 and FMA")
			}
		})
	}
}

// Parameters the fused kernel does not take (float64 here) fall back to
// the ops, with the same result as with fused steps off.
func TestFusedAdamFallsBack(t *testing.T) {
	run := func(fused bool) []float64 {
		defer SetFusedOptimizers(SetFusedOptimizers(fused))
		torch.ManualSeed(5)
		p := torch.Randn([]int64{4, 3}, torch.Float64).Keep()
		defer p.Free()
		opt := NewAdamW([]Named{{Name: "p", T: p}}, AdamWDefaults(0.1))
		defer opt.Free()
		for s := 0; s < 3; s++ {
			torch.Tidy(func() { p.SetGrad(p.MulScalar(0.5)) })
			opt.Step()
		}
		return p.Float64s()
	}
	require.Equal(t, run(false), run(true))
}

// fusedCases reach every branch of the kernel: Adam's weight decay added
// to the gradient, AdamW's decay of the parameter, AMSGrad, maximize (the
// general loops), plain Adam and AdamW (the vectorised fast loops), and
// both forms of ATen's lerp (PyTorch 2.1+ first moment): 1 − β1 < 0.5
// (self + w·(end − self)) and ≥ 0.5 (end − (end − self)·(1 − w)). The
// shapes make blocks of the kernel span parameters and the threads split
// one.
var fusedCases = []struct {
	name, py string
	mk       func([]Named) *Adam
}{
	{"Adam/wd+amsgrad+maximize+beta1=0.3", "torch.optim.Adam(ps, lr=0.05, betas=(0.3, 0.9), eps=1e-6, weight_decay=0.1, amsgrad=True, maximize=True)",
		func(ps []Named) *Adam {
			return NewAdam(ps, AdamConfig{LR: 0.05, Beta1: 0.3, Beta2: 0.9, Eps: 1e-6, WeightDecay: 0.1, AMSGrad: true, Maximize: true})
		}},
	{"AdamW/beta1=0.5", "torch.optim.AdamW(ps, lr=0.02, betas=(0.5, 0.95), weight_decay=0.2)",
		func(ps []Named) *Adam {
			return NewAdamW(ps, AdamConfig{LR: 0.02, Beta1: 0.5, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.2})
		}},
	{"Adam", "torch.optim.Adam(ps, lr=0.01)", // the fast loops without decay
		func(ps []Named) *Adam {
			return NewAdam(ps, AdamConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
		}},
	{"AdamW/amsgrad", "torch.optim.AdamW(ps, lr=0.01, amsgrad=True)",
		func(ps []Named) *Adam {
			c := AdamWDefaults(0.01)
			c.AMSGrad = true
			return NewAdamW(ps, c)
		}},
}

var fusedCaseShapes = [][]int64{{40000}, {3}, {5, 5}, {9000}}

const fusedCaseSteps = 30

const fusedCasesPyScript = `
torch.set_num_threads(2)
out = []
for c in inp["cases"]:
    torch.manual_seed(21)
    ps = [torch.randn(s).requires_grad_() for s in inp["shapes"]]
    opt = eval(c)
    for s in range(inp["steps"]):
        torch.manual_seed(2000 + s)
        for p in ps:
            p.grad = torch.randn(p.shape)
        opt.step()
    out.append([p.detach().reshape(-1).double().tolist() for p in ps])
cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
emit({"capability": cap, "params": out})
`

// runFusedCase runs case c for fusedCaseSteps steps, fused or as ops, on
// threads threads, and returns the parameters.
func runFusedCase(t *testing.T, mk func([]Named) *Adam, fused bool, threads int) [][]float32 {
	t.Helper()
	defer torch.SetNumThreads(torch.NumThreads())
	torch.SetNumThreads(threads)
	defer SetFusedOptimizers(SetFusedOptimizers(fused))
	torch.ManualSeed(21)
	var ps []Named
	for k, s := range fusedCaseShapes {
		ps = append(ps, Named{Name: string(rune('a' + k)), T: torch.Randn(s).Keep()})
	}
	defer optimFree(ps)
	opt := mk(ps)
	defer opt.Free()
	for s := 0; s < fusedCaseSteps; s++ {
		torch.ManualSeed(uint64(2000 + s))
		torch.Tidy(func() {
			for _, p := range ps {
				p.T.SetGrad(torch.Randn(p.T.Shape()))
			}
		})
		opt.Step()
	}
	out := make([][]float32, len(ps))
	for k, p := range ps {
		out[k] = p.T.Float32s()
	}
	return out
}

// requireFusedEqual compares got with want element by element: bitwise on
// a CPU with AVX2 and FMA, else within 1e-6 relative.
func requireFusedEqual(t *testing.T, want [][]float64, got [][]float32) {
	t.Helper()
	exact, total, worst := 0, 0, 0.0
	for k := range want {
		require.Len(t, got[k], len(want[k]))
		for i, g := range got[k] {
			w := want[k][i]
			total++
			if float64(g) == w {
				exact++
			}
			worst = math.Max(worst, math.Abs(float64(g)-w)/math.Max(1, math.Abs(w)))
		}
	}
	t.Logf("%d of %d parameters bitwise equal; largest relative difference %.2e", exact, total, worst)
	require.LessOrEqual(t, worst, 1e-6)
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		require.Equal(t, total, exact, "bitwise on a CPU with AVX2 and FMA")
	}
}

func float64s(x [][]float32) [][]float64 {
	out := make([][]float64, len(x))
	for k, xs := range x {
		out[k] = make([]float64, len(xs))
		for i, v := range xs {
			out[k][i] = float64(v)
		}
	}
	return out
}

// TestFusedAdamCasesMatchPyTorch: each case, fused (1 and 2 threads) and
// as ops, against the PyTorch of this libtorch.
func TestFusedAdamCasesMatchPyTorch(t *testing.T) {
	var pys []string
	for _, c := range fusedCases {
		pys = append(pys, c.py)
	}
	var py struct {
		Capability string
		Params     [][][]float64
	}
	pyref.Run(t, fusedCasesPyScript, map[string]any{"cases": pys, "shapes": fusedCaseShapes, "steps": fusedCaseSteps}, &py)
	want := py.Params
	require.Len(t, want, len(fusedCases))
	// A failure here once (2.11, the first case only, the three Go runs
	// alike) has not recurred; the kernels PyTorch picked are logged so
	// that the next one says whether they were AVX512's.
	t.Logf("libtorch first moment by lerp: %v; PyTorch's CPU kernels: %s", adamLerp(), py.Capability)
	for ci, c := range fusedCases {
		for _, tc := range []struct {
			fused   bool
			threads int
		}{{true, 1}, {true, 2}, {false, 2}} {
			t.Run(fmt.Sprintf("%s/fused=%v/%d-threads", c.name, tc.fused, tc.threads), func(t *testing.T) {
				requireFusedEqual(t, want[ci], runFusedCase(t, c.mk, tc.fused, tc.threads))
			})
		}
	}
}

// Both first-moment formulas (1.13's mul_ and add_, 2.1's lerp_) and the
// kernel's ATen square root, on whichever libtorch this is: the fused step
// computes what the ops compute, and the formulas differ.
func TestFusedAdamFormulasMatchOps(t *testing.T) {
	defer func(f func() bool) { adamLerp = f }(adamLerp)
	for _, c := range fusedCases {
		var results [2][][]float32
		for li, lerp := range []bool{false, true} {
			adamLerp = func() bool { return lerp }
			t.Run(fmt.Sprintf("%s/lerp=%v", c.name, lerp), func(t *testing.T) {
				ops := runFusedCase(t, c.mk, false, 2)
				requireFusedEqual(t, float64s(ops), runFusedCase(t, c.mk, true, 2))
				results[li] = ops
			})
		}
		if results[0] != nil && results[1] != nil {
			require.NotEqual(t, results[0], results[1], "%s: lerp and mul/add round alike everywhere", c.name)
		}
	}
}

// BenchmarkAdamWStep: one AdamW step over 2.1 M float32 parameters in
// four tensors at 1 thread, as ATen ops and fused with each kernel the
// CPU runs (go test ./nn -run '^$' -bench AdamWStep).
func BenchmarkAdamWStep(b *testing.B) {
	defer torch.SetNumThreads(torch.NumThreads())
	torch.SetNumThreads(1)
	for _, kernel := range []string{"ops", "default", "avx2", "avx512"} {
		b.Run(kernel, func(b *testing.B) {
			defer SetFusedOptimizers(SetFusedOptimizers(kernel != "ops"))
			if kernel != "ops" {
				undo, err := torch.ForceFusedKernel(kernel)
				if err != nil {
					b.Skipf("%v", err)
				}
				defer undo()
			}
			torch.ManualSeed(1)
			var ps []Named
			for k, s := range [][]int64{{1024, 1024}, {1024}, {512, 2048}, {2048}} {
				p := Named{Name: string(rune('a' + k)), T: torch.Randn(s).Keep()}
				torch.Tidy(func() { p.T.SetGrad(torch.Randn(s)) })
				ps = append(ps, p)
			}
			defer optimFree(ps)
			opt := NewAdamW(ps, AdamWDefaults(1e-3))
			defer opt.Free()
			opt.Step() // the moments' first allocation
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				opt.Step()
			}
		})
	}
}
