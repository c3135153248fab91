package torch

import (
	"fmt"
	"io"
	"time"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// CallStat is how often an operator (or another call into libtorch, in
// parentheses: "(free)", "(tensor info)", "(backward)") was called from Go
// while counting, and the time spent in it as Go sees it (the cgo crossing
// included; "(backward)" holds the whole backward pass, whose ops run in
// C++).
type CallStat struct {
	Name  string
	Calls int64
	Time  time.Duration
}

// CountCalls runs fn and returns the calls it made into libtorch, most
// frequent first. Counting covers every goroutine while fn runs (it is
// for measurement: run nothing else meanwhile). Off, counting costs one
// atomic load per call.
func CountCalls(fn func()) []CallStat {
	capi.CountCalls(true)
	func() {
		defer capi.CountCalls(false)
		fn()
	}()
	var out []CallStat
	for _, s := range capi.Counts() {
		out = append(out, CallStat(s))
	}
	return out
}

// WriteCallStats prints stats as a table: calls, total and mean time.
func WriteCallStats(w io.Writer, stats []CallStat) {
	var calls int64
	var total time.Duration
	for _, s := range stats {
		calls += s.Calls
		total += s.Time
	}
	fmt.Fprintf(w, "%-46s %8s %12s %10s\n", "call", "count", "time", "mean")
	for _, s := range stats {
		fmt.Fprintf(w, "%-46s %8d %12v %10v\n", s.Name, s.Calls, s.Time.Round(time.Microsecond), (s.Time / time.Duration(max(s.Calls, 1))).Round(10*time.Nanosecond))
	}
	fmt.Fprintf(w, "%-46s %8d %12v\n", "all", calls, total.Round(time.Microsecond))
}

// hostTransferCalls are the calls that move a tensor's values between Go
// memory and libtorch: reading a value (Item, the dispatcher's
// _local_scalar_dense), copying elements out (ToSlice and what builds on
// it), copying a Go slice in (FromSlice).
var hostTransferCalls = map[string]bool{"aten::item": true, "aten::_local_scalar_dense": true, "(copy out)": true, "(from data)": true}

// HostTransfers returns the calls of stats (from CountCalls) that move
// values between Go memory and tensors. With the tensors on a CUDA device
// each one waits for the device: a read waits for every kernel queued
// before it, and a slice copied in is a blocking host-to-device copy, which
// libtorch follows with a stream synchronisation. None may happen inside a
// captured CUDA graph. On the CPU they cost little, so counting them there
// shows on any machine which steps would stall a GPU.
func HostTransfers(stats []CallStat) []CallStat {
	var out []CallStat
	for _, s := range stats {
		if hostTransferCalls[s.Name] {
			out = append(out, s)
		}
	}
	return out
}
