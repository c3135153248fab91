package torch

import (
	"errors"
	"fmt"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// ErrOutOfMemory matches (errors.Is) every out-of-memory error: CUDA's
// caching allocator, the CPU allocator, or torchfit's CPU memory cap.
var ErrOutOfMemory = errors.New("out of memory")

// ErrFreed is wrapped by the error raised when a released tensor is used.
var ErrFreed = errors.New("tensor used after Free")

// Error is what tensor math panics with, and what Try returns.
type Error struct {
	Op  string // the operation, e.g. "aten::matmul" or "Backward"
	Msg string // libtorch's message, without its C++ backtrace
	OOM bool   // an out-of-memory error
	// Requested and Stats describe the allocation that failed, when known
	// (CPU memory cap, CUDA caching allocator).
	Requested int64
	Stats     *MemStats
	wrapped   error
}

func (e *Error) Error() string { return e.Op + ": " + e.Msg }

// Is makes errors.Is(err, ErrOutOfMemory) true for out-of-memory errors.
func (e *Error) Is(target error) bool { return target == ErrOutOfMemory && e.OOM }

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.wrapped }

// wrapErr turns a shim error into *Error; nil stays nil.
func wrapErr(op string, err error) *Error {
	if err == nil {
		return nil
	}
	var ce *capi.Err
	if errors.As(err, &ce) {
		e := &Error{Op: op, Msg: ce.Msg, OOM: ce.OOM}
		if e.OOM {
			e.fillOOM()
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
