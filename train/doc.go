// Package train is torchfit's training core: a few parts every recipe
// composes, and the single-model loop built from them.
//
// # The parts
//
// Engine runs windows: the micro-batches of one effective batch, each moved
// to the device alone, run forward under autocast for the precision and
// backward inside its own tensor scope, so its activations are released
// before the next one starts; gradients accumulate. Each micro-batch's loss
// is weighted by its share of the window's counted items (CountFunc: tokens,
// frames; samples by default), so the accumulated gradient is that of the
// whole window's mean — also with ragged, padded micro-batches. On
// torch.ErrOutOfMemory the window's gradients are dropped (Pass.Reset), the
// micro-batch is halved and the window redone at the same effective batch;
// only memory is out of memory (a torch.ErrBackend is returned at once).
//
// Engine.GradCache is the window for a loss that couples every sample of the
// batch (a contrastive loss): embeddings of every micro-batch without grad,
// the whole window's loss once (its own parameters, a learnable temperature,
// get their gradient once), then each micro-batch re-embedded with grad under
// the random generators' snapshot of its first pass and backpropagated with
// its slice of the cached gradient. Exact, at the memory of one
// micro-batch's activations plus the embeddings.
//
// A window can leave its loss on the device instead of reading it
// (Pass.DeviceLoss, CachePass.DeviceLoss), and a grad-cache window whose
// embedding draws no random numbers can skip the snapshots
// (CachePass.NoRNG): then the window reads nothing on the host, as a step
// captured in a CUDA graph must (package torch/cudagraph; bench's
// capturable steps).
//
// Optim steps one optimizer in PyTorch's order: unscale → hooks (Hook: a
// point between backward and the step for distributed all-reduce, gradient
// statistics, offload) → clip → step; then Finish: schedule → gradients set
// to none → autocast cache cleared. A GradScaler (package amp) keeps state
// per optimizer: a GAN steps its discriminator's and generator's Optims and
// updates the one scaler once per iteration. Offload keeps an optimizer's
// state (and optionally float32 master weights) on the CPU.
//
// # The single-model loop
//
// Trainer is Engine + Optim + GradScaler for one model and one decomposable
// loss; Fit adds epochs, evaluation, atomic checkpoints (package ckpt) that
// a Run owns, bit-exact resume, and stopping on a cancelled context
// (SIGINT/SIGTERM through report.SignalContext) after saving.
//
// # Runs: checkpoints of any number of models
//
// A Run owns a training run's checkpoint files, as HF Accelerate's
// register_for_checkpointing and save_state do: parts registered by name
// (models, optimizers, schedules, scalers) go into every file it saves
// with the RNG state and the run's id; it prunes the oldest files of each
// Kind beyond KeepLast and overwrites only its own, refuses (Check) a
// directory where it would overwrite another run's, adopts the files of
// the run it resumes, and removes temporary files of killed writes. Fit is
// a Run with one model; a loop of several (a GAN's two networks, then a
// classifier) registers them on its own Run and saves at its own points.
//
// Divergence: a step whose loss is NaN or ±Inf skips its update (without a
// GradScaler; with one, the scaler skips it). After Config.MaxNonFinite
// such steps in a row (default 5) Step returns a *NonFiniteError
// (errors.Is(err, ErrNonFinite)). Fit writes no checkpoint while the loss
// is not finite and none whose parameters are NaN or ±Inf, so a diverged
// run leaves its last good checkpoint as the newest on disk.
//
// # Events, one thread
//
// Nothing here writes to the terminal: the loop emits events (Message,
// StepEvent, MemoryEvent, OOMEvent, EvalEvent, CheckpointEvent, EpochEvent,
// SkipEvent) to a Sink; package report renders them as log lines, a JSONL
// metrics file, TensorBoard event files and a progress bar. Trainer.Step
// reports each step (StepEvent) whether Fit or a program's own loop calls
// it.
//
// Step, Evaluate, FindBatchSize, the checkpoints and Fit compute on the
// trainer's libtorch thread (Config.Thread, torch.Main() by default)
// whichever goroutine calls them, as Python runs its loop on one thread;
// torch.Thread says why libtorch 1.13 needs it. FindBatchSize is
// memplan.FindBatchSize on the trainer's real step, the model restored
// after each trial.
package train
