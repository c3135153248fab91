package torch

import (
	"fmt"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// OneDNNCacheCapacity returns the capacity of oneDNN's primitive cache, the
// compiled kernels libtorch's CPU backend keeps per distinct shape (-1 when
// this libtorch exposes no oneDNN API). Unless ONEDNN_PRIMITIVE_CACHE_CAPACITY
// is set, torchfit keeps it at oneDNN's 1024, or at ideep's
// LRU_CACHE_CAPACITY when that is lower (see Thread for why it must not
// exceed it).
func OneDNNCacheCapacity() int {
	n, err := capi.OneDNNCacheCapacity(-1)
	if err != nil {
		return -1
	}
	return n
}

// SetOneDNNCacheCapacity sets oneDNN's primitive cache capacity (0 turns
// the cache off) and returns the previous one.
func SetOneDNNCacheCapacity(n int) (prev int, err error) {
	if n < 0 {
		return 0, &Error{Op: "SetOneDNNCacheCapacity", Msg: "capacity must be >= 0"}
	}
	prev, err = capi.OneDNNCacheCapacity(n)
	if err != nil {
		return prev, wrapErr("SetOneDNNCacheCapacity", err)
	}
	return prev, nil
}

// OneDNNVersion returns the version of the oneDNN libtorch's CPU backend
// uses ("2.6.3" in Debian's libtorch 1.13), or "" when this libtorch hides
// it. Before 3.4 its brgemm kernels keep raw pointers into the primitive
// descriptor they came from (see Thread).
func OneDNNVersion() string {
	a, b, c := capi.OneDNNVersion()
	if a < 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", a, b, c)
}

// ThreadProbe starts a new OS thread and reports OpenMP's thread count
// there before and after the thread's first torchfit call (-1 when libtorch
// has no OpenMP). The shim gives every thread libtorch's count (NumThreads)
// before it computes anything; this shows it did.
func ThreadProbe() (before, after int, err error) {
	before, after, err = capi.ThreadProbe()
	if err != nil {
		return before, after, wrapErr("ThreadProbe", err)
	}
	return before, after, nil
}

// Fault is a C++ exception InjectFault can throw inside an op call.
type Fault int

// Faults.
const (
	FaultBadAlloc          Fault = 1 // std::bad_alloc, no size: a backend fault while the host has memory, else out of memory
	FaultBadArrayNewLength Fault = 2 // std::bad_array_new_length: a backend fault
	FaultBrokenPromise     Fault = 3 // std::future_error: a backend fault
	FaultLibtorchError     Fault = 4 // a c10::Error: an ordinary libtorch error
)

// InjectFault makes the n-th op call from now (on any goroutine) throw f
// inside the shim, where libtorch's own exceptions are caught: it drives the
// error paths of a backend fault through the real classification, for
// tests. n = 0 disarms it.
func InjectFault(f Fault, n int) {
	check("InjectFault", capi.InjectFault(int(f), int64(n)))
}

// setExhaustionProbe sets the bytes a std::bad_alloc's classification tries
// to allocate — out of memory when it cannot, a backend fault when it can
// (256 MiB) — and returns the previous value; n <= 0 changes nothing. Tests
// set one no host can give, to take the out-of-memory branch without
// exhausting memory.
func setExhaustionProbe(n int64) int64 {
	prev, err := capi.ExhaustionProbe(n)
	check("setExhaustionProbe", err)
	return prev
}
