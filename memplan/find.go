package memplan

import (
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/torchfit/torchfit/torch"
)

// Trial is one micro-batch size tried by FindBatchSize.
type Trial struct {
	MicroBatch int
	Fits       bool
	Peak       int64 // peak bytes allocated during the trial (above what was allocated before it)
	Err        error // the out-of-memory error when it did not fit
}

// FindResult is FindBatchSize's answer.
type FindResult struct {
	MicroBatch int     // the largest size that fit (0: none did)
	Trials     []Trial // in the order tried
}

// Table prints the trials like the seeds' test_memory_config.
func (r FindResult) Table(w io.Writer) {
	ts := append([]Trial(nil), r.Trials...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].MicroBatch < ts[j].MicroBatch })
	fmt.Fprintf(w, "%-12s %-6s %14s\n", "micro-batch", "fits", "peak memory")
	for _, t := range ts {
		fits, peak := "yes", torch.FormatBytes(t.Peak)
		if !t.Fits {
			fits, peak = "OOM", "-"
		}
		fmt.Fprintf(w, "%-12d %-6s %14s\n", t.MicroBatch, fits, peak)
	}
	fmt.Fprintf(w, "largest micro-batch that fits: %d\n", r.MicroBatch)
}

// search returns the largest n in [1, max] for which fits(n) is true,
// assuming fits is monotone (true up to some n, false above): it doubles
// n from 1 until fits is false or max is reached, then bisects between
// the last fit and the first failure. 0 when not even 1 fits. An error
// from fits stops the search.
func search(max int, fits func(n int) (bool, error)) (int, error) {
	lo, hi := 0, 0 // lo fits, hi fails (0: unknown)
	for n := 1; ; n *= 2 {
		if n > max {
			n = max
		}
		ok, err := fits(n)
		if err != nil {
			return lo, err
		}
		if !ok {
			hi = n
			break
		}
		lo = n
		if n == max {
			break
		}
	}
	for hi > 0 && hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, err := fits(mid)
		if err != nil {
			return lo, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// FindBatchSize finds the largest n in [1, max] for which try(n) succeeds:
// it doubles n from 1 until try fails with torch.ErrOutOfMemory (or max is
// reached), then bisects between the last fit and the first failure. Errors
// other than out-of-memory stop the search. After each trial the device's
// cache is emptied, so nothing a trial allocated stays behind.
//
// try runs one training step at micro-batch n under the memory the device
// really has (or a cap set with torch.SetMemoryLimit), and must leave the
// model and optimizer as it found them (DryRun does both). A *torch.Error
// it panics with counts as the error it returns. The size found
// leaves no headroom: to keep some, as Lightning's finder learnt to (its
// users ran out of memory after it found a size), cap the device below its
// budget during the search, or use Plan, which keeps a margin.
func FindBatchSize(device torch.Device, max int, try func(n int) error) (FindResult, error) {
	var res FindResult
	if max < 1 {
		return res, optErr("FindBatchSize", "max", "%d (want >= 1)", max)
	}
	if try == nil {
		return res, optErr("FindBatchSize", "try", "nil")
	}
	attempt := func(n int) (bool, error) {
		if _, err := torch.EmptyCache(); err != nil {
			return false, err
		}
		before, err := torch.MemoryStats(device)
		if err != nil {
			return false, err
		}
		if err := torch.ResetPeakMemory(device); err != nil {
			return false, err
		}
		// A trial that panics with *torch.Error (tensor math running out
		// of memory, say) failed with that error, as if it had returned it.
		if perr := torch.Try(func() { err = try(n) }); perr != nil {
			err = perr
		}
		after, serr := torch.MemoryStats(device)
		if serr != nil {
			return false, serr
		}
		if _, eerr := torch.EmptyCache(); eerr != nil && err == nil {
			err = eerr
		}
		tr := Trial{MicroBatch: n, Fits: err == nil, Peak: after.PeakAllocated - before.Allocated}
		if err != nil {
			if !errors.Is(err, torch.ErrOutOfMemory) {
				return false, err
			}
			tr.Err = err
		}
		res.Trials = append(res.Trials, tr)
		return tr.Fits, nil
	}
	n, err := search(max, attempt)
	if err != nil {
		return res, err
	}
	res.MicroBatch = n
	return res, nil
}
