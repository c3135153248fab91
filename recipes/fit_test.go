package recipes

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// TestWorstHoldsOneSize: a planner's measurement counts what the device
// holds, so Worst keeps the batch of one size only — asking for another
// size frees it, asking again for the same size returns it.
func TestWorstHoldsOneSize(t *testing.T) {
	x := torch.Arange(0, 64*100, 1, torch.Float32).Reshape(64, 100)
	ds, err := data.NewTensorDataset(map[string]*torch.Tensor{"x": x})
	require.NoError(t, err)
	defer ds.Free()
	order := []int{5, 3, 9, 1, 0, 2, 4, 6, 7, 8}
	held := func() int64 { return torch.MustMemoryStats(torch.CPU).Allocated }
	base := held()
	w := NewWorst(ds, data.Collate, order)
	for _, tc := range []struct{ n, rows int }{{2, 2}, {8, 8}, {8, 8}, {1, 1}, {20, 10}} {
		b, err := w.Batch(tc.n)
		require.NoError(t, err)
		f := b.Field("x")
		require.Equal(t, []int64{int64(tc.rows), 100}, f.Shape())
		require.NoError(t, torch.TidyErr(func() error { // the views go before the count
			require.Equal(t, float64(order[0]*100), f.Select(0, 0).Select(0, 0).Item(), "the first row is order's first")
			return nil
		}))
		require.Equal(t, int64(tc.rows)*100*4, held()-base, "only this size's batch is held")
	}
	w.Free()
	w.Free()
	require.Equal(t, base, held())
}
