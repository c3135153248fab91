// Package torch is torchfit's layer over libtorch, PyTorch's C++ core:
// tensors, operators, autograd, memory accounting and caps, mixed-precision
// regions, activation checkpointing, and PyTorch-format save/load.
//
// # Errors
//
// Tensor math panics with *Error (the operator's name and libtorch's
// message without its C++ backtrace), as regexp.MustCompile does; Try and
// TidyErr turn such panics into errors where a caller wants one (training
// steps, loaders, command lines). Out-of-memory errors — from CUDA's
// caching allocator, the CPU allocator, or a cap set with SetMemoryLimit —
// match errors.Is(err, ErrOutOfMemory) and carry the failed request and the
// allocator's stats. A C++ exception never aborts the process.
//
// # Deterministic memory
//
// GPU memory cannot wait for Go's garbage collector. Release a tensor with
// Free, or create it inside Tidy: when the scope ends, every tensor the
// goroutine created in it is released except those marked with Keep or
// returned (TidyTensor). Release a reference as soon as the code is done
// with it: autograd holds its own references to what backward needs, so
// freeing early lets backward release activations block by block. Using a
// freed tensor panics with ErrFreed. LiveTensors counts references;
// MemoryStats reports the allocator (on the CPU, torchfit's counting
// allocator, which libtorch uses for every CPU tensor, so memory is
// measured exactly without a GPU). Finalizers remain only as a safety net.
//
// # Threads
//
// libtorch keeps grad mode and autocast state per OS thread, and goroutines
// move between threads. NoGrad, EnableGrad, InferenceMode, Autocast and Tidy
// lock the goroutine to its thread for their extent and restore the
// previous state when they end, also on panic.
//
// # Operators
//
// Operators are reached through libtorch's boxed dispatcher by schema name:
// the methods and functions here wrap the ones training needs (their
// arguments follow PyTorch's, negative dimensions included), and CallOp
// reaches any other ATen operator.
package torch
