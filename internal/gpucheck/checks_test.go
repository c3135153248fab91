package gpucheck

import (
	"math"
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

// TestStepSeconds: cpu-offload's step time is the median of the steps
// after the first, from the metrics' samples and rate; lines without
// them (evaluations) do not count.
func TestStepSeconds(t *testing.T) {
	r := &run{metrics: []map[string]any{
		{"step": 1.0, "samples": 8.0, "samples_per_sec": 1.0}, // start-up: 8 s
		{"step": 1.0, "eval": map[string]any{"loss": 1.0}},
		{"step": 2.0, "samples": 8.0, "samples_per_sec": 4.0},
		{"step": 3.0, "samples": 8.0, "samples_per_sec": 2.0},
		{"step": 4.0, "samples": 8.0, "samples_per_sec": 8.0},
	}}
	s, n := r.stepSeconds()
	require.Equal(t, 2.0, s)
	require.Equal(t, 3, n)
	s, n = (&run{metrics: r.metrics[:2]}).stepSeconds()
	require.True(t, math.IsNaN(s))
	require.Zero(t, n)
}
