package distributed_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/distributed"
)

// Launch refuses a bad configuration with ErrUsage before starting
// anything, and reports the first rank that failed with its exit status
// after stopping the others.
func TestLaunch(t *testing.T) {
	sh := []string{"/bin/sh", "-c"}
	for _, c := range []struct {
		name   string
		cfg    distributed.LaunchConfig
		usage  bool
		status int // the *RankError's (0: none)
		rank   int
	}{
		{"no ranks", distributed.LaunchConfig{NProc: 0, Command: []string{"true"}}, true, 0, 0},
		// A typo of a few zeros forked without end before MaxNProc.
		{"too many ranks", distributed.LaunchConfig{NProc: distributed.MaxNProc + 1, Command: []string{"true"}}, true, 0, 0},
		{"absurd ranks", distributed.LaunchConfig{NProc: 100000, Command: []string{"true"}}, true, 0, 0},
		{"node out of range", distributed.LaunchConfig{NProc: 1, NNodes: 2, NodeRank: 2, MasterPort: 29999, Command: []string{"true"}}, true, 0, 0},
		{"nodes without a port", distributed.LaunchConfig{NProc: 1, NNodes: 2, Command: []string{"true"}}, true, 0, 0},
		{"restarts on several nodes", distributed.LaunchConfig{NProc: 1, NNodes: 2, NodeRank: 1, MasterPort: 29999, MaxRestarts: 1, Command: []string{"true"}}, true, 0, 0},
		{"no command", distributed.LaunchConfig{NProc: 1}, true, 0, 0},
		{"negative grace", distributed.LaunchConfig{NProc: 1, Grace: -time.Second, Command: []string{"true"}}, true, 0, 0},
		{"no such program", distributed.LaunchConfig{NProc: 1, Command: []string{"/nonexistent/torchfit"}}, true, 0, 0},
		{"foreign master address", distributed.LaunchConfig{NProc: 1, MasterAddr: "192.0.2.1", Command: []string{"true"}}, true, 0, 0},
		{"all succeed", distributed.LaunchConfig{NProc: 2, Command: append(sh, `test "$WORLD_SIZE" = 2 && test "$TORCHELASTIC_USE_AGENT_STORE" = True`)}, false, 0, 0},
		// Rank 1 fails at once; rank 0 would sleep for a minute unless stopped.
		{"a rank fails", distributed.LaunchConfig{NProc: 2, Grace: 2 * time.Second,
			Command: append(sh, `if [ "$RANK" = 1 ]; then exit 7; fi; exec sleep 60`)}, false, 7, 1},
		// Every attempt fails; the restart count reaches the ranks.
		{"restarts run out", distributed.LaunchConfig{NProc: 2, MaxRestarts: 2, Grace: 2 * time.Second,
			Command: append(sh, `if [ "$RANK" = 0 ]; then exit $((3 + TORCHELASTIC_RESTART_COUNT)); fi; exec sleep 60`)}, false, 5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log strings.Builder
			c.cfg.Logf = func(format string, args ...any) { log.WriteString(format + "\n") }
			c.cfg.Stdout, c.cfg.Stderr = os.Stderr, os.Stderr
			start := time.Now()
			err := distributed.Launch(context.Background(), c.cfg)
			require.Less(t, time.Since(start), 20*time.Second, "the others were stopped")
			if c.usage {
				require.ErrorIs(t, err, distributed.ErrUsage)
				return
			}
			if c.status == 0 {
				require.NoError(t, err)
				return
			}
			var re *distributed.RankError
			require.True(t, errors.As(err, &re), "%v", err)
			require.Equal(t, c.status, re.Status)
			require.Equal(t, c.rank, re.Rank)
			require.Equal(t, c.cfg.MaxRestarts, strings.Count(log.String(), "restarting"))
		})
	}
}

// A rank's error written to its ErrorFileEnv file is the *RankError's
// Msg: the launcher prints it once (issue 24, item 11: every rank and
// then the launcher printed it).
func TestLaunchRankErrorFile(t *testing.T) {
	var stderr strings.Builder
	err := distributed.Launch(context.Background(), distributed.LaunchConfig{NProc: 2, Grace: 2 * time.Second, Stdout: &stderr, Stderr: &stderr,
		Command: []string{"/bin/sh", "-c", `test -n "$` + distributed.ErrorFileEnv + `" && echo "--lr -1: must be a finite number > 0" > "$` + distributed.ErrorFileEnv + `"; exit 2`}})
	var re *distributed.RankError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 2, re.Status)
	require.Equal(t, "--lr -1: must be a finite number > 0", re.Msg)
	require.Empty(t, stderr.String(), "the ranks printed nothing")
	require.Equal(t, 1, strings.Count(err.Error(), "--lr -1"), err.Error())
}

// A launcher cancelled (its SIGINT or SIGTERM) before it has started its
// ranks starts no more of them and says so: the sweep's `timeout 60
// torchfit launch --nproc 100000` kept forking after timeout's SIGTERM.
func TestLaunchCancelledWhileStarting(t *testing.T) {
	for _, c := range []struct {
		name  string
		cause error // nil: a plain cancel
	}{
		{"cancelled", nil},
		{"a signal", errors.New("terminated signal received")},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(c.cause)
			start := time.Now()
			err := distributed.Launch(ctx, distributed.LaunchConfig{NProc: 8, Grace: time.Second, Stdout: os.Stderr, Stderr: os.Stderr,
				Command: []string{"/bin/sh", "-c", `touch "$0/rank$RANK"; exec sleep 60`, dir}})
			require.Less(t, time.Since(start), 10*time.Second)
			require.ErrorIs(t, err, context.Canceled)
			if c.cause != nil {
				require.ErrorIs(t, err, c.cause)
			}
			require.False(t, errors.Is(err, distributed.ErrUsage), "not the user's fault")
			require.Contains(t, err.Error(), "0 of 8 started")
			time.Sleep(200 * time.Millisecond) // a rank started by mistake would have written by now
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "no rank ran")
		})
	}
}
