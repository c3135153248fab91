package memplan_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// Nil arguments are *OptionErrors; they were nil dereferences.
func TestNilArgumentsAreOptionErrors(t *testing.T) {
	l := nn.NewLinear(2, 2, true)
	defer nn.Free(l)
	for _, tc := range []struct {
		name string
		fn   func() error
	}{
		{"FindBatchSize try", func() error { _, err := memplan.FindBatchSize(torch.CPU, 4, nil); return err }},
		{"EstimateMemory module", func() error {
			_, err := memplan.EstimateMemory(nil, memplan.EstimateOptions{Batch: 4, Step: func(int) error { return nil }})
			return err
		}},
		{"NewSnapshot optimizer", func() error { _, err := memplan.NewSnapshot(l, []nn.Optimizer{nil}, nil); return err }},
		{"NewSnapshot scaler", func() error { _, err := memplan.NewSnapshot(l, nil, []*amp.GradScaler{nil}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tc.fn() })
			var oe *memplan.OptionError
			require.True(t, errors.As(err, &oe), "%v", err)
		})
	}
}

// A trial that panics with *torch.Error (tensor math out of memory under
// the cap) fails as if it had returned the error: the search goes on and
// finds the size, where the panic escaped FindBatchSize.
func TestFindBatchSizeTrialPanics(t *testing.T) {
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, 1<<20))
	defer torch.SetMemoryLimit(torch.CPU, 0)
	var res memplan.FindResult
	var err error
	require.NotPanics(t, func() {
		res, err = memplan.FindBatchSize(torch.CPU, 1<<12, func(n int) error {
			torch.Tidy(func() { torch.Zeros([]int64{int64(n), 1024}) }) // 4 KiB a sample
			return nil
		})
	})
	require.NoError(t, err)
	require.Equal(t, 256, res.MicroBatch) // 256 × 4 KiB is the 1 MiB cap
	failed := 0
	for _, tr := range res.Trials {
		if !tr.Fits {
			failed++
			require.ErrorIs(t, tr.Err, torch.ErrOutOfMemory)
		}
	}
	require.Positive(t, failed)

	// Other *torch.Error panics stop the search with the error.
	res, err = memplan.FindBatchSize(torch.CPU, 8, func(n int) error {
		torch.Tidy(func() { torch.Ones([]int64{2, 3}).Matmul(torch.Ones([]int64{4, 5})) })
		return nil
	})
	var te *torch.Error
	require.True(t, errors.As(err, &te), "%v", err)
	require.Zero(t, res.MicroBatch)
}
