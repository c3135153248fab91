package train

import (
	"errors"
	"fmt"

	"github.com/torchfit/torchfit/nn"
)

// Parallel makes training data parallel: each process (rank) trains on its
// shard of every batch (torch/data: Options.Shard) and the ranks' gradients
// are summed. Package distributed implements it over libtorch's c10d
// (dist.DataParallel); the core only calls these methods, the same number
// of times in the same order on every rank:
//
//   - StartWindow before a window's first forward (buffers are synced);
//   - SumFloats once, to add the window's counted items over the ranks:
//     each micro-batch's loss is weighted by its share of that global
//     count, so the summed gradient is the global batch's mean, also when
//     ranks hold different numbers of items;
//   - BeforeBackward before each micro-batch's backward, sync for the
//     window's last only (its backward reduces the gradients; the others
//     accumulate locally: PyTorch's no_sync);
//   - AfterBackward after the last backward (waits for the reduction);
//   - SumFloats again for the window's loss and samples, so every rank
//     reports — and decides on a non-finite loss — alike.
//
// Fit also agrees on stopping (an interrupted run stops at the same step on
// every rank) and lets rank 0 alone write checkpoints.
type Parallel interface {
	Rank() int
	World() int
	SumFloats(vals []float64) error
	StartWindow() error
	BeforeBackward(sync bool) error
	AfterBackward() error
}

// GatheredState is an optimizer whose state is split over the ranks
// (dist.ZeRO, ZeRO stage 1). Before a checkpoint every rank calls
// GatherState (a collective); until release is called, State returns the
// whole state on rank 0 — the same tensors an unsharded optimizer would
// save, so the checkpoint resumes with any number of ranks. LoadState takes
// such a whole state and keeps this rank's part.
type GatheredState interface {
	nn.Optimizer
	GatherState() (release func(), err error)
}

// ErrDesync reports that a data-parallel window failed after its gradient
// reduction had started: redoing it (out-of-memory adaptation) would put
// this rank's collectives out of step with the others', so the error is
// returned instead.
var ErrDesync = errors.New("train: data-parallel window failed during its gradient reduction (not retried)")

// agree returns whether any rank says yes (one all-reduce).
func agree(p Parallel, yes bool) (bool, error) {
	v := []float64{0}
	if yes {
		v[0] = 1
	}
	if err := p.SumFloats(v); err != nil {
		return false, err
	}
	return v[0] > 0, nil
}

// parallelString completes the trainer's first log line: the batch over
// all ranks.
func parallelString(p Parallel, effective int) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("; data parallel: rank %d of %d, global batch %d", p.Rank(), p.World(), effective*p.World())
}
