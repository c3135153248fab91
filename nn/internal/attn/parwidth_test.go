package attn

import (
	"testing"

	"github.com/torchfit/torchfit/internal/parwidth"
	"github.com/torchfit/torchfit/torch"
)

// The native code's at::parallel_for runs on libtorch's threads: this
// package is compiled with -fopenmp (see package parwidth).
func TestParallelForUsesTheThreads(t *testing.T) {
	parwidth.Check(t, torch.SetNumThreads, torch.NumThreads, parallelWidth)
}
