package torch

import (
	"errors"
	"fmt"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// ErrOutOfMemory matches (errors.Is) every out-of-memory error: CUDA's
// caching allocator, the CPU allocator, torchfit's CPU memory cap, or a
// std::bad_alloc while the host has no memory left (a further 256 MiB
// cannot be allocated either: an address-space cap, strict overcommit).
var ErrOutOfMemory = errors.New("out of memory")

// ErrFreed is wrapped by the error raised when a released tensor is used.
var ErrFreed = errors.New("tensor used after Free")

// ErrBackend matches (errors.Is) a fault below libtorch's own error
// handling: a C++ std::bad_alloc that no allocator reported (no requested
// size, nothing refused by torchfit's CPU counter or CUDA's allocator)
// while the host still has memory to give, a std::bad_array_new_length, or
// a std::future_error. libtorch 1.13's oneDNN 2.6 throws these when creating a
// bf16 matmul primitive fails, and afterwards its primitive cache holds a
// broken entry. It is not out of memory: a smaller batch does not help, and
// the process is not safe to go on training. Training loops stop on it.
var ErrBackend = errors.New("libtorch backend fault")

// maxPlausibleRequest bounds what an out-of-memory error may ask for: a
// request for more than this (256 TiB) is a computed size gone wrong (a
// corrupt shape, an absurd configuration), not memory running out.
const maxPlausibleRequest = 1 << 48

// Error is what tensor math panics with, and what Try returns.
type Error struct {
	Op  string // the operation, e.g. "aten::matmul" or "Backward"
	Msg string // libtorch's message, without its C++ backtrace
	OOM bool   // an out-of-memory error
	// Backend marks a backend fault (see ErrBackend).
	Backend bool
	// NoCUDA marks a CUDA device asked for where there is none (ErrNoCUDA).
	NoCUDA bool
	// Device, Requested and Stats describe the allocation that failed,
	// when known (CPU memory cap, CUDA caching allocator): Stats are the
	// allocator's of that device.
	Device    Device
	Requested int64
	Stats     *MemStats
	wrapped   error
}

func (e *Error) Error() string {
	if e.Backend {
		return e.Op + ": " + e.Msg + " — a fault inside libtorch's CPU backend (oneDNN), not out of memory; " +
			"the process is unsafe to go on (see docs/bf16-onednn.md)"
	}
	return e.Op + ": " + e.Msg
}

// Is makes errors.Is(err, ErrOutOfMemory) true for out-of-memory errors and
// errors.Is(err, ErrBackend) for backend faults, errors.Is(err, ErrNoCUDA)
// for a CUDA device that is not there.
func (e *Error) Is(target error) bool {
	return (target == ErrOutOfMemory && e.OOM) || (target == ErrBackend && e.Backend) || (target == ErrNoCUDA && e.NoCUDA)
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.wrapped }

// wrapErr turns a shim error into *Error; nil stays nil.
func wrapErr(op string, err error) *Error {
	if err == nil {
		return nil
	}
	var ce *capi.Err
	if errors.As(err, &ce) {
		e := &Error{Op: op, Msg: ce.Msg, OOM: ce.OOM, Backend: ce.Backend}
		switch {
		case ce.Host:
			// The host is out of memory; the size that failed first is
			// not known (not another request's, left in the stats).
			e.Device = CPU
			if s, err := MemoryStats(CPU); err == nil {
				e.Stats = &s
			}
		case e.OOM:
			e.fillOOM()
			if e.Requested > maxPlausibleRequest {
				e.OOM = false // an absurd size, not memory running out
			}
		}
		return e
	}
	return &Error{Op: op, Msg: err.Error(), wrapped: err}
}

// check panics with *Error when err is not nil.
func check(op string, err error) {
	if err != nil {
		panic(wrapErr(op, err))
	}
}

func throwf(op, format string, args ...any) {
	panic(&Error{Op: op, Msg: fmt.Sprintf(format, args...)})
}

// Try runs fn and returns the *Error it panicked with as an error (nil when it
// returned normally). Other panics propagate. Use it where a caller wants an
// error rather than a panic: per-step boundaries such as training loops.
func Try(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*Error)
			if !ok {
				panic(r)
			}
			err = e
		}
	}()
	fn()
	return nil
}
