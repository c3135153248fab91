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
//     strategy). O(B·D·N·⌈L/K⌉) bytes held for backward. On CUDA tensors
//     it runs a CUDA kernel when built with the cuda tag (below), else the
//     same chunked algorithm in ATen ops; FusedRuns says which.
//
// # The CUDA kernel
//
// scan/internal/kernel/scan_cuda.cu, compiled by nvcc (make scan-kernel,
// which every cuda-tagged make target runs first) into a fat binary for
// sm_80 and sm_90 with compute_90 PTX, embedded in the cuda-tagged build
// and registered as the CUDA kernel of the operator's internal scan_fwd and
// scan_bwd ops (the autograd Function calls them through the dispatcher).
// It computes in float32: float32 inputs as they come, float16 and
// bfloat16 cast to float32 by the operator first (y comes back in x's
// dtype, gradients in each input's); float64 inputs, and states wider than
// 256, take the ATen-op path.
//
//   - Work split: a thread block is 128 threads, W lanes per channel (W the
//     state size rounded up to a power of two, at most 32) × 128/W
//     channels; each lane keeps ⌈N/W⌉ states in registers. Blocks tile
//     channels and batch. Every thread walks the whole sequence step by
//     step (parallel over batch · channels · state, sequential in time,
//     where mamba-ssm's kernel also scans time in parallel within a block).
//   - Forward: h and y = C·h (a shuffle sum over the channel's lanes) per
//     step; the state at each chunk's start goes to starts, (B, ⌈L/K⌉, D, N),
//     the only tensor kept for backward besides the inputs.
//   - Backward: chunks newest first; each chunk's states are recomputed
//     from its start into a scratch of one chunk, (K, B, D, N), freed when
//     backward returns; then the gradient recurrence runs backwards
//     through the chunk, ∂L/∂h carried in registers across chunks. ∂L/∂x
//     and ∂L/∂Δ are shuffle sums over the lanes; ∂L/∂B and ∂L/∂C, sums over
//     channels, are reduced per block in shared memory each step and added
//     with one atomicAdd per block and state; ∂L/∂A and ∂L/∂D, sums over
//     the batch, with one atomicAdd per thread at the end. The atomics make
//     the last bits of those four gradients depend on scheduling (the CPU
//     kernel's are bitwise reproducible).
//   - Launch: through the CUDA driver API (libcuda.so.1, opened at first
//     use), the fat binary loaded into each device's primary context, on
//     PyTorch's current stream: nothing CUDA is linked (the op shim links no
//     libcudart either), so the build links on machines without a driver.
//
// On an H100 (make gpu-check, docs/gpu.md) the kernel equals Sequential in
// float64 to 1.3e-6 with float32 inputs and 4.9e-3 with bfloat16 inputs
// (y, the last state and all six gradients, six shapes: check scan-cuda).
// At B 2, D 256, N 16, L 8192 one forward and backward peaks at 326 MiB
// against Chunked's 540 and Sequential's 8161, in 18 ms against Chunked's
// 2237 (check scan-cuda-memory). Without a GPU its source runs on the host
// with the CUDA built-ins emulated (a thread per CUDA thread; the kernel
// package's TestCUDAKernelOnHost), against a float64 reference.
//
// All four compute in float32, or float64 when an input is float64;
// float16 and bfloat16 inputs are computed in float32 (as mamba-ssm does)
// and y comes back in x's dtype. Each returns y and the last state
// (batch, channels, state), the latter without gradient: generation goes on
// from it one token at a time with Step.
package scan
