// Package torch is torchfit's layer over libtorch, PyTorch's C++ core:
// tensors, operators, autograd, memory accounting and caps, mixed-precision
// regions and activation checkpointing. Files in PyTorch's format
// (torch.save, torch.load) are torch/ptfile's; RawBytes and FromReader are
// the raw element access such a codec needs.
//
// # Errors
//
// Tensor math panics with *Error (the operator's name and libtorch's
// message without its C++ backtrace), as regexp.MustCompile does; Try and
// TidyErr turn such panics into errors where a caller wants one (training
// steps, loaders, command lines). Out-of-memory errors — from CUDA's
// caching allocator, the CPU allocator, or a cap set with SetMemoryLimit —
// match errors.Is(err, ErrOutOfMemory) and carry the failed request and the
// allocator's stats, when the size asked for is plausible (up to 256 TiB).
// A C++ exception below libtorch's own error handling — a std::bad_alloc
// that no allocator reported while the host has memory left, or a
// std::future_error, both of which oneDNN 2.6 throws when creating a
// primitive fails — matches ErrBackend instead: not memory, and the process
// is not safe to go on. A std::bad_alloc while the host has no memory left
// (256 MiB more cannot be allocated either) is ErrOutOfMemory. A C++ exception never
// aborts the process. A backward that fails half-way (Backward, Gradients)
// leaves nothing of its graph behind once its tensors are freed: libtorch's
// autograd engine keeps the tasks it did not run in a per-thread queue,
// which torchfit empties, so a step retried at a smaller micro-batch after
// running out of memory has all its memory back.
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
// measured exactly without a GPU); TraceMemory records its allocations and
// frees in order, as torch.profiler's memory events do, to find which
// tensor makes a peak. Finalizers remain only as a safety net.
//
// # Threads
//
// libtorch keeps grad mode and autocast state per OS thread, and goroutines
// move between threads. NoGrad, EnableGrad, InferenceMode, Autocast and Tidy
// lock the goroutine to its thread for their extent and restore the
// previous state when they end, also on panic.
//
// A training loop needs more: its CPU backend caches per OS thread too
// (ideep's primitive descriptors), and libtorch up to 2.3 links a oneDNN
// older than 3.4 that breaks when one loop's work moves between threads
// (see Thread). Main is the process's libtorch thread: torchfit's training
// loop, evaluation and recipes run their work there, whichever goroutine
// calls them, as Python runs its loop on its one thread. Every OS thread
// that calls into torchfit first gets libtorch's OpenMP thread count
// (SetNumThreads), which OpenMP otherwise keeps per thread.
//
// # Operators
//
// Operators are reached through libtorch's dispatcher by schema name (the
// boxed call, or for an operator of tensors and Scalars returning one
// tensor, the typed call at::add makes; TORCHFIT_OPS=boxed boxes every
// call):
// the methods and functions here wrap the ones training needs (their
// arguments follow PyTorch's, negative dimensions included), and CallOp
// reaches any other ATen operator. Most wrappers are generated into
// ops_gen.go from ops.list, one line per wrapper holding its Go name, the
// operator's schema and its doc comment (go generate; the format is
// described by torch/internal/opgen); those whose signature needs care are
// hand-written.
package torch
