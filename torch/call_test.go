package torch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// More list elements than the inline argument arena holds (32 words).
func TestStackManyTensors(t *testing.T) {
	ts := make([]*Tensor, 64)
	for i := range ts {
		ts[i] = FromSlice([]float32{float32(i)}, nil)
	}
	s := Stack(ts, 0)
	require.Equal(t, []int64{64, 1}, s.Shape())
	require.Equal(t, float32(63), ToSlice[float32](s)[63])
	s.Free()
	for _, x := range ts {
		x.Free()
	}
}
