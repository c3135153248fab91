package torch

import "github.com/torchfit/torchfit/torch/internal/malloc"

// MallocChoice is what torchfit did to glibc's allocator at start-up.
type MallocChoice struct {
	Tuned  bool   // torchfit raised glibc's mmap and trim thresholds
	Reason string // what it set, or why it left the allocator alone
}

// Malloc reports the allocator settings torchfit chose at start-up:
// glibc's mmap threshold raised to 32 MiB, its trim threshold to 128 MiB
// and its top pad to 16 MiB, so that a training step reuses the memory of
// the previous step's activations instead of mapping and unmapping it
// (see torch/internal/malloc). A user's MALLOC_* variables or
// glibc.malloc tunables win, and TORCHFIT_MALLOC=default opts out.
func Malloc() MallocChoice {
	return MallocChoice{Tuned: malloc.Startup.Applied, Reason: malloc.Startup.Reason}
}

// String is one line for logs.
func (m MallocChoice) String() string { return m.Reason }

// SetMallocTuned applies torchfit's allocator settings (true) or glibc's
// start-up values, held fixed (false). It is for benchmarks that compare
// them; it returns an error where the C library is not glibc.
func SetMallocTuned(tuned bool) error {
	s := malloc.Glibc
	if tuned {
		s = malloc.Tuned
	}
	if err := malloc.Set(s); err != nil {
		return &Error{Op: "SetMallocTuned", Msg: err.Error(), wrapped: err}
	}
	return nil
}
