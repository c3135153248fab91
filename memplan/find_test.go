package memplan_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/torch"
)

func TestFindBatchSizeSearch(t *testing.T) {
	oom := &torch.Error{Op: "test", Msg: "out of memory", OOM: true}
	for _, tc := range []struct {
		name    string
		max     int
		fitsTo  int // largest size that fits
		want    int
		tried   []int
		wantErr error
	}{
		{name: "doubling then bisection", max: 1000, fitsTo: 37, want: 37, tried: []int{1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37}},
		{name: "stops at the limit", max: 24, fitsTo: 1000, want: 24, tried: []int{1, 2, 4, 8, 16, 24}},
		{name: "limit fails", max: 24, fitsTo: 20, want: 20, tried: []int{1, 2, 4, 8, 16, 24, 20, 22, 21}},
		{name: "a power of two", max: 1000, fitsTo: 16, want: 16, tried: []int{1, 2, 4, 8, 16, 32, 24, 20, 18, 17}},
		{name: "nothing fits", max: 8, fitsTo: 0, want: 0, tried: []int{1}},
		{name: "max 1", max: 1, fitsTo: 5, want: 1, tried: []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tried []int
			res, err := memplan.FindBatchSize(torch.CPU, tc.max, func(n int) error {
				tried = append(tried, n)
				if n > tc.fitsTo {
					return oom
				}
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, tc.want, res.MicroBatch)
			require.Equal(t, tc.tried, tried)
			require.Len(t, res.Trials, len(tried))
			for k, tr := range res.Trials {
				require.Equal(t, tried[k], tr.MicroBatch)
				require.Equal(t, tr.MicroBatch <= tc.fitsTo, tr.Fits)
				require.Equal(t, !tr.Fits, tr.Err != nil)
			}
		})
	}

	other := errors.New("disk on fire")
	res, err := memplan.FindBatchSize(torch.CPU, 64, func(n int) error {
		if n == 4 {
			return other
		}
		return nil
	})
	require.ErrorIs(t, err, other, "errors other than OOM stop the search")
	require.Len(t, res.Trials, 2)

	_, err = memplan.FindBatchSize(torch.CPU, 0, func(int) error { return nil })
	var oe *memplan.OptionError
	require.ErrorAs(t, err, &oe)
}

// TestFindBatchSizeMeasuresPeak: each trial's peak is what its step
// allocated, and real allocations under a cap give a real OOM.
func TestFindBatchSizeMeasuresPeak(t *testing.T) {
	base := torch.MustMemoryStats(torch.CPU).Allocated
	const row = 1 << 16 // bytes per "sample"
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, base+100*row))
	res, err := memplan.FindBatchSize(torch.CPU, 1000, func(n int) error {
		return torch.TidyErr(func() error {
			torch.Zeros([]int64{int64(n), row / 4})
			return nil
		})
	})
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0))
	require.NoError(t, err)
	var buf bytes.Buffer
	res.Table(&buf)
	t.Log("\n" + buf.String())
	require.Equal(t, 100, res.MicroBatch)
	for _, tr := range res.Trials {
		if tr.Fits {
			require.Equal(t, int64(tr.MicroBatch*row), tr.Peak)
		} else {
			require.ErrorIs(t, tr.Err, torch.ErrOutOfMemory)
		}
	}
	require.Contains(t, buf.String(), "largest micro-batch that fits: 100")
	require.Equal(t, base, torch.MustMemoryStats(torch.CPU).Allocated)
}
