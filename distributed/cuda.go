//go:build cuda

package distributed

// The cuda build tag compiles ProcessGroupNCCL (its header needs nccl.h: the
// nvidia-nccl wheel's include directory, or a CUDA toolkit's) and links
// libtorch's CUDA library, which holds it.

/*
#cgo CXXFLAGS: -DTFD_WITH_NCCL -Wno-interference-size
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed
*/
import "C"
