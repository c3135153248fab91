//go:build cuda

package capi

// The cuda build tag links libtorch's CUDA libraries (kept even though no
// symbol of theirs is referenced directly: their static initialisers register
// the CUDA kernels and hooks) and compiles the shim's CUDA paths.
//
// PYTORCH_C10_DRIVER_API_SUPPORTED is what libtorch's Linux CUDA builds are
// compiled with; without it the inline CUDAAllocatorConfig::
// expandable_segments() of the headers answers false (and warns "not
// supported on this platform") while the library's allocator uses them, as
// the first run on an H100 showed.

/*
#cgo CXXFLAGS: -DTF_CUDA -DPYTORCH_C10_DRIVER_API_SUPPORTED=1
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed
*/
import "C"
