// Package scan is the selective scan of Mamba (Gu and Dao, 2023), four
// ways with one answer:
//
//	h_t = exp(Δ_t·A) ⊙ h_{t−1} + Δ_t·x_t·B_t
//	y_t = C_t·h_t + D·x_t
//
// over x and Δ (batch, length, channels), A (channels, state), B and C
// (batch, length, state) and D (channels), with h_0 = 0.
//
//   - Sequential: the reference, a loop over time in ATen ops with autograd
//     through it. It materialises exp(Δ·A) and Δ·x·B for the whole sequence,
//     as mamba-ssm's selective_scan_ref does, and autograd keeps every
//     state: O(batch·length·channels·state) bytes held for backward.
//   - Chunked(K): the same loop in chunks of K steps, each chunk checkpointed
//     (torch.Recompute), so backward holds the state at each chunk's start
//     and recomputes one chunk at a time.
//   - LogDepth(K): Hillis–Steele inclusive scans inside chunks of K steps
//     (⌈log₂K⌉ rounds of whole-chunk ops instead of K steps), chunk to chunk
//     sequentially. Every round is kept for backward: O(B·L·D·N·log K).
//   - Fused(K): a native kernel (package scan/internal/kernel, an operator
//     of libtorch's dispatcher). Forward loops over time vectorised over
//     batch·channels·state with at::parallel_for, keeping only each chunk's
//     starting state; backward recomputes each chunk's states and runs the
//     gradient recurrence backwards through it (mamba-ssm's CUDA kernel's
//     strategy). O(B·D·N·⌈L/K⌉) bytes held for backward. On CUDA tensors the
//     operator runs the same chunked algorithm in ATen ops.
//
// All four compute in float32, or float64 when an input is float64;
// float16 and bfloat16 inputs are computed in float32 (as mamba-ssm does)
// and y comes back in x's dtype. Each returns y and the last state
// (batch, channels, state), the latter without gradient: generation goes on
// from it one token at a time with Step.
package scan
