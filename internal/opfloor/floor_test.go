package opfloor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// TestPerCall: on the CPU both ops cost between 50 ns and 50 µs a call
// (one call of a dispatched operator on a 1-element tensor); bad counts
// and a CUDA device this machine lacks are refused.
func TestPerCall(t *testing.T) {
	for _, op := range []Op{Add, AddInPlace} {
		ns, err := PerCall(torch.CPU, op, 20000, 3)
		require.NoError(t, err)
		t.Logf("%v: %.0f ns", op, ns)
		require.Greater(t, ns, 50.0)
		require.Less(t, ns, 50000.0)
	}
	for _, c := range []struct{ n, runs int }{{0, 1}, {1, 0}, {-3, 2}} {
		_, err := PerCall(torch.CPU, Add, c.n, c.runs)
		require.ErrorIs(t, err, ErrArg)
	}
	if torch.CUDADeviceCount() == 0 {
		_, err := PerCall(torch.CUDA(0), Add, 10, 1)
		require.ErrorIs(t, err, ErrArg)
	} else {
		ns, err := PerCall(torch.CUDA(0), AddInPlace, 2000, 2)
		require.NoError(t, err)
		t.Logf("cuda x.add_(y): %.0f ns", ns)
		require.Greater(t, ns, 0.0)
	}
}

// BenchmarkFloorAdd and BenchmarkFloorAddInPlace are the floor of
// BenchmarkOpAdd and BenchmarkOpAddInPlace (package torch): b.N calls from
// one C++ loop at one thread (make bench-ops-floor).
func BenchmarkFloorAdd(b *testing.B)        { benchFloor(b, Add) }
func BenchmarkFloorAddInPlace(b *testing.B) { benchFloor(b, AddInPlace) }

func benchFloor(b *testing.B, op Op) {
	torch.Main().Do(func() { torch.SetNumThreads(1) })
	b.ResetTimer()
	if _, err := PerCall(torch.CPU, op, b.N, 1); err != nil {
		b.Fatal(err)
	}
}
