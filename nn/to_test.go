package nn_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// To releases what it does not keep at once, not when Go's garbage
// collector gets to it: after To and Free, no tensor of the module is
// alive and its bytes are back (the same device and dtype, and a
// conversion).
func TestToLeavesNothingForTheGC(t *testing.T) {
	torch.CollectGarbage()
	for _, dt := range []torch.DType{torch.Float32, torch.Float64} {
		live, bytes := torch.LiveTensors(), torch.MustMemoryStats(torch.CPU).Allocated
		l := nn.NewLinear(64, 32, true)
		nn.To(l, torch.CPU, dt)
		require.Equal(t, live+2, torch.LiveTensors(), "%v: the two parameters, nothing else", dt)
		require.True(t, l.Weight.RequiresGrad())
		nn.Free(l)
		require.Equal(t, live, torch.LiveTensors(), dt)
		require.Equal(t, bytes, torch.MustMemoryStats(torch.CPU).Allocated, dt)
	}
}
