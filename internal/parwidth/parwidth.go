package parwidth

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// Check sets libtorch's thread count (set; get reads it, for restoring it
// after) to 1, 2 and 3 in turn and requires width, a package's
// TF_PARALLEL_WIDTH probe, to report that many threads each time. It
// runs on one OS thread: OpenMP keeps the count per thread. It takes the
// setters as functions so that packages below torch can use it.
func Check(t *testing.T, set func(n int), get func() int, width func() int32) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer set(get())
	for _, n := range []int{1, 2, 3} {
		set(n)
		require.EqualValues(t, n, width(), "threads at::parallel_for ran on with %d set", n)
	}
}
