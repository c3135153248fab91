package torch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOutOfMemoryInBackwardFreesTheGraph: a backward (or Gradients) that
// runs out of memory half-way leaves nothing behind once its scope is
// gone — not the graph's saved tensors, not the gradients waiting in the
// autograd engine's ready queue — so a caller that halves its batch and
// tries again has all its memory back. (Without the shim's drain, 15
// activations of this graph stayed allocated after each failure, on 1.13
// and 2.11 alike.)
func TestOutOfMemoryInBackwardFreesTheGraph(t *testing.T) {
	for _, tc := range []struct {
		name, op string
		back     func(loss, w *Tensor)
	}{
		{"Backward", "Backward", func(loss, _ *Tensor) { loss.Backward() }},
		{"Gradients", "Gradients", func(loss, w *Tensor) { Gradients([]*Tensor{loss}, []*Tensor{w}, nil, false, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settle()
			base := MustMemoryStats(CPU).Allocated
			w := Randn([]int64{256, 256}).SetRequiresGrad(true)
			step := func(backward bool) error {
				return TidyErr(func() error {
					x := Randn([]int64{64, 256})
					var branches []*Tensor
					for range 8 { // independent branches: several nodes ready at once in backward
						h := x.Matmul(w).Tanh().Matmul(w).Sigmoid()
						branches = append(branches, h.Mul(h).Sum())
					}
					loss := branches[0]
					for _, b := range branches[1:] {
						loss = loss.Add(b)
					}
					if backward {
						tc.back(loss, w)
					}
					return nil
				})
			}
			peak := func(backward bool) int64 {
				require.NoError(t, ResetPeakMemory(CPU))
				require.NoError(t, step(backward))
				w.SetGrad(nil)
				return MustMemoryStats(CPU).PeakAllocated
			}
			forward, both := peak(false), peak(true)
			require.Greater(t, both, forward)
			settle()
			held := MustMemoryStats(CPU).Allocated
			for range 3 {
				require.NoError(t, SetMemoryLimit(CPU, (forward+both)/2)) // forward fits; backward does not
				err := step(true)
				require.NoError(t, SetMemoryLimit(CPU, 0))
				var te *Error
				require.ErrorAs(t, err, &te)
				require.True(t, te.OOM)
				require.Equal(t, tc.op, te.Op, "out of memory in the backward pass")
				w.SetGrad(nil)
				settle()
				require.Equal(t, held, MustMemoryStats(CPU).Allocated, "nothing of the failed backward is left")
			}
			require.Equal(t, both, peak(true), "the next step's peak is the first one's")
			w.Free()
			settle()
			require.Equal(t, base, MustMemoryStats(CPU).Allocated)
		})
	}
}
