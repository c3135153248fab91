package gpucheck

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBudgetNext: an item starts while the longest item so far fits
// before the deadline; once one is left out, every later one is too.
func TestBudgetNext(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name     string
		deadline time.Time
		longest  time.Duration // of the items before
		want     []bool        // for items a, b, c
	}{
		{"no deadline", time.Time{}, time.Hour, []bool{true, true, true}},
		{"deadline passed", now.Add(-time.Second), 0, []bool{false, false, false}},
		{"an hour left, items of a minute", now.Add(time.Hour), time.Minute, []bool{true, true, true}},
		{"a minute left, items of an hour", now.Add(time.Minute), time.Hour, []bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &budget{deadline: tt.deadline, longest: tt.longest}
			var got []bool
			for _, item := range []string{"a", "b", "c"} {
				got = append(got, b.next(item))
			}
			require.Equal(t, tt.want, got)
			r := Result{Status: Pass, Summary: "ran"}
			b.report(&r)
			if tt.want[0] {
				require.Equal(t, Result{Status: Pass, Summary: "ran"}, r)
				return
			}
			require.Equal(t, Skip, r.Status, "nothing ran")
			require.Equal(t, "a, b, c", r.Figures["not run (time budget)"])
			require.Contains(t, r.Summary, "[time budget: 3 not run: a, b, c]")
		})
	}
}

// TestBudgetLeavesOutTheRest: the first item runs, and when it took
// longer than the time left, the rest are left out; the check passes
// with what ran and says what did not.
func TestBudgetLeavesOutTheRest(t *testing.T) {
	b := &budget{deadline: time.Now().Add(time.Hour)}
	require.True(t, b.next("a"))
	b.last = b.last.Add(-2 * time.Hour) // "a" took two hours
	require.False(t, b.next("b"))
	require.False(t, b.next("c"))
	r := Result{Status: Pass, Summary: "a"}
	b.report(&r)
	require.Equal(t, Pass, r.Status)
	require.Equal(t, "b, c", r.Figures["not run (time budget)"])
}

// TestRunAllDeadline: with too little time left RunAll starts no child
// and reports each check as not started; a child is given its deadline
// (here a script that answers with the deadline it was given).
func TestRunAllDeadline(t *testing.T) {
	names := []string{"facts", "recipes"}
	var seen []string
	out, err := RunAll(context.Background(), Env{Self: "/nonexistent", Deadline: time.Now().Add(minStart / 2)}, names,
		func(r Result) { seen = append(seen, r.Name) })
	require.NoError(t, err)
	require.Equal(t, names, seen)
	for _, r := range out {
		require.Equal(t, Skip, r.Status)
		require.Contains(t, r.Summary, "not started")
		require.Equal(t, "make gpu-check GPUCHECK="+r.Name, r.Cmd)
	}

	self := filepath.Join(t.TempDir(), "child")
	script := "#!/bin/sh\necho 'GPUCHECK-RESULT {\"name\":\"facts\",\"status\":\"pass\",\"summary\":\"'\"$" + deadlineVar + "\"'\"}'\n"
	require.NoError(t, os.WriteFile(self, []byte(script), 0o755))
	deadline := time.Now().Add(time.Hour)
	out, err = RunAll(context.Background(), Env{Self: self, Deadline: deadline}, []string{"facts"}, nil)
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.Equal(t, Pass, out[0].Status, "%+v", out[0])
	got, err := time.Parse(time.RFC3339Nano, out[0].Summary)
	require.NoError(t, err)
	// facts' own timeout (2 min) is shorter than the hour left: the child
	// must end within it, less the margin to report.
	require.True(t, got.Before(time.Now().Add(2*time.Minute-margin)), "child deadline %s", got)
	require.True(t, got.Before(deadline))

	t.Setenv(deadlineVar, out[0].Summary)
	cd, err := ChildDeadline()
	require.NoError(t, err)
	require.True(t, cd.Equal(got))
	t.Setenv(deadlineVar, "tomorrow")
	_, err = ChildDeadline()
	require.Error(t, err)
}

// TestRecipesPastDeadline: a looping check whose deadline has passed runs
// none of its items and says it skipped them all.
func TestRecipesPastDeadline(t *testing.T) {
	r := recipesOn(Env{Work: t.TempDir(), Deadline: time.Now().Add(-time.Second)}, "cpu", recipeRuns)
	require.Equal(t, Skip, r.Status, "%s", r.Summary)
	require.Contains(t, r.Summary, "time budget")
	for _, rr := range recipeRuns {
		require.Contains(t, r.Figures["not run (time budget)"], rr.name)
	}
}
