package fused

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/parwidth"
	"github.com/torchfit/torchfit/torch/internal/capi"
)

// The native code's at::parallel_for runs on libtorch's threads: this
// package is compiled with -fopenmp (see package parwidth).
func TestParallelForUsesTheThreads(t *testing.T) {
	set := func(n int) { require.NoError(t, capi.SetNumThreads(n)) }
	parwidth.Check(t, set, capi.NumThreads, parallelWidth)
}
