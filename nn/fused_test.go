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
				ps = append(ps, Named{string(rune('a' + k)), torch.Randn(s).Keep()})
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
		opt := NewAdamW([]Named{{"p", p}}, AdamWDefaults(0.1))
		defer opt.Free()
		for s := 0; s < 3; s++ {
			torch.Tidy(func() { p.SetGrad(p.MulScalar(0.5)) })
			opt.Step()
		}
		return p.Float64s()
	}
	require.Equal(t, run(false), run(true))
}
