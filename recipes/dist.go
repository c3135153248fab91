package recipes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/distributed"
)

// joinGroup joins the data-parallel process group when the command runs
// under a launcher (torchfit launch, torchrun: WORLD_SIZE is set): every
// rank trains its shard of each batch, rank 0 logs and writes checkpoints
// and the metrics file. Without a launcher it refuses --zero, and
// --allreduce-after-backward and --bucket-mb given on the command line
// (NotHere: from a config file they are logged and unused). A rank the
// launcher started again after a failure (TORCHELASTIC_RESTART_COUNT > 0)
// with a --checkpoint-dir and no --resume resumes from the last checkpoint
// written there.
func (r *Run) joinGroup(c *cli.Context) error {
	env, _, err := distributed.ReadEnv(nil)
	if err != nil {
		return err
	}
	g, ok, err := distributed.InitFromEnv(distributed.Options{})
	if err != nil {
		return err
	}
	if !ok {
		if r.ZeRO {
			return Usagef("--zero shards the optimizer state over data-parallel ranks: start the command with `torchfit launch --nproc N --` or torchrun")
		}
		const why = "sets the data-parallel gradient all-reduce, and this command runs in one process (start it with `torchfit launch --nproc N --` or torchrun)"
		if err := r.NotHere(c, "allreduce-after-backward", r.AllReduceAfterBackward, why); err != nil {
			return err
		}
		return r.NotHere(c, "bucket-mb", true, why)
	}
	r.Group = g
	r.cleanup = append(r.cleanup, func() error { g.Close(); return nil })
	if env.Attempt > 0 && r.Resume == "" && r.CheckpointDir != "" {
		last, err := lastCheckpoint(r.CheckpointDir)
		if err != nil {
			return err
		}
		if last != "" {
			r.Resume = last
			if g.Rank() == 0 {
				r.Logf("restart %d: resuming from %s, the last checkpoint in %s", env.Attempt, last, r.CheckpointDir)
			}
		}
	}
	return nil
}

// lastCheckpoint returns the checkpoint (checkpoint_*.pt) last written in
// dir ("" when there is none).
func lastCheckpoint(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var last string
	var newest int64
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, "checkpoint_") || !strings.HasSuffix(name, ".pt") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed since (pruned)
		}
		if t := info.ModTime().UnixNano(); last == "" || t > newest {
			last, newest = filepath.Join(dir, name), t
		}
	}
	return last, nil
}

// Rank is this process's rank in a data-parallel run (0 in one process).
func (r *Run) Rank() int {
	if r.Group == nil {
		return 0
	}
	return r.Group.Rank()
}

// oneProcess refuses data parallelism for a recipe that trains in one
// process (why says why): under a launcher, or given --zero or
// --allreduce-after-backward, it returns a user error, so ranks never
// train independent copies into one checkpoint directory.
func (r *Run) oneProcess(recipe, why string) error {
	msg := fmt.Sprintf("the %s recipe trains in one process, not data parallel: %s", recipe, why)
	_, launched, err := distributed.ReadEnv(nil)
	if err != nil {
		return err
	}
	switch {
	case launched || r.Group != nil:
		return Usagef("%s; run `torchfit %s` without torchfit launch or torchrun", msg, recipe)
	case r.ZeRO:
		return &ConfigError{Field: "zero", Value: true, Reason: msg}
	case r.AllReduceAfterBackward:
		return &ConfigError{Field: "allreduce-after-backward", Value: true, Reason: msg}
	}
	return nil
}
