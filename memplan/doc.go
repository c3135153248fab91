// Package memplan is torchfit's one home for memory planning: how much a
// training step needs, the largest micro-batch that fits, and, given a
// byte budget, which micro-batch, accumulation, checkpointing and
// precision to train with. Every figure comes from the allocator's own
// counters (on the CPU too: torchfit counts every CPU tensor byte), not
// from formulas. It does not depend on the training loop: the step it
// measures is a function the caller supplies.
//
// Options are typed: the optimizer is an OptimizerKind, the precision an
// amp.Precision; a bad option is an *OptionError (errors.As), which a CLI
// reports in one line.
//
// # Three tools
//
// EstimateMemory estimates a training step at a batch size: weights,
// gradients and optimizer state from the parameters' sizes and dtypes,
// activations from two dry runs at small batches (forward and backward,
// under autocast at the precision asked), extrapolated linearly. On two
// transformer layers at batch 48 it is within 0.3 % of the peak three real
// Adam steps reach.
//
// FindBatchSize finds the largest micro-batch for which a trial step
// succeeds, doubling from 1 until one runs out of memory (under the
// device's real memory or a cap set with torch.SetMemoryLimit), then
// bisecting. It keeps no headroom; Plan does.
//
// DryRun measures one training step — an accumulation window of two
// micro-batches (from the second on, the first one's gradients are held
// while activations peak) and the optimizer update — after a warm-up
// window that creates the optimizer's state, and reports what the device
// holds between steps (Held), the step's high-water mark above that
// (Peak), a micro-batch's forward+backward time and the update's time.
// It snapshots the model's parameters and buffers, the optimizers' and
// scalers' state and the CPU generator to the CPU first and restores them
// after, also after an error, so planning leaves the run where it was.
// It clears autocast's cache after each update, as the training loop
// does: with checkpointing under autocast, the recomputation in backward
// leaves low-precision casts there until it is cleared.
//
// # The planner
//
// Plan takes a budget in bytes (--memory-limit, --vram), the effective
// batch, the precisions and checkpointing settings allowed, and a Measure
// function that dry-runs one Candidate (micro-batch, accumulation,
// precision, checkpointing) of the caller's real step on its worst-case
// batch. Its method:
//
//   - For each precision and checkpointing setting it searches the largest
//     micro-batch that fits by doubling then bisection, measuring each
//     candidate. The largest is then balanced: the smallest micro-batch
//     with the same number of accumulation steps is measured too (64 as
//     2 × 32 rather than 45 + 19). Checkpointing is skipped for a precision
//     whose plain run already fits at the largest micro-batch.
//   - A candidate fits when its dry run did not run out of memory and
//     Held + Peak ≤ (1 − Margin)·Budget. The margin (10 % by default) is
//     there because Lightning's batch-size finder, which kept none, had
//     users run out of memory right after it found a size: real batches
//     vary, allocators fragment, evaluation allocates too.
//   - The measurements run without a cap and are compared with the budget,
//     rather than run under a cap of Budget: a candidate over the budget is
//     measured in full, so the table says by how much it misses, and a step
//     that fails half-way never leaves the measurement in doubt.
//   - A micro-batch larger than its balanced size is not chosen when the
//     balanced one fits: it takes more memory for the same number of steps.
//   - The finalists (the fitting candidates within 25 % of the fastest, at
//     most 6) are measured Rounds (2) more times, in turn, keeping each
//     one's fastest times: one step's time is noisy on a shared machine,
//     and measuring them in turn spreads a change in load over all.
//   - Of the candidates that fit it picks the fastest per effective batch
//     (accumulation steps × micro-batch time + update time); among those
//     within Tolerance (5 %) of the fastest, the one pulling the fewest
//     levers (accumulation, checkpointing, low precision).
//
// Result.Table prints every candidate measured with its memory, whether it
// fits, its times, and the choice. Which precisions are worth trying
// depends on the device: Precisions(device, amp.HostCPU()) gives fp32,
// fp16 on CUDA, and bf16 only on CPUs that compute it natively.
//
// Times come from one machine at one moment; on a shared machine they are
// noisy (DryRun.Repeat keeps the fastest of several windows, Rounds
// re-measures the finalists), and close candidates may swap places from
// one run to the next. Memory is
// exact: on the CPU the dry run's need equals the peak of the same step
// trained afterwards, to the byte.
package memplan
