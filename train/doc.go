// Package accumulate is torchfit's memory-bounded training loop: the one
// place where every lever of the seeds meets.
//
// A Trainer takes effective batches (from a torch/data Loader, on the CPU)
// and splits each into micro-batches that are moved to the device one at a
// time. Each micro-batch runs forward (under autocast when asked) and
// backward inside its own tensor scope, so its activations are released
// before the next one starts; gradients accumulate; at the window's end the
// gradients are unscaled (float16), clipped, the optimizer and schedule
// step, and gradients are set to none.
//
// Micro-batch losses are weighted by their share of the window's samples
// (1/number of micro-batches when they are equal), so the accumulated
// gradient is the gradient of the whole effective batch's mean loss — also
// for a short last micro-batch or window.
//
// Out-of-memory adaptation: when a micro-batch's forward or backward raises
// torch.ErrOutOfMemory, the loop drops the window's gradients, empties the
// CUDA cache, halves the micro-batch and redoes the window from its start.
// The effective batch and the data seen do not change, so the parameters
// end up (within float rounding) where a run with the smaller micro-batch
// from the start would have put them. An OOM at micro-batch 1, or in the
// optimizer step (which a smaller micro-batch would not help), is returned.
//
// Divergence: a step whose loss is NaN or ±Inf skips its update (without a
// GradScaler; with one, the scaler skips it). After Config.MaxNonFinite
// such steps in a row (default 5) Step returns a *NonFiniteError
// (errors.Is(err, ErrNonFinite)). Fit writes no checkpoint while the loss
// is not finite and none whose parameters are NaN or ±Inf (it stops with
// the same error instead), so a diverged run leaves its last good
// checkpoint as the newest on disk.
//
// Only memory is out of memory: a backend fault (torch.ErrBackend, e.g.
// oneDNN's std::bad_alloc without a size) is returned at once, not retried.
//
// One thread: Step, Evaluate, FindBatchSize and Fit compute on the
// trainer's libtorch thread (Config.Thread, torch.Main() by default)
// whichever goroutine calls them, as Python runs its loop on one thread;
// torch.Thread says why libtorch 1.13 needs it.
//
// FindBatchSize searches for the largest micro-batch that fits; Fit adds
// epochs, evaluation, atomic checkpoints in PyTorch's format, bit-exact
// resume, signal handling, metrics (JSONL) and a progress bar.
//
// Runs and checkpoint directories: each Fit run has a run id, stored in
// every checkpoint it writes (run_id) and continued by a resumed run. A run
// prunes and overwrites only its own checkpoints (the files it wrote, and
// when resumed, its run's files in the same directory); before the first
// step it refuses, with a *ConflictError, to start where it could write a
// file of the same name as another run's (FitConfig.Overwrite allows it).
// Fit also removes, at start, the temporary files of checkpoint writes
// whose process was killed (.checkpoint_*.pt.tmp-PID-*: the PID is dead and
// the writer's flock is free), and nothing else.
package train
