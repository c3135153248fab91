package dropout

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/philox"
	"github.com/torchfit/torchfit/torch"
)

// refMask is the mask in Go, on internal/philox: element i keeps its value
// when the uniform of word i mod 4 of block i/4 of (seed, offset) is below
// float32(1−p).
func refMask(seed, offset uint64, n int, p float64) []bool {
	keep := float32(1 - p)
	m := make([]bool, n)
	var w [4]uint32
	for i := range m {
		if i%4 == 0 {
			w = philox.Stream(seed, offset, uint64(i/4))
		}
		m[i] = philox.Uniform(w[i%4]) < keep
	}
	return m
}

func apply(x *torch.Tensor, seed, offset uint64, p float64) *torch.Tensor {
	return torch.CallOp(ApplyOp, "", x, int64(seed), int64(offset), p)[0].(*torch.Tensor)
}

func fused(x *torch.Tensor, p float64, train bool) *torch.Tensor {
	return torch.CallOp(Op, "", x, p, train)[0].(*torch.Tensor)
}

// nextSeed is the seed the next dropout call will draw: it draws one and
// puts the generator back.
func nextSeed() uint64 {
	st := torch.RNGState()
	defer st.Free()
	s := torch.CallOp(SeedOp, "")[0].(int64)
	torch.SetRNGState(st)
	return uint64(s)
}

// requireTorchPanic requires fn to panic with a *torch.Error whose message
// contains msg.
func requireTorchPanic(t *testing.T, msg string, fn func()) {
	t.Helper()
	var got any
	func() {
		defer func() { got = recover() }()
		fn()
	}()
	require.NotNil(t, got, "no panic")
	err, ok := got.(error)
	require.True(t, ok, "panic with %T: %v", got, got)
	var te *torch.Error
	require.True(t, errors.As(err, &te), "panic with %T: %v", got, got)
	require.Contains(t, te.Msg, msg)
}

func TestCheck(t *testing.T) {
	s, err := Check()
	require.NoError(t, err)
	require.Contains(t, s, "torchfit_dropout::dropout(Tensor input, float p, bool train) -> Tensor")
}

// The kernel's output is x·m/(1−p) with m the Go reference's mask, exactly
// (the product rounded once in the multiply's type), for every dtype and
// for sizes that end inside a Philox block, inside a tile and across
// several parallel tasks.
func TestApplyMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		dt     torch.DType
		n      int
		p      float64
		seed   uint64
		offset uint64
	}{
		{torch.Float32, 1, 0.5, 1, 0},
		{torch.Float32, 7, 0.5, 2, 0},
		{torch.Float32, 67, 0.1, 3, 0},
		{torch.Float32, 300_001, 0.3, 0xdeadbeefcafef00d, 0},
		{torch.Float32, 1000, 0.3, 5, 1 << 40},
		{torch.Float64, 100_003, 0.2, 6, 0},
		{torch.BFloat16, 100_003, 0.4, 7, 0},
		{torch.Float16, 100_003, 0.6, 8, 0},
		{torch.Float32, 4096, 0.999, 9, 0},
	} {
		t.Run(fmt.Sprintf("%v/n=%d/p=%g/offset=%d", tc.dt, tc.n, tc.p, tc.offset), func(t *testing.T) {
			torch.Tidy(func() {
				torch.ManualSeed(tc.seed)
				x := torch.Randn([]int64{int64(tc.n)}, tc.dt)
				y := apply(x, tc.seed, tc.offset, tc.p)
				require.Equal(t, tc.dt, y.DType())
				xs, ys := x.Float64s(), y.Float64s()
				m := refMask(tc.seed, tc.offset, tc.n, tc.p)
				for i := range xs {
					var want float64
					switch tc.dt {
					case torch.Float64:
						if m[i] {
							want = xs[i] * (1 / (1 - tc.p))
						}
					case torch.Float32:
						if m[i] {
							want = float64(float32(xs[i]) * float32(1/(1-tc.p)))
						}
					default: // half types: the float32 product rounded to the dtype
						if m[i] {
							want = float64(float32(xs[i]) * float32(1/(1-tc.p)))
							want = torch.Scalar(want, torch.Float64).ToDType(tc.dt).Item()
						}
					}
					if want != ys[i] {
						require.Equal(t, want, ys[i], "element %d of %d (kept %v, x %v)", i, tc.n, m[i], xs[i])
					}
				}
			})
		})
	}
}

// The fraction kept is 1−p within a binomial bound (six standard
// deviations, n = 2²⁰), for several p and seeds.
func TestKeepRate(t *testing.T) {
	const n = 1 << 20
	for _, p := range []float64{0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99} {
		for _, seed := range []uint64{1, 1 << 33, 0xffffffffffffffff} {
			kept := 0
			for _, k := range refMaskFromKernel(seed, n, p) {
				if k {
					kept++
				}
			}
			q := 1 - p
			sd := math.Sqrt(n * q * (1 - q))
			require.InDelta(t, n*q, float64(kept), 6*sd, "p=%g seed=%#x: kept %d of %d", p, seed, kept, n)
		}
	}
}

// refMaskFromKernel runs the kernel on ones and reads the mask back.
func refMaskFromKernel(seed uint64, n int, p float64) []bool {
	var m []bool
	torch.Tidy(func() {
		y := apply(torch.Ones([]int64{int64(n)}), seed, 0, p)
		for _, v := range y.Float32s() {
			m = append(m, v != 0)
		}
	})
	return m
}

// corr is the Pearson correlation of two 0/1 sequences.
func corr(a, b []bool) float64 {
	var sa, sb, sab float64
	for i := range a {
		x, y := b2f(a[i]), b2f(b[i])
		sa += x
		sb += y
		sab += x * y
	}
	n := float64(len(a))
	ma, mb := sa/n, sb/n
	cov := sab/n - ma*mb
	return cov / math.Sqrt(ma*(1-ma)*mb*(1-mb))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Independence: neighbouring elements, the four lanes of a Philox block
// (every pair), and two successive calls are uncorrelated (|r| below six
// standard errors), and successive calls draw different masks.
func TestIndependence(t *testing.T) {
	const n = 1 << 20
	bound := func(m int) float64 { return 6 / math.Sqrt(float64(m)) }
	for _, p := range []float64{0.1, 0.5} {
		t.Run(fmt.Sprintf("p=%g", p), func(t *testing.T) {
			m := refMaskFromKernel(42, n, p)
			for _, lag := range []int{1, 2, 3, 4, 5, 8, 64, 4096} {
				r := corr(m[:n-lag], m[lag:])
				require.Less(t, math.Abs(r), bound(n-lag), "lag %d: r = %v", lag, r)
			}
			lanes := make([][]bool, 4)
			for i, k := range m {
				lanes[i%4] = append(lanes[i%4], k)
			}
			for a := 0; a < 4; a++ {
				for b := a + 1; b < 4; b++ {
					r := corr(lanes[a], lanes[b])
					require.Less(t, math.Abs(r), bound(n/4), "lanes %d and %d: r = %v", a, b, r)
				}
			}
			// Successive calls through the operator: different seeds, uncorrelated masks.
			torch.Tidy(func() {
				torch.ManualSeed(3)
				ones := torch.Ones([]int64{n})
				y1, y2 := fused(ones, p, true).Float32s(), fused(ones, p, true).Float32s()
				m1, m2 := make([]bool, n), make([]bool, n)
				same := 0
				for i := range y1 {
					m1[i], m2[i] = y1[i] != 0, y2[i] != 0
					if m1[i] == m2[i] {
						same++
					}
				}
				require.Less(t, same, n, "two calls drew the same mask")
				r := corr(m1, m2)
				require.Less(t, math.Abs(r), bound(n), "successive calls: r = %v", r)
			})
		})
	}
}

// The operator draws its seed from the default CPU generator: the same
// torch.ManualSeed gives the same output, the forward is the kernel with
// that seed, and an RNG snapshot (activation checkpointing) or RNG state
// (a checkpoint's) restored gives the same mask again.
func TestDeterministicUnderManualSeed(t *testing.T) {
	torch.Tidy(func() {
		x := torch.Randn([]int64{33, 65})
		torch.ManualSeed(7)
		seed := nextSeed()
		a := fused(x, 0.3, true)
		b := fused(x, 0.3, true)
		require.False(t, a.Equal(b), "successive calls share a mask")
		torch.ManualSeed(7)
		a2 := fused(x, 0.3, true)
		require.True(t, a.Equal(a2), "the same seed gives another mask")
		require.True(t, a.Equal(apply(x, seed, 0, 0.3)), "the forward is not the kernel with the drawn seed")
		rng := torch.TakeRNG()
		defer rng.Free()
		c := fused(x, 0.3, true)
		rng.Restore()
		require.True(t, c.Equal(fused(x, 0.3, true)), "an RNG snapshot restored gives another mask")
		st := torch.RNGState() // what a checkpoint saves
		d := fused(x, 0.3, true)
		torch.ManualSeed(99)
		torch.SetRNGState(st)
		require.True(t, d.Equal(fused(x, 0.3, true)), "a restored RNG state gives another mask")
	})
}

// Backward regenerates the forward's mask: the gradient is g·m/(1−p) with
// the forward's m, exactly the kernel applied to g with the same seed.
func TestGradientRegeneratesMask(t *testing.T) {
	for _, dt := range []torch.DType{torch.Float32, torch.Float64, torch.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			torch.Tidy(func() {
				const p = 0.35
				x := torch.Randn([]int64{8, 80, 33}, dt, torch.RequiresGrad)
				g := torch.Randn([]int64{8, 80, 33}, dt)
				torch.ManualSeed(11)
				seed := nextSeed()
				y := fused(x, p, true)
				y.BackwardWith(g, false, false)
				gx := x.Grad()
				require.True(t, gx.Equal(apply(g, seed, 0, p)), "gradient is not the kernel on g with the forward's seed")
				ys, xs, gs, gxs := y.Float64s(), x.Float64s(), g.Float64s(), gx.Float64s()
				kept, seen := 0, 0
				for i := range ys {
					if xs[i] == 0 || gs[i] == 0 { // a zero says nothing about the mask
						continue
					}
					fwd, bwd := ys[i] != 0, gxs[i] != 0
					require.Equal(t, fwd, bwd, "element %d: forward and backward masks differ", i)
					seen++
					if fwd {
						kept++
					}
				}
				require.InDelta(t, 1-p, float64(kept)/float64(seen), 0.02)
			})
		})
	}
}

// The backward is itself differentiable (create_graph): the gradient of
// the gradient with respect to the incoming gradient is the same mask.
func TestDoubleBackward(t *testing.T) {
	torch.Tidy(func() {
		const p = 0.5
		x := torch.Randn([]int64{40, 7}, torch.Float64, torch.RequiresGrad)
		g := torch.Randn([]int64{40, 7}, torch.Float64, torch.RequiresGrad)
		torch.ManualSeed(4)
		seed := nextSeed()
		y := fused(x, p, true)
		gx := torch.Gradients([]*torch.Tensor{y}, []*torch.Tensor{x}, []*torch.Tensor{g}, false, true)[0]
		require.True(t, gx.RequiresGrad(), "no graph through backward")
		gg := torch.Gradients([]*torch.Tensor{gx.Sum()}, []*torch.Tensor{g}, nil, false, false)[0]
		require.True(t, gg.Equal(apply(torch.OnesLike(g), seed, 0, p)))
	})
}

// Edge cases, as ATen's dropout answers them: p = 0, train = false and an
// empty input give the input back (no random number drawn); p = 1 gives
// zeros and zero gradients; a non-contiguous input gets the mask of its
// logical order; p outside [0, 1] panics with *torch.Error.
func TestEdgeCases(t *testing.T) {
	torch.Tidy(func() {
		x := torch.Randn([]int64{6, 10}, torch.RequiresGrad)
		for _, tc := range []struct {
			name  string
			p     float64
			train bool
		}{{"p=0", 0, true}, {"eval", 0.5, false}} {
			st := torch.RNGState()
			y := fused(x, tc.p, tc.train)
			require.True(t, y.Equal(x), tc.name)
			require.True(t, st.Equal(torch.RNGState()), "%s drew random numbers", tc.name)
		}
		empty := torch.Randn([]int64{0, 3})
		require.Equal(t, int64(0), fused(empty, 0.5, true).Numel())

		y := fused(x, 1, true)
		require.True(t, y.Equal(torch.ZerosLike(x)), "p=1")
		y.Sum().Backward()
		require.True(t, x.Grad().Equal(torch.ZerosLike(x)), "p=1 gradient")

		nc := torch.Randn([]int64{10, 6}).Transpose(0, 1)
		require.False(t, nc.IsContiguous())
		torch.ManualSeed(5)
		a := fused(nc, 0.5, true)
		torch.ManualSeed(5)
		b := fused(nc.Contiguous(), 0.5, true)
		require.True(t, a.Equal(b), "non-contiguous input")

		for _, p := range []float64{-0.1, 1.5, math.NaN()} {
			requireTorchPanic(t, "dropout probability has to be between 0 and 1", func() { fused(x, p, true) })
			requireTorchPanic(t, "dropout probability has to be between 0 and 1", func() { apply(x, 1, 0, p) })
		}
		requireTorchPanic(t, "the fused kernel takes", func() { apply(torch.Ones([]int64{3}, torch.Int64), 1, 0, 0.5) })
	})
}

// Other dtypes take ATen's dropout: the operator answers an integer tensor as
// ATen's dropout does (an error or a result, whichever ATen gives).
func TestFallbackDType(t *testing.T) {
	torch.Tidy(func() {
		x := torch.Ones([]int64{64}, torch.Int64)
		var want, got error
		torch.ManualSeed(1)
		want = torch.Try(func() { x.Dropout(0.5, true) })
		torch.ManualSeed(1)
		got = torch.Try(func() { fused(x, 0.5, true) })
		require.Equal(t, want == nil, got == nil, "aten: %v, fused: %v", want, got)
	})
}

// The graph keeps no mask: after the forward of an input that requires
// grad, the fused dropout holds its output only, ATen's its output and a
// mask of the same size.
func TestSavedMemory(t *testing.T) {
	const n = 1 << 20
	held := func(f func(x *torch.Tensor) *torch.Tensor) (extra int64) {
		torch.Tidy(func() {
			x := torch.Randn([]int64{n}, torch.RequiresGrad)
			before := torch.MustMemoryStats(torch.CPU).Allocated
			y := f(x)
			extra = torch.MustMemoryStats(torch.CPU).Allocated - before - y.Numel()*4
			y.Sum().Backward() // the graph was alive until here
		})
		return extra
	}
	fusedExtra := held(func(x *torch.Tensor) *torch.Tensor { return fused(x, 0.1, true) })
	atenExtra := held(func(x *torch.Tensor) *torch.Tensor { return x.Dropout(0.1, true) })
	t.Logf("bytes held besides the output after forward, %d float32 elements: fused %d, aten %d", n, fusedExtra, atenExtra)
	require.Less(t, fusedExtra, int64(4096))
	require.GreaterOrEqual(t, atenExtra, int64(n*4))
}

// The output does not depend on the number of threads, bit for bit, for
// every dtype and a size that ends inside a Philox block: each task
// writes its own Philox blocks. Until 2026-11-28 this package's
// parallel_for ran on one thread whatever the count (see package
// parwidth).
func TestThreadsBitwise(t *testing.T) {
	prev := torch.NumThreads()
	defer torch.SetNumThreads(prev)
	for _, dt := range []torch.DType{torch.Float32, torch.Float64, torch.BFloat16, torch.Float16} {
		torch.Tidy(func() {
			torch.ManualSeed(11)
			x := torch.Randn([]int64{1_000_003}, dt)
			var ys []*torch.Tensor
			for _, n := range []int{1, 2, 3} {
				torch.SetNumThreads(n)
				ys = append(ys, apply(x, 77, 5, 0.3))
			}
			require.True(t, ys[0].Equal(ys[1]), "%s: 2 threads against 1", dt)
			require.True(t, ys[0].Equal(ys[2]), "%s: 3 threads against 1", dt)
		})
	}
}
