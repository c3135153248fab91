package recipes

import (
	"github.com/torchfit/torchfit/dist"
)

// joinGroup joins the data-parallel process group when the command runs
// under a launcher (torchfit launch, torchrun: WORLD_SIZE is set): every
// rank trains its shard of each batch, rank 0 logs and writes checkpoints
// and the metrics file. Without a launcher it refuses --zero.
func (r *Run) joinGroup() error {
	g, ok, err := dist.InitFromEnv(dist.Options{})
	if err != nil {
		return err
	}
	if !ok {
		if r.ZeRO {
			return Usagef("--zero shards the optimizer state over data-parallel ranks: start the command with `torchfit launch --nproc N --` or torchrun")
		}
		return nil
	}
	r.Group = g
	r.cleanup = append(r.cleanup, func() error { g.Close(); return nil })
	return nil
}

// Rank is this process's rank in a data-parallel run (0 in one process).
func (r *Run) Rank() int {
	if r.Group == nil {
		return 0
	}
	return r.Group.Rank()
}
