package gpucheck

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// TestGrowPatternOnCPU runs expandable-segments' pattern on the CPU, whose
// allocator counts exactly: its largest iteration holds 8 tensors of
// 80 MiB, and it frees all it allocated (on CUDA only the reserved
// memory, with and without expandable segments, differs).
func TestGrowPatternOnCPU(t *testing.T) {
	before := torch.MustMemoryStats(torch.CPU).Allocated
	peak := growPattern(torch.CPU)
	require.Equal(t, int64(growTensors*(growIterations+4)*4*mib), peak)
	require.Equal(t, before, torch.MustMemoryStats(torch.CPU).Allocated)
}
