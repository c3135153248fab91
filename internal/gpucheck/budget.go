package gpucheck

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// A lease of a GPU machine is short (one command of about nine minutes,
// build included), and a check killed at its timeout reports nothing of
// what it had measured. With a deadline (Env.Deadline, `make gpu-check
// GPUBUDGET=seconds`), RunAll starts no check with less than minStart
// left and gives each child at most the time that is left; a check that
// loops over twins, recipes or tables (budget) starts no item that the
// longest item so far says will not fit, and reports what it left out.
// The report then says which checks and items did not run, instead of
// the lease's kill leaving a check's figures unwritten. With or without
// a deadline, a child's own deadline is its timeout less a margin, so a
// looping check also reports what it measured before its own timeout.

// minStart is the least time left for RunAll to start a check.
const minStart = 20 * time.Second

// margin is kept back from a child's deadline for it to finish its
// report after its last item.
const margin = 5 * time.Second

// deadlineVar passes a child its deadline (RFC 3339, nanoseconds).
const deadlineVar = "TORCHFIT_GPUCHECK_DEADLINE"

// ChildDeadline is the deadline the parent gave this child (zero: none);
// the child side of main puts it in Env.Deadline.
func ChildDeadline() (time.Time, error) {
	s := os.Getenv(deadlineVar)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("gpucheck: %s=%q: %w", deadlineVar, s, err)
	}
	return t, nil
}

// notStarted is the result of a check RunAll did not start for lack of time.
func notStarted(c *Check, left time.Duration) Result {
	return Result{Name: c.Name, Status: Skip, Cmd: "make gpu-check GPUCHECK=" + c.Name,
		Summary: fmt.Sprintf("not started: %.0f s of the time budget left (GPUBUDGET)", max(0, left.Seconds()))}
}

// budget decides, item by item, whether a check's next item fits before
// its deadline, taking the longest item so far as the next one's length.
type budget struct {
	deadline time.Time // zero: no deadline
	last     time.Time
	longest  time.Duration
	ran      int
	left     []string // items not started
}

func (e Env) budget() *budget { return &budget{deadline: e.Deadline} }

// next reports whether item may start. Once one item is left out, every
// later one is too, so what ran is always a prefix of the list.
func (b *budget) next(item string) bool {
	now := time.Now()
	if !b.last.IsZero() {
		b.longest = max(b.longest, now.Sub(b.last))
	}
	b.last = now
	if len(b.left) == 0 && (b.deadline.IsZero() || now.Add(b.longest).Before(b.deadline)) {
		b.ran++
		return true
	}
	b.left = append(b.left, item)
	return false
}

// report adds what was left out to r's summary and figures; a check
// that ran none of its items is skipped.
func (b *budget) report(r *Result) {
	if len(b.left) == 0 {
		return
	}
	if b.ran == 0 {
		r.Status = Skip
	}
	if r.Figures == nil {
		r.Figures = map[string]any{}
	}
	r.Figures["not run (time budget)"] = strings.Join(b.left, ", ")
	r.Summary += fmt.Sprintf(" [time budget: %d not run: %s]", len(b.left), strings.Join(b.left, ", "))
}
