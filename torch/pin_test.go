package torch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPinMemory(t *testing.T) {
	x := FromSlice([]float32{1, 2, 3}, nil)
	defer x.Free()
	if !CUDAAvailable() {
		p, err := x.PinMemory()
		require.Error(t, err)
		require.Nil(t, p)
		require.Contains(t, err.Error(), "pinned memory needs CUDA")
		var te *Error
		require.ErrorAs(t, err, &te)
		require.False(t, x.IsPinned())
		return
	}
	require.False(t, x.IsPinned())
	p, err := x.PinMemory()
	require.NoError(t, err)
	defer p.Free()
	require.True(t, p.IsPinned())
	require.True(t, p.Equal(x))
	g := p.ToAsync(CUDA(0), Float32)
	defer g.Free()
	require.Equal(t, DeviceCUDA, g.Device().Type)
}
