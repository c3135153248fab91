package torch_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// block is y = dropout(gelu(x·w1ᵀ)) · w2ᵀ + x.
func block(w1, w2 *torch.Tensor) func([]*torch.Tensor) []*torch.Tensor {
	return func(in []*torch.Tensor) []*torch.Tensor {
		h := torch.Linear(in[0], w1, nil).Gelu().Dropout(0.1, true)
		return []*torch.Tensor{torch.Linear(h, w2, nil).Add(in[0])}
	}
}

func stackGrads(t *testing.T, depth int, checkpoint bool) (grads [][]float32, peak int64) {
	t.Helper()
	torch.ManualSeed(7)
	var ws []*torch.Tensor
	for k := 0; k < depth; k++ {
		ws = append(ws, torch.Randn([]int64{256, 64}).MulScalar(0.05).Keep().SetRequiresGrad(true))
		ws = append(ws, torch.Randn([]int64{64, 256}).MulScalar(0.05).Keep().SetRequiresGrad(true))
	}
	x := torch.Randn([]int64{128, 64}).Keep()
	defer x.Free()
	torch.ManualSeed(11)
	base := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	torch.Tidy(func() {
		h := x
		for k := 0; k < depth; k++ {
			f := block(ws[2*k], ws[2*k+1])
			if checkpoint {
				h = torch.Recompute(f, h)[0]
			} else {
				h = f([]*torch.Tensor{h})[0]
			}
		}
		h.Square().Mean().Backward()
	})
	peak = torch.MustMemoryStats(torch.CPU).PeakAllocated - base
	for _, w := range ws {
		g := w.Grad()
		require.NotNil(t, g, "every parameter gets a gradient")
		grads = append(grads, g.Float32s())
		g.Free()
		w.Free()
	}
	return grads, peak
}

func TestCheckpointGradientsIdenticalAndPeakLower(t *testing.T) {
	// Bitwise identity needs one intra-op thread: with several, libtorch's
	// CPU backward itself is not bitwise reproducible from run to run (two
	// plain runs already differ in the last bit), checkpointing or not.
	threads := torch.NumThreads()
	torch.SetNumThreads(1)
	plain, _ := stackGrads(t, 4, false)
	ckpt, _ := stackGrads(t, 4, true)
	torch.SetNumThreads(threads)
	for k := range plain {
		require.Equal(t, plain[k], ckpt[k], "gradient %d: bitwise identical with checkpointing, dropout included", k)
	}

	plain, peakPlain := stackGrads(t, 12, false)
	ckpt, peakCkpt := stackGrads(t, 12, true)
	for k := range plain {
		require.InDeltaSlice(t, plain[k], ckpt[k], 1e-6, "gradient %d at %d threads", k, threads)
	}
	t.Logf("peak above baseline for 12 blocks: plain %s, checkpointed %s (%.0f%% lower)", torch.FormatBytes(peakPlain),
		torch.FormatBytes(peakCkpt), 100*(1-float64(peakCkpt)/float64(peakPlain)))
	require.Less(t, float64(peakCkpt), 0.6*float64(peakPlain), "checkpointing lowers peak memory by at least 40%%")
	require.Zero(t, torch.RecomputesLive(), "regions release their Go functions with the graph")
}

func TestCheckpointInputWithoutGrad(t *testing.T) {
	w := torch.Randn([]int64{4, 4}, torch.RequiresGrad)
	x := torch.Randn([]int64{2, 4}) // no grad: parameters inside must still get theirs
	out := torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
		return []*torch.Tensor{torch.Linear(in[0], w, nil).Tanh()}
	}, x)[0]
	out.Sum().Backward()
	g := w.Grad()
	require.NotNil(t, g)

	w2 := w.Detach().Clone().SetRequiresGrad(true)
	torch.Linear(x, w2, nil).Tanh().Sum().Backward()
	require.Equal(t, w2.Grad().Float32s(), g.Float32s())
}

func TestCheckpointErrorInsideRegion(t *testing.T) {
	x := torch.Randn([]int64{2, 3}, torch.RequiresGrad)
	live := torch.RecomputesLive()
	err := torch.Try(func() {
		torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
			return []*torch.Tensor{in[0].Matmul(torch.Ones([]int64{4, 4}))}
		}, x)
	})
	require.Error(t, err)
	require.Contains(t, err.Error(), "cannot be multiplied")
	require.LessOrEqual(t, torch.RecomputesLive(), live, "a failed region releases its function")
}

// Under bf16 autocast, backward recomputes a checkpointed region with
// autocast on; the low-precision weight copies it caches are dropped when
// the recomputation ends, as torch.utils.checkpoint's autocast region does:
// nothing stays allocated after the step.
func TestCheckpointBackwardLeavesNoAutocastCache(t *testing.T) {
	torch.CollectGarbage()
	torch.ManualSeed(1)
	w := torch.Randn([]int64{256, 256}).SetRequiresGrad(true).Keep()
	defer w.Free()
	x := torch.Randn([]int64{8, 256}).Keep()
	defer x.Free()
	step := func() {
		torch.Tidy(func() {
			var y *torch.Tensor
			torch.Autocast(torch.CPU, torch.BFloat16, func() {
				y = torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
					return []*torch.Tensor{in[0].Matmul(w).Relu()}
				}, x)[0]
			})
			y.ToDType(torch.Float32).Sum().Backward() // recomputes under autocast, outside any region
		})
		w.SetGrad(nil)
	}
	before := torch.MustMemoryStats(torch.CPU).Allocated
	step()
	require.Equal(t, before, torch.MustMemoryStats(torch.CPU).Allocated, "no cast weights left in autocast's cache")
}

// Autocast keeps a parameter's low-precision copy until its region ends.
// A checkpointed region's first run keeps none: it keeps nothing else for
// backward either, so each copy is freed after its op instead of every
// region's staying until the whole forward is done. After the region the
// cache is on again, and the gradients are those of the plain forward.
func TestCheckpointForwardCachesNoCast(t *testing.T) {
	threads := torch.NumThreads()
	torch.SetNumThreads(1) // bitwise equal gradients below
	defer torch.SetNumThreads(threads)
	torch.CollectGarbage()
	torch.ManualSeed(3)
	w := torch.Randn([]int64{128, 256}).SetRequiresGrad(true).Keep()
	defer w.Free()
	x := torch.Randn([]int64{4, 128}).SetRequiresGrad(true).Keep() // else the region adds a dummy input
	defer x.Free()
	castBytes := (w.Numel() + x.Numel()) * 2 // both are leaves that require grad
	// A region keeps its inputs (x, already counted) and the forward's
	// RNG state, for the recomputation.
	a := torch.MustMemoryStats(torch.CPU).Allocated
	rng := torch.TakeRNG()
	rngBytes := torch.MustMemoryStats(torch.CPU).Allocated - a
	rng.Free()
	grad := func(checkpoint bool) []float32 {
		var g []float32
		torch.Tidy(func() {
			f := func(in []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{in[0].Matmul(w).Tanh()}
			}
			var y *torch.Tensor
			torch.Autocast(torch.CPU, torch.BFloat16, func() {
				base := torch.MustMemoryStats(torch.CPU).Allocated
				if !checkpoint {
					y = f([]*torch.Tensor{x})[0]
					return
				}
				y = torch.Recompute(f, x)[0]
				held := base + y.NBytes() + rngBytes
				require.Equal(t, held, torch.MustMemoryStats(torch.CPU).Allocated,
					"a checkpointed region's first run leaves no cast weight cached")
				var cached *torch.Tensor // outside the region the cache is on again
				torch.NoGrad(func() { cached = x.Matmul(w) })
				require.Equal(t, held+cached.NBytes()+castBytes, torch.MustMemoryStats(torch.CPU).Allocated,
					"autocast caches the leaves' casts after the region")
			})
			y.ToDType(torch.Float32).Square().Sum().Backward()
			g = w.Grad().Float32s()
		})
		w.SetGrad(nil)
		x.SetGrad(nil)
		return g
	}
	require.Equal(t, grad(false), grad(true), "the same gradient to the bit")
}

// A backward run inside the autocast region (allowed, if not what PyTorch
// recommends) recomputes with the forward's casts still cached. Were the
// first run's casts cached, made under no_grad, the recomputation would
// take them from the cache and the weight would get no gradient under
// libtorch 1.13, whose autocast caches a cast made under no_grad as it is
// (torch.utils.checkpoint's reentrant form does the same there; PyTorch
// issue 158232, fixed by 2.11, which makes cached casts with their
// gradient history).
func TestCheckpointBackwardInsideAutocast(t *testing.T) {
	threads := torch.NumThreads()
	torch.SetNumThreads(1)
	defer torch.SetNumThreads(threads)
	torch.ManualSeed(5)
	w := torch.Randn([]int64{64, 32}).SetRequiresGrad(true).Keep()
	defer w.Free()
	x := torch.Randn([]int64{8, 64}).Keep()
	defer x.Free()
	f := func(in []*torch.Tensor) []*torch.Tensor { return []*torch.Tensor{in[0].Matmul(w).Tanh()} }
	grad := func(checkpoint bool) []float32 {
		var g []float32
		torch.Tidy(func() {
			torch.Autocast(torch.CPU, torch.BFloat16, func() {
				var y *torch.Tensor
				if checkpoint {
					y = torch.Recompute(f, x)[0]
				} else {
					y = f([]*torch.Tensor{x})[0]
				}
				y.ToDType(torch.Float32).Square().Sum().Backward()
			})
			gw := w.Grad()
			require.NotNil(t, gw, "the weight gets a gradient")
			g = gw.Float32s()
		})
		w.SetGrad(nil)
		return g
	}
	require.Equal(t, grad(false), grad(true), "the same gradient to the bit")
}
