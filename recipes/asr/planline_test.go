package asr

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// The plan's progress lines (issue 24, item 11): a candidate that ran out
// of memory says so, not "need 0 B"; one whose micro-batches do not make
// the effective batch (3 × 6 for 16) says it changes it.
func TestPlanLine(t *testing.T) {
	oom := fmt.Errorf("step: %w", &torch.Error{Op: "fake", Msg: "out of memory", OOM: true})
	row := func(n, a int, need int64, fits bool, err error) memplan.Row {
		return memplan.Row{Candidate: memplan.Candidate{MicroBatch: n, Accum: a, Precision: amp.FP32},
			Measurement: memplan.Measurement{Held: need / 2, Peak: need - need/2}, Fits: fits, Err: err}
	}
	for _, c := range []struct {
		name         string
		row          memplan.Row
		oom, changes bool
		need         int64 // shown when measured
	}{
		{"fits", row(4, 4, 3<<20, true, nil), false, false, 3 << 20},
		{"over", row(8, 2, 9<<20, false, nil), false, false, 9 << 20},
		{"out of memory", row(16, 1, 0, false, oom), true, false, 0},
		{"changes the batch", row(3, 6, 2<<20, true, nil), false, true, 2 << 20},
		{"out of memory, changes the batch", row(5, 4, 0, false, oom), true, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			line := planLine(c.row, 16)
			require.Equal(t, c.oom, strings.Contains(line, "out of memory"), line)
			require.NotContains(t, line, "0 B", line)
			if !c.oom {
				require.Contains(t, line, "need "+torch.FormatBytes(c.need), line)
			}
			require.Equal(t, c.changes, strings.Contains(line, "changes the effective batch 16"), line)
			require.Equal(t, !c.changes, c.row.Exact(16))
		})
	}
}

// The step time's line times the process's steps after its first, and
// names them as the step lines do: a run resumed at step 3 times 5–9.
func TestStepTimerRange(t *testing.T) {
	for _, tc := range []struct {
		name        string
		from, to    int
		first, last int
	}{
		{"from the start", 1, 7, 2, 7},
		{"resumed at step 3", 4, 9, 5, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tm stepTimer
			for s := tc.from; s <= tc.to; s++ {
				tm.observe(train.StepInfo{Step: s, Duration: time.Duration(s) * time.Millisecond})
			}
			var line string
			tm.log(func(f string, a ...any) { line = fmt.Sprintf(f, a...) }, 0)
			require.Contains(t, line, fmt.Sprintf("(steps %d–%d)", tc.first, tc.last))
			require.Equal(t, tc.last, tm.last)
			require.Equal(t, tc.to-tc.from, tm.n)
		})
	}
}
