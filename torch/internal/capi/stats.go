package capi

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Counting what crosses the boundary: every operator call (by operator)
// and every other shim call (by name), with the time spent in it as Go
// sees it (cgo included). Off by default: the cost when off is one atomic
// load per call.
var statsOn atomic.Bool

type stat struct{ calls, nanos int64 }

var stats = struct {
	sync.Mutex
	names map[Op]string
	ops   map[Op]*stat
	other map[string]*stat
}{names: map[Op]string{}, ops: map[Op]*stat{}, other: map[string]*stat{}}

// Stat is one operator's (or shim call's) count and time.
type Stat struct {
	Name  string
	Calls int64
	Time  time.Duration
}

// CountCalls turns counting on (after clearing the counts) or off.
func CountCalls(on bool) {
	if on {
		stats.Lock()
		stats.ops = map[Op]*stat{}
		stats.other = map[string]*stat{}
		stats.Unlock()
	}
	statsOn.Store(on)
}

// Counts returns the counts, most calls first.
func Counts() []Stat {
	stats.Lock()
	defer stats.Unlock()
	var out []Stat
	for op, s := range stats.ops {
		out = append(out, Stat{Name: stats.names[op], Calls: s.calls, Time: time.Duration(s.nanos)})
	}
	for n, s := range stats.other {
		out = append(out, Stat{Name: n, Calls: s.calls, Time: time.Duration(s.nanos)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Calls != out[j].Calls {
			return out[i].Calls > out[j].Calls
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func nameOp(op Op, name string) {
	stats.Lock()
	stats.names[op] = name
	stats.Unlock()
}

func countOp(op Op, t0 time.Time) {
	d := time.Since(t0)
	stats.Lock()
	s := stats.ops[op]
	if s == nil {
		s = &stat{}
		stats.ops[op] = s
	}
	s.calls++
	s.nanos += int64(d)
	stats.Unlock()
}

func count(name string, t0 time.Time) {
	d := time.Since(t0)
	stats.Lock()
	s := stats.other[name]
	if s == nil {
		s = &stat{}
		stats.other[name] = s
	}
	s.calls++
	s.nanos += int64(d)
	stats.Unlock()
}
