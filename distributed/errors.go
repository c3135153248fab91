package distributed

import (
	"errors"
	"fmt"
)

// Kind classifies an *Error.
type Kind int

// Kinds of distributed errors.
const (
	KindOther Kind = iota
	// KindTimeout: a collective, a store wait or the rendezvous did not
	// finish within the group's timeout (a rank stopped answering).
	KindTimeout
	// KindPeer: the connection to another rank failed — it died, or closed
	// its sockets.
	KindPeer
	// KindBroken: the group is unusable after an earlier failure (a
	// collective that failed or timed out leaves the ranks out of step).
	KindBroken
	// KindOutOfMemory: a buffer for the collective could not be allocated.
	KindOutOfMemory
)

// Sentinels matched with errors.Is.
var (
	// ErrTimeout matches errors of kind KindTimeout.
	ErrTimeout = errors.New("distributed: timed out")
	// ErrPeer matches errors of kind KindPeer.
	ErrPeer = errors.New("distributed: connection to a peer failed")
	// ErrBroken matches errors of kind KindBroken.
	ErrBroken = errors.New("distributed: process group broken by an earlier failure")
	// ErrUsage matches configuration errors: a bad environment (RANK,
	// WORLD_SIZE, MASTER_ADDR, MASTER_PORT), bad ranks or roots, wrong
	// tensor counts. A front end reports them as the user's (exit 2).
	ErrUsage = errors.New("distributed: invalid configuration")
)

// Error is what the package's operations return.
type Error struct {
	Op   string // the operation ("all-reduce", "rendezvous", ...)
	Kind Kind
	Msg  string
	Rank int // this process's rank (-1 when unknown)
	err  error
}

func (e *Error) Error() string {
	s := "distributed: " + e.Op + ": " + e.Msg
	if e.Rank >= 0 {
		s = fmt.Sprintf("distributed: rank %d: %s: %s", e.Rank, e.Op, e.Msg)
	}
	return s
}

// Is makes errors.Is match the sentinel of the error's kind.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrTimeout:
		return e.Kind == KindTimeout
	case ErrPeer:
		return e.Kind == KindPeer
	case ErrBroken:
		return e.Kind == KindBroken
	}
	return false
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.err }

// UsageError is a bad distributed configuration (environment, ranks).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return "distributed: " + e.Msg }

// Is matches ErrUsage.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

// UserError marks it as the user's (exit status 2 in the CLI).
func (*UsageError) UserError() {}

func usagef(format string, args ...any) error { return &UsageError{Msg: fmt.Sprintf(format, args...)} }
