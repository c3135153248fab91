package freecheck

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// Case is one constructor: Build makes a module (and may return an error).
type Case struct {
	Name  string
	Build func() (nn.Module, error)
}

// Run builds and frees each case on the main libtorch thread and requires
// the CPU's allocated bytes to be back where they were, and the build to
// have allocated something.
func Run(t *testing.T, cases []Case) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			torch.CollectGarbage() // what earlier tests left, before the count starts
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			var before, built, after int64
			var err error
			torch.Main().Do(func() {
				before = torch.MustMemoryStats(torch.CPU).Allocated
				var m nn.Module
				if m, err = c.Build(); err != nil {
					return
				}
				built = torch.MustMemoryStats(torch.CPU).Allocated - before
				nn.Free(m)
				after = torch.MustMemoryStats(torch.CPU).Allocated - before
			})
			require.NoError(t, err)
			require.Positive(t, built, "the build allocated nothing")
			require.Zero(t, after, "bytes still allocated after nn.Free of a build that allocated %d", built)
		})
	}
}
