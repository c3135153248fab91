package memplan

import (
	"errors"
	"fmt"
)

// OptionError is a bad option: a user's mistake (a CLI reports it in one
// line and exits 2), recognised with errors.As.
type OptionError struct {
	Func  string // EstimateMemory, Plan, ...
	Field string // the option's field name
	Msg   string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("memplan: %s: %s: %s", e.Func, e.Field, e.Msg)
}

func optErr(fn, field, format string, args ...any) error {
	return &OptionError{Func: fn, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ErrNoPlan is returned (wrapped) by Plan when no candidate fits the
// budget; the Result still holds the table of what was measured.
var ErrNoPlan = errors.New("memplan: no configuration fits the budget")

// ErrLeak is returned (wrapped) when the functions a dry run runs leave
// memory allocated after they return (a tensor kept with Keep, say): the
// measurement would be wrong.
var ErrLeak = errors.New("memory left allocated")
