//go:build cuda

package cudagraph

// The cuda build tag compiles graph.cc's CUDA paths and links libtorch's
// CUDA libraries, as it does for the shim (torch/internal/capi/cuda.go).

/*
#cgo CXXFLAGS: -DTF_CUDA -DPYTORCH_C10_DRIVER_API_SUPPORTED=1
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed
*/
import "C"

// built reports whether this binary has CUDA graphs (the cuda tag).
const built = true
