//go:build cuda

package capi

// The cuda build tag links libtorch's CUDA libraries (kept even though no
// symbol of theirs is referenced directly: their static initialisers register
// the CUDA kernels and hooks) and compiles the shim's CUDA paths.

/*
#cgo CXXFLAGS: -DTF_CUDA
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed
*/
import "C"
