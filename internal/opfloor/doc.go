// Package opfloor measures the per-op floor of libtorch: an operator called
// from a C++ loop with no binding at all, the least any binding (torchfit,
// Python) can spend per call. `make bench-ops-floor` puts it beside
// torchfit's and Python's per-op times on the CPU, and `make gpu-check`'s
// op-overhead check does the same on CUDA, where a small model's eager
// step is a sequence of such calls.
//
// It is its own cgo package, apart from the op shim: its one C++ file
// builds alone, with the shim's compiler and linker flags.
package opfloor
