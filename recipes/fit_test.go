package recipes

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// TestWorstHoldsTheLoaderBatches: a planner's measurement counts what the
// device holds, so Worst holds what training holds of the data — on the
// CPU the loader's live batches of the effective batch (the one trained on
// and the Workers × Prefetch built ahead), on a CUDA device one, on the
// host — and its micro-batches are views of the first, the longest
// examples first.
func TestWorstHoldsTheLoaderBatches(t *testing.T) {
	x := torch.Arange(0, 64*100, 1, torch.Float32).Reshape(64, 100)
	ds, err := data.NewTensorDataset(map[string]*torch.Tensor{"x": x})
	require.NoError(t, err)
	defer ds.Free()
	order := []int{5, 3, 9, 1, 0, 2, 4, 6, 7, 8}
	held := func() int64 { return torch.MustMemoryStats(torch.CPU).Allocated }
	for _, tc := range []struct {
		name                 string
		effective            int
		device               torch.Device
		opt                  data.Options
		rows, batches, micro int
	}{
		{"cpu no workers", 8, torch.CPU, data.Options{}, 8, 1, 2},
		{"cpu 1 worker prefetch 2", 8, torch.CPU, data.Options{Workers: 1, Prefetch: 2}, 8, 4, 4},
		{"cpu 2 workers default prefetch", 4, torch.CPU, data.Options{Workers: 2}, 4, 7, 4},
		{"more than the examples", 20, torch.CPU, data.Options{}, 10, 1, 20},
		{"cuda: on the host, one", 8, torch.CUDA(0), data.Options{Workers: 2, Prefetch: 2}, 8, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := held()
			w, err := NewWorst(ds, data.Collate, order, tc.effective, tc.device, tc.opt)
			require.NoError(t, err)
			require.Equal(t, int64(tc.batches*tc.rows)*100*4, held()-base, "%d loader batches of %d rows", tc.batches, tc.rows)
			if tc.micro > 0 {
				require.NoError(t, torch.TidyErr(func() error {
					f := w.Micro(tc.micro, tc.device).Field("x")
					require.Equal(t, []int64{int64(min(tc.micro, tc.rows)), 100}, f.Shape())
					require.Equal(t, float64(order[0]*100), f.Select(0, 0).Select(0, 0).Item(), "the first row is order's first")
					require.Equal(t, int64(tc.batches*tc.rows)*100*4, held()-base, "a micro-batch on the CPU is a view")
					return nil
				}))
			}
			w.Free()
			w.Free()
			require.Equal(t, base, held())
		})
	}
}
