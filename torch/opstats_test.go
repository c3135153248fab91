package torch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// CountCalls counts each operator call once, names it, counts frees and
// stops counting when fn returns.
func TestCountCalls(t *testing.T) {
	a := Ones([]int64{3})
	defer a.Free()
	stats := CountCalls(func() {
		b := a.Add(a)
		c := b.Add(a)
		d := c.MulScalar(2)
		b.Free()
		c.Free()
		d.Free()
	})
	got := map[string]int64{}
	for _, s := range stats {
		got[s.Name] = s.Calls
		require.GreaterOrEqual(t, s.Time.Nanoseconds(), int64(0))
	}
	require.Equal(t, int64(2), got["aten::add.Tensor"], "%v", got)
	require.Equal(t, int64(1), got["aten::mul.Scalar"], "%v", got)
	require.Equal(t, int64(3), got["(free)"], "%v", got)
	for k := 1; k < len(stats); k++ {
		require.GreaterOrEqual(t, stats[k-1].Calls, stats[k].Calls, "most calls first")
	}
	// Off after fn: a later call leaves the counts as they were.
	e := a.Add(a)
	e.Free()
	for _, s := range capi.Counts() {
		if s.Name == "aten::add.Tensor" {
			require.Equal(t, int64(2), s.Calls)
		}
	}
	var b strings.Builder
	WriteCallStats(&b, stats)
	require.Contains(t, b.String(), "aten::add.Tensor")
	require.Contains(t, b.String(), "all")
}
