package torch_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

func TestParseMemory(t *testing.T) {
	cases := []struct {
		in       string
		bytes    int64
		fraction float64
		err      string // a part of the message; "" for none
	}{
		{"6GiB", 6 << 30, 0, ""},
		{"6gib", 6 << 30, 0, ""},
		{"512MB", 512e6, 0, ""},
		{"1.5g", 3 << 29, 0, ""},
		{"800 MiB", 800 << 20, 0, ""},
		{" 2TB ", 2e12, 0, ""},
		{"1TiB", 1 << 40, 0, ""},
		{"1MiB", 1 << 20, 0, ""},
		{"1024KiB", 1 << 20, 0, ""},
		{"3m", 3 << 20, 0, ""},
		{"1t", 1 << 40, 0, ""},
		{"1048576B", 1 << 20, 0, ""},
		{"1073741824", 1 << 30, 0, ""},
		{"1048576", 1 << 20, 0, ""},
		{"2e9", 2e9, 0, ""},
		{"0.9", 0, 0.9, ""},
		{".5", 0, 0.5, ""},
		{"1.0", 0, 1, ""},
		{"1", 0, 1, ""},
		{"1e-3", 0, 0.001, ""},

		{"1.5", 0, 0, "a fraction must be in (0, 1]; for 1.5 GiB write 1.5GiB"},
		{"2.0", 0, 0, "a fraction must be in (0, 1]; for 2 GiB write 2GiB"},
		{"1024", 0, 0, "too small"},
		{"6", 0, 0, "for 6 GiB write 6GiB"},
		{"0.5b", 0, 0, "less than 1 MiB"},
		{"1KiB", 0, 0, "less than 1 MiB"},
		{"64KiB", 0, 0, "less than 1 MiB"},
		{"100k", 0, 0, "less than 1 MiB"},
		{"4096B", 0, 0, "less than 1 MiB"},
		{"1MB", 0, 0, "less than 1 MiB"},
		{"nan", 0, 0, "not a finite number"},
		{"NaN", 0, 0, "not a finite number"},
		{"inf", 0, 0, "not a finite number"},
		{"-Inf", 0, 0, "not a finite number"},
		{"infinity", 0, 0, "not a finite number"},
		{"nan GiB", 0, 0, "not a finite number"},
		{"1e30", 0, 0, "too large"},
		{"1e400", 0, 0, "too large"},
		{"5000000TiB", 0, 0, "too large"},
		{"4611686018427397904", 0, 0, "too large"},
		{"4611686018427387904", 1 << 62, 0, ""},
		{"-1", 0, 0, "negative"},
		{"-2GiB", 0, 0, "negative"},
		{"0", 0, 0, "zero"},
		{"0GiB", 0, 0, "zero"},
		{"0.0", 0, 0, "zero"},
		{"6 gigs", 0, 0, `unknown unit "gigs"`},
		{"6PB", 0, 0, `unknown unit "pb"`},
		{"lots", 0, 0, "not a number"},
		{"", 0, 0, "empty"},
		{"GiB", 0, 0, "not a number"},
		{"0x10", 0, 0, "bad memory size"},
		{"1_000_000_000", 0, 0, "bad memory size"},
		{"+5GiB", 0, 0, "decimal"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			b, f, err := torch.ParseMemory(c.in)
			if c.err != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), c.err)
				require.Contains(t, err.Error(), "bad memory size")
				require.NotContains(t, err.Error(), "\n")
				require.Zero(t, b)
				require.Zero(t, f)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.bytes, b)
			require.InDelta(t, c.fraction, f, 1e-12)
		})
	}
}

// The matrix products' forward runs on this thread and their backward on the
// autograd engine's device thread: cuBLAS keeps a workspace for each, counted
// in Allocated, until ClearBlasWorkspaces frees them all. Without a GPU (or
// without the cuda tag) there is nothing to clear.
func TestClearBlasWorkspaces(t *testing.T) {
	if !torch.CUDAAvailable() {
		cleared, err := torch.ClearBlasWorkspaces()
		require.NoError(t, err)
		require.False(t, cleared)
		return
	}
	dev := torch.CUDA(0)
	_, err := torch.ClearBlasWorkspaces()
	require.NoError(t, err)
	before, err := torch.MemoryStats(dev)
	require.NoError(t, err)
	torch.Tidy(func() {
		a := torch.Ones([]int64{64, 64}, torch.Float32, dev).SetRequiresGrad(true)
		a.Matmul(a).Sum().Backward()
	})
	require.NoError(t, torch.Synchronize(dev))
	used, err := torch.MemoryStats(dev)
	require.NoError(t, err)
	require.Greater(t, used.Allocated, before.Allocated, "cuBLAS made no workspace")
	cleared, err := torch.ClearBlasWorkspaces()
	require.NoError(t, err)
	require.True(t, cleared)
	after, err := torch.MemoryStats(dev)
	require.NoError(t, err)
	require.Equal(t, before.Allocated, after.Allocated)
}
