package scan

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/scan/internal/kernel"
	"github.com/torchfit/torchfit/torch"
)

// operandsFor draws random operands in dt: Δ positive (a softplus), A
// negative (−exp), as in Mamba.
func operandsFor(b, l, d, n int64, dt torch.DType) []*torch.Tensor {
	x := torch.Randn([]int64{b, l, d}, dt)
	delta := torch.Randn([]int64{b, l, d}, dt).Softplus(1, 20)
	A := torch.Randn([]int64{d, n}, dt).Exp().Neg()
	B := torch.Randn([]int64{b, l, n}, dt)
	C := torch.Randn([]int64{b, l, n}, dt)
	D := torch.Randn([]int64{d}, dt)
	ins := []*torch.Tensor{x, delta, A, B, C, D}
	for _, t := range ins {
		t.SetRequiresGrad(true)
	}
	return ins
}

// run returns y, the last state and the gradients of Σ y·gy with respect
// to the six inputs.
func run(s Scan, ins []*torch.Tensor, gy *torch.Tensor) (y, last *torch.Tensor, grads []*torch.Tensor) {
	y, last = s.Apply(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5])
	grads = torch.Gradients([]*torch.Tensor{y}, ins, []*torch.Tensor{gy}, false, false)
	return y, last, grads
}

func maxAbsDiff(a, b *torch.Tensor) float64 {
	return a.Sub(b).Abs().Max().Item()
}

var inputNames = []string{"x", "delta", "A", "B", "C", "D"}

// Every formulation equals Sequential in float64, outputs and every
// gradient, within 1e-9: random shapes, L = 1, L not a multiple of the
// chunk, channels not a multiple of the kernel's block of 16.
func TestScansEqualSequential(t *testing.T) {
	shapes := []struct{ b, l, d, n, k int64 }{
		{1, 1, 1, 1, 4},
		{2, 1, 3, 2, 4},
		{2, 7, 5, 3, 3},
		{3, 16, 4, 4, 4},
		{2, 33, 17, 5, 8},
		{1, 70, 40, 16, 64},
		{2, 130, 33, 16, 64},
		{2, 20, 70, 4, 8}, // two channel blocks of the kernel, the second partial
		{1, 9, 130, 3, 4},
	}
	torch.ManualSeed(3)
	for _, sh := range shapes {
		scans := []Scan{
			Chunked(int(sh.k)), LogDepth(int(sh.k)), Fused(int(sh.k)),
			fused{sh.k, kernel.ATen}, // the kernel's device-generic path, run on the CPU
			Chunked(1), Fused(1), LogDepth(int(sh.l) + 5),
		}
		torch.Tidy(func() {
			ins := operandsFor(sh.b, sh.l, sh.d, sh.n, torch.Float64)
			gy := torch.Randn([]int64{sh.b, sh.l, sh.d}, torch.Float64)
			y0, last0, g0 := run(Sequential(), ins, gy)
			require.Equal(t, []int64{sh.b, sh.l, sh.d}, y0.Shape())
			require.Equal(t, []int64{sh.b, sh.d, sh.n}, last0.Shape())
			require.False(t, last0.RequiresGrad())
			for _, s := range scans {
				name := fmt.Sprintf("%s%+v", s.Name(), sh)
				if f, ok := s.(fused); ok && f.impl == kernel.ATen {
					name += "/aten"
				}
				y, last, g := run(s, ins, gy)
				require.Equal(t, torch.Float64, y.DType(), name)
				require.LessOrEqual(t, maxAbsDiff(y, y0), 1e-9, name+": y")
				require.LessOrEqual(t, maxAbsDiff(last, last0), 1e-9, name+": last state")
				require.False(t, last.RequiresGrad(), name)
				for k := range g {
					require.Equal(t, g0[k].Shape(), g[k].Shape(), name)
					require.LessOrEqual(t, maxAbsDiff(g[k], g0[k]), 1e-9, "%s: gradient w.r.t. %s", name, inputNames[k])
				}
			}
		})
	}
}

// The fused kernel's result does not depend on the number of threads: its
// work is split into fixed blocks, and the sums over blocks are taken in
// one order.
func TestFusedThreadsBitwise(t *testing.T) {
	prev := torch.NumThreads()
	defer torch.SetNumThreads(prev)
	torch.ManualSeed(13)
	torch.Tidy(func() {
		ins := operandsFor(3, 50, 200, 8, torch.Float32)
		gy := torch.Randn([]int64{3, 50, 200})
		var ys, gs [][]float32
		for _, n := range []int{1, 2, 3} {
			torch.SetNumThreads(n)
			y, _, g := run(Fused(16), ins, gy)
			ys = append(ys, y.Float32s())
			var all []float32
			for _, x := range g {
				all = append(all, x.Float32s()...)
			}
			gs = append(gs, all)
		}
		require.Equal(t, ys[0], ys[1])
		require.Equal(t, ys[0], ys[2])
		require.Equal(t, gs[0], gs[1])
		require.Equal(t, gs[0], gs[2])
	})
}

// The reference itself against an explicit scalar loop (float64): the
// recurrence as written in the package doc.
func TestSequentialIsTheRecurrence(t *testing.T) {
	torch.ManualSeed(5)
	torch.Tidy(func() {
		const b, l, d, n = 2, 5, 3, 4
		ins := operandsFor(b, l, d, n, torch.Float64)
		y, last := Sequential().Apply(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5])
		x, dt, A, B, C, D := ins[0].Float64s(), ins[1].Float64s(), ins[2].Float64s(), ins[3].Float64s(), ins[4].Float64s(), ins[5].Float64s()
		ys := y.Float64s()
		h := make([]float64, b*d*n)
		for bi := 0; bi < b; bi++ {
			for s := 0; s < l; s++ {
				for di := 0; di < d; di++ {
					i := (bi*l+s)*d + di
					want := D[di] * x[i]
					for ni := 0; ni < n; ni++ {
						hp := &h[(bi*d+di)*n+ni]
						*hp = math.Exp(dt[i]*A[di*n+ni])**hp + dt[i]*x[i]*B[(bi*l+s)*n+ni]
						want += C[(bi*l+s)*n+ni] * *hp
					}
					require.InDelta(t, want, ys[i], 1e-12)
				}
			}
		}
		require.InDeltaSlice(t, h, last.Float64s(), 1e-12)
	})
}

// Step, applied token by token, gives the scan's outputs and last state.
func TestStepContinuesTheScan(t *testing.T) {
	torch.ManualSeed(7)
	torch.Tidy(func() {
		const b, l, d, n = 2, 9, 6, 4
		ins := operandsFor(b, l, d, n, torch.Float64)
		torch.NoGrad(func() {
			y, last := Fused(4).Apply(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5])
			h := torch.Zeros([]int64{b, d, n}, torch.Float64)
			for i := int64(0); i < l; i++ {
				var yt *torch.Tensor
				yt, h = Step(h, ins[0].Select(1, i), ins[1].Select(1, i), ins[2], ins[3].Select(1, i), ins[4].Select(1, i), ins[5])
				require.LessOrEqual(t, maxAbsDiff(yt, y.Select(1, i)), 1e-12)
			}
			require.LessOrEqual(t, maxAbsDiff(h, last), 1e-12)
		})
	})
}

// Float32 agrees within float32 rounding; half inputs are computed in
// float32 and come back in their dtype.
func TestDTypes(t *testing.T) {
	torch.ManualSeed(11)
	torch.Tidy(func() {
		ins := operandsFor(2, 40, 20, 8, torch.Float64)
		ref, _ := Sequential().Apply(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5])
		f32 := make([]*torch.Tensor, len(ins))
		bf := make([]*torch.Tensor, len(ins))
		for k, in := range ins {
			f32[k] = in.Detach().ToDType(torch.Float32)
			bf[k] = in.Detach().ToDType(torch.BFloat16)
		}
		for _, s := range []Scan{Sequential(), Chunked(16), LogDepth(16), Fused(16)} {
			y, last := s.Apply(f32[0], f32[1], f32[2], f32[3], f32[4], f32[5])
			require.Equal(t, torch.Float32, y.DType(), s.Name())
			require.Equal(t, torch.Float32, last.DType(), s.Name())
			require.Less(t, maxAbsDiff(y.ToDType(torch.Float64), ref), 1e-4, s.Name())
			yb, lb := s.Apply(bf[0], bf[1], bf[2], bf[3], bf[4], bf[5])
			require.Equal(t, torch.BFloat16, yb.DType(), s.Name())
			require.Equal(t, torch.Float32, lb.DType(), s.Name())
		}
		// Mixed: bf16 activations with float32 parameters, gradients in each input's dtype.
		x := bf[0].Detach().SetRequiresGrad(true)
		A := f32[2].Detach().SetRequiresGrad(true)
		y, _ := Fused(8).Apply(x, bf[1], A, bf[3], bf[4], f32[5])
		g := torch.Gradients([]*torch.Tensor{y.ToDType(torch.Float32).Sum()}, []*torch.Tensor{x, A}, nil, false, false)
		require.Equal(t, torch.BFloat16, g[0].DType())
		require.Equal(t, torch.Float32, g[1].DType())
	})
}

func TestBadOperands(t *testing.T) {
	torch.Tidy(func() {
		ins := operandsFor(2, 5, 3, 4, torch.Float32)
		bad := map[string][]*torch.Tensor{
			"x 2-d":        {ins[0].Select(0, 0), ins[1], ins[2], ins[3], ins[4], ins[5]},
			"delta shape":  {ins[0], ins[1].Narrow(1, 0, 4), ins[2], ins[3], ins[4], ins[5]},
			"A channels":   {ins[0], ins[1], ins[2].Narrow(0, 0, 2), ins[3], ins[4], ins[5]},
			"B state":      {ins[0], ins[1], ins[2], ins[3].Narrow(2, 0, 3), ins[4], ins[5]},
			"C length":     {ins[0], ins[1], ins[2], ins[3], ins[4].Narrow(1, 0, 2), ins[5]},
			"D channels":   {ins[0], ins[1], ins[2], ins[3], ins[4], ins[5].Narrow(0, 0, 1)},
			"integer x":    {ins[0].ToDType(torch.Int64), ins[1], ins[2], ins[3], ins[4], ins[5]},
			"empty length": {ins[0].Narrow(1, 0, 0), ins[1].Narrow(1, 0, 0), ins[2], ins[3].Narrow(1, 0, 0), ins[4].Narrow(1, 0, 0), ins[5]},
		}
		for name, in := range bad {
			for _, s := range []Scan{Sequential(), Chunked(2), LogDepth(2), Fused(2)} {
				err := torch.Try(func() { s.Apply(in[0], in[1], in[2], in[3], in[4], in[5]) })
				var te *torch.Error
				require.ErrorAs(t, err, &te, "%s: %s", s.Name(), name)
			}
		}
		// The operator's own checks, reached without the Go ones.
		err := torch.Try(func() {
			torch.CallOp(kernel.Op, "", ins[0], ins[1], ins[2], ins[3], ins[4], ins[5], int64(0), int64(0))
		})
		require.ErrorContains(t, err, "chunk must be at least 1")
		err = torch.Try(func() {
			torch.CallOp(kernel.Op, "", ins[0], ins[1].Narrow(1, 0, 4), ins[2], ins[3], ins[4], ins[5], int64(4), int64(0))
		})
		require.ErrorContains(t, err, "delta must have x's shape")
	})
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"fused", "fused", true}, {"Chunked", "chunked", true}, {"sequential", "sequential", true},
		{"parallel", "parallel", true}, {"logdepth", "parallel", true}, {"blelloch", "", false},
	} {
		s, err := Parse(tc.name, 0)
		if !tc.ok {
			require.Error(t, err, tc.name)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, s.Name())
	}
	_, err := Parse("fused", -1)
	require.Error(t, err)
	schema, err := kernel.Check()
	require.NoError(t, err)
	require.Contains(t, schema, "selective_scan")
}

// The kernel's own exp: with B zero at the second step the last state is
// exactly exp(Δ·A), which is compared with ATen's from e^5 down to
// underflow (Δ·A to −800 in float64, −120 in float32): relative error
// within tol, or below the smallest normal number.
func TestFusedExpRange(t *testing.T) {
	for _, tc := range []struct {
		dt       torch.DType
		lo, tol  float64
		smallest float64
	}{{torch.Float64, -800, 1e-14, 2.3e-308}, {torch.Float32, -120, 3e-7, 1.2e-38}} {
		torch.Tidy(func() {
			const b, l, d, n = 1, 2, 70, 8
			x := torch.Ones([]int64{b, l, d}, tc.dt)
			delta := torch.Ones([]int64{b, l, d}, tc.dt)
			A := torch.Arange(0, d*n, 1, tc.dt).MulScalar((tc.lo-5)/float64(d*n-1)).AddScalar(5).View(d, n)
			B := torch.Cat([]*torch.Tensor{torch.Ones([]int64{b, 1, n}, tc.dt), torch.Zeros([]int64{b, 1, n}, tc.dt)}, 1)
			C := torch.Ones([]int64{b, l, n}, tc.dt)
			D := torch.Zeros([]int64{d}, tc.dt)
			_, got := Fused(2).Apply(x, delta, A, B, C, D)
			want := A.Exp().Float64s()
			for k, g := range got.Float64s() {
				err := math.Abs(g - want[k])
				require.True(t, err <= tc.tol*math.Abs(want[k]) || err < tc.smallest,
					"%v: exp(%g) = %g, want %g", tc.dt, A.Float64s()[k], g, want[k])
			}
		})
	}
}

// FusedRuns answers as the operator decides: the CPU kernel for CPU
// tensors, the CUDA kernel for CUDA float32 and half inputs with up to 256
// states when the build has the cuda tag (the ATen-op path without it, and
// for float64 or larger states).
func TestFusedRuns(t *testing.T) {
	cuda := RunsATen
	if CUDAKernelBuilt() {
		cuda = RunsCUDA
	}
	for _, tc := range []struct {
		dev  torch.Device
		dt   torch.DType
		n    int64
		want string
	}{
		{torch.CPU, torch.Float32, 16, RunsCPU},
		{torch.CPU, torch.Float64, 16, RunsCPU},
		{torch.CUDA(0), torch.Float32, 16, cuda},
		{torch.CUDA(0), torch.BFloat16, 16, cuda},
		{torch.CUDA(0), torch.Float32, 257, RunsATen},
		{torch.CUDA(0), torch.Float64, 16, RunsATen},
	} {
		got, err := FusedRuns(tc.dev, tc.dt, tc.n)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%v %v %d states", tc.dev, tc.dt, tc.n)
	}
	_, err := FusedRuns(torch.CPU, torch.Float32, 0)
	require.ErrorContains(t, err, "state must be at least 1")
}
