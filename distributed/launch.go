package distributed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LaunchConfig is what Launch starts: NProc copies of Command on this
// machine, node NodeRank of NNodes, each with torchrun's environment.
type LaunchConfig struct {
	NProc    int // ranks on this machine
	NNodes   int // machines (0: 1)
	NodeRank int // this machine's place, 0 … NNodes−1; node 0 hosts the store
	// MasterAddr and MasterPort: where node 0's launcher serves the
	// store. MasterAddr must be an address of node 0 (the store binds to
	// it alone; loopback by default). Port 0 picks a free port (one node
	// only).
	MasterAddr string
	MasterPort int
	Command    []string // the program and its arguments
	Env        []string // the environment the ranks inherit (nil: os.Environ())
	// Stdout and Stderr receive the ranks' output (nil: the launcher's).
	Stdout, Stderr io.Writer
	// Grace is how long the other ranks get, after one failed or the
	// context was cancelled, between SIGTERM (a train command saves a
	// checkpoint and stops) and SIGKILL (0: LaunchGrace).
	Grace time.Duration
	// MaxRestarts is how many times the ranks are all started again after
	// one failed (one node only). Each attempt has its own keys in the
	// store and TORCHELASTIC_RESTART_COUNT set to its number, from which a
	// train command with a --checkpoint-dir resumes from the last
	// checkpoint written there (recipes.Prepare).
	MaxRestarts int
	// Logf reports restarts (nil: none).
	Logf func(format string, args ...any)
}

// LaunchGrace is LaunchConfig.Grace's default.
const LaunchGrace = 30 * time.Second

// MaxNProc is the most ranks Launch starts on one machine. A rank is a
// whole training process (its model, its optimizer, a socket to every
// other rank): the largest hosts run one per GPU, or one per core on a
// CPU, a few hundred at most, so past 1024 (the bound on the recipes'
// --workers too) the count is a typo that would fork without end.
const MaxNProc = 1024

// RankError is a rank that failed: it exited with Status (or was killed
// by a signal, Status −1). A launcher exits with the status of the first
// rank that failed.
type RankError struct {
	Rank   int
	Status int
	Err    error
	// Msg is the error the rank wrote to its ErrorFileEnv file (a
	// torchfit command does, instead of printing it): "" when none.
	Msg string
}

func (e *RankError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%s (rank %d failed, %v; the other ranks were stopped)", e.Msg, e.Rank, e.Err)
	}
	return fmt.Sprintf("distributed: launch: rank %d failed: %v (the other ranks were stopped)", e.Rank, e.Err)
}

// ErrorFileEnv names the file Launch gives each rank for its final error:
// a rank that writes its one-line error there rather than printing it
// has it printed once, by the launcher, with its rank — not once per rank
// that failed the same way and again by the launcher.
const ErrorFileEnv = "TORCHFIT_ERROR_FILE"

func (e *RankError) Unwrap() error { return e.Err }

// Launch starts c's ranks as torchrun does (TORCHELASTIC_USE_AGENT_STORE:
// node 0's launcher hosts the store, bound to MasterAddr; every rank is a
// client), waits for them, and returns nil when all exited with status 0.
// When one fails the others get SIGTERM, then SIGKILL after the grace
// period; with restarts left all are started again, else Launch returns a
// *RankError for the first that failed. A cancelled ctx (the launcher's
// SIGINT) stops the ranks the same way, and for good.
func Launch(ctx context.Context, c LaunchConfig) error {
	if c.NNodes == 0 {
		c.NNodes = 1
	}
	if c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	if c.Grace == 0 {
		c.Grace = LaunchGrace
	}
	switch {
	case c.NProc < 1:
		return usagef("launch: --nproc %d: want at least 1", c.NProc)
	case c.NProc > MaxNProc:
		return usagef("launch: --nproc %d: want at most %d ranks on one machine", c.NProc, MaxNProc)
	case c.NNodes < 1:
		return usagef("launch: --nnodes %d: want at least 1", c.NNodes)
	case c.NodeRank < 0 || c.NodeRank >= c.NNodes:
		return usagef("launch: --node-rank %d: want 0 to %d (--nnodes %d)", c.NodeRank, c.NNodes-1, c.NNodes)
	case c.MasterPort < 0 || c.MasterPort > 65535:
		return usagef("launch: --master-port %d is not a port", c.MasterPort)
	case c.MasterPort == 0 && c.NNodes > 1:
		return usagef("launch: several nodes need a --master-port they all know")
	case len(c.Command) == 0:
		return usagef("launch: no command to run")
	case c.Grace < 0:
		return usagef("launch: grace period %v: want 0 (the default) or more", c.Grace)
	case c.MaxRestarts < 0:
		return usagef("launch: --max-restarts %d: want 0 or more", c.MaxRestarts)
	case c.MaxRestarts > 0 && c.NNodes > 1:
		return usagef("launch: --max-restarts restarts this machine's ranks only: use it with one node")
	}
	if c.NodeRank == 0 {
		srv, err := ListenStore(net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort)))
		if err != nil {
			return usagef("launch: serving the store on %s:%d: %v (--master-addr must be an address of this machine, the port free)",
				c.MasterAddr, c.MasterPort, err)
		}
		defer srv.Close()
		c.MasterPort = srv.Port()
	}
	prog, err := exec.LookPath(c.Command[0])
	if err != nil {
		return usagef("launch: %v", err)
	}
	errDir, err := os.MkdirTemp("", "torchfit-launch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(errDir)
	for attempt := 0; ; attempt++ {
		rerr, cancelled, started := c.attempt(ctx, prog, attempt, errDir)
		if cancelled && started < c.NProc {
			// Before a rank failing of our SIGTERM: the signal is the news.
			return startCancelled(ctx, started, c.NProc)
		}
		if rerr == nil || cancelled || attempt >= c.MaxRestarts {
			if rerr != nil {
				return rerr
			}
			return nil
		}
		if c.Logf != nil {
			c.Logf("%v; restarting every rank (restart %d of %d)", rerr, attempt+1, c.MaxRestarts)
		}
	}
}

// attempt runs the ranks once; cancelled is whether ctx stopped them,
// and started how many ranks it started before.
func (c LaunchConfig) attempt(ctx context.Context, prog string, attempt int, errDir string) (first *RankError, cancelled bool, started int) {
	env := c.Env
	if env == nil {
		env = os.Environ()
	}
	stdout, stderr := c.Stdout, c.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	world := c.NProc * c.NNodes
	cmds := make([]*exec.Cmd, c.NProc)
	for l := range cmds {
		e := Env{Rank: c.NodeRank*c.NProc + l, World: world, LocalRank: l, LocalWorld: c.NProc,
			MasterAddr: c.MasterAddr, MasterPort: c.MasterPort, AgentStore: true, Attempt: attempt}
		cmd := exec.Command(prog, c.Command[1:]...)
		cmd.Env = append(append(append([]string{}, env...), e.Vars()...), "GROUP_RANK="+strconv.Itoa(c.NodeRank),
			ErrorFileEnv+"="+errorFile(errDir, attempt, l))
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, stdout, stderr
		cmds[l] = cmd
	}
	type exit struct {
		local int
		err   error
	}
	exits := make(chan exit, len(cmds))
	startErr := false
	for l, cmd := range cmds {
		// A signal while starting (SIGINT, timeout's SIGTERM) starts no
		// more ranks; the wait below stops those already started.
		if ctx.Err() != nil {
			break
		}
		if err := cmd.Start(); err != nil {
			exits <- exit{l, err}
			startErr = true
			break
		}
		started++
		go func() { exits <- exit{l, cmd.Wait()} }()
	}
	done := make(chan struct{})
	defer close(done)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, cmd := range cmds {
				if cmd.Process != nil {
					cmd.Process.Signal(syscall.SIGTERM)
				}
			}
			go func() {
				select {
				case <-time.After(c.Grace):
				case <-done:
					return
				}
				for _, cmd := range cmds {
					if cmd.Process != nil {
						cmd.Process.Kill() // ErrProcessDone for those that exited
					}
				}
			}()
		})
	}
	waiting := started
	if startErr {
		waiting++
	}
	cancel := ctx.Done()
	if ctx.Err() != nil {
		cancelled, cancel = true, nil
		stop()
	}
	for waiting > 0 {
		select {
		case x := <-exits:
			waiting--
			if x.err != nil && first == nil {
				first = &RankError{Rank: c.NodeRank*c.NProc + x.local, Status: 1, Err: x.err}
				var ee *exec.ExitError
				if errors.As(x.err, &ee) {
					first.Status = ee.ExitCode()
				}
				if b, err := os.ReadFile(errorFile(errDir, attempt, x.local)); err == nil {
					first.Msg = strings.TrimSpace(string(b))
				}
				stop()
			}
		case <-cancel:
			cancelled, cancel = true, nil
			stop()
		}
	}
	return first, cancelled, started
}

// startCancelled is Launch's error when ctx was cancelled (the
// launcher's SIGINT or SIGTERM) before all ranks were started: it
// started no more and stopped those it had. It matches ctx.Err() and the
// cause of the cancel (os/signal's "terminated signal received").
func startCancelled(ctx context.Context, started, nproc int) error {
	const msg = "distributed: launch: stopped while starting ranks (%d of %d started, and stopped): %w"
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf(msg+" (%w)", started, nproc, ctx.Err(), cause)
	}
	return fmt.Errorf(msg, started, nproc, ctx.Err())
}

// errorFile is the ErrorFileEnv file of local rank l in an attempt.
func errorFile(dir string, attempt, l int) string {
	return filepath.Join(dir, fmt.Sprintf("attempt%d-rank%d", attempt, l))
}
