package scan

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// scanMemory runs forward and backward of s on float32 operands of length
// l (the operands and the output's gradient made first) and returns what
// the forward leaves for backward beyond its output (held) and the
// high-water mark of forward and backward above the operands (peak), both
// from the counting allocator.
func scanMemory(t *testing.T, s Scan, b, l, d, n int64) (held, peak int64) {
	t.Helper()
	torch.Tidy(func() {
		torch.ManualSeed(5)
		var ins []*torch.Tensor
		var gy *torch.Tensor
		torch.NoGrad(func() {
			ins = operandsFor(b, l, d, n, torch.Float32)
			gy = torch.Randn([]int64{b, l, d})
		})
		for _, x := range ins {
			x.SetRequiresGrad(true)
		}
		base := torch.MustMemoryStats(torch.CPU).Allocated
		require.NoError(t, torch.ResetPeakMemory(torch.CPU))
		y, last := s.Apply(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5])
		last.Free()
		held = torch.MustMemoryStats(torch.CPU).Allocated - base - y.NBytes()
		y.BackwardWith(gy, false, false)
		y.Free()
		peak = torch.MustMemoryStats(torch.CPU).PeakAllocated - base
	})
	return held, peak
}

// The fused scan's memory does not grow with the sequence in its state
// dimension: forward holds exactly one state (batch × channels × state)
// per chunk of K steps, and the peak of forward + backward grows by less
// than half a state per time step (what grows is the gradients of x, Δ, B
// and C, which the caller asked for). Sequential, the reference, holds
// several states per step, and fails both checks: the checks can fail.
func TestScanMemoryFlatInLength(t *testing.T) {
	const b, d, n, k = 2, 64, 16, 32
	state := int64(b * d * n * 4) // one float32 state
	type mem struct{ held, peak int64 }
	measure := func(s Scan) (short, long mem, l1, l2 int64) {
		l1, l2 = 128, 1024
		short.held, short.peak = scanMemory(t, s, b, l1, d, n)
		long.held, long.peak = scanMemory(t, s, b, l2, d, n)
		return
	}
	for _, tc := range []struct {
		s    Scan
		flat bool
	}{
		{Fused(k), true},
		{Chunked(k), true},
		{Sequential(), false},
	} {
		t.Run(tc.s.Name(), func(t *testing.T) {
			short, long, l1, l2 := measure(tc.s)
			perStep := float64(long.peak-short.peak) / float64(l2-l1) / float64(state)
			t.Logf("%s: held %d → %d bytes (%d → %d chunks of %d), peak %d → %d bytes: %.3f states per step",
				tc.s.Name(), short.held, long.held, l1/k, l2/k, k, short.peak, long.peak, perStep)
			if !tc.flat {
				require.Greater(t, perStep, 1.0, "the reference keeps states per step")
				return
			}
			require.Less(t, perStep, 0.5, "peak grows by less than half a state per step")
			if tc.s.Name() == "fused" {
				require.Equal(t, l1/k*state, short.held, "one state per chunk, nothing else")
				require.Equal(t, l2/k*state, long.held, "one state per chunk, nothing else")
			}
		})
	}
}

// The fused scan's saved bytes are one state per chunk at every length,
// a partial last chunk included.
func TestFusedHeldIsChunkStates(t *testing.T) {
	const b, d, n = 1, 16, 4
	for _, tc := range []struct{ l, k int64 }{{1, 4}, {5, 4}, {64, 64}, {65, 64}, {200, 16}} {
		t.Run(fmt.Sprintf("L=%d,K=%d", tc.l, tc.k), func(t *testing.T) {
			held, _ := scanMemory(t, Fused(int(tc.k)), b, tc.l, d, n)
			require.Equal(t, (tc.l+tc.k-1)/tc.k*b*d*n*4, held)
		})
	}
}
