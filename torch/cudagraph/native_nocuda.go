//go:build !cuda

package cudagraph

// built reports whether this binary has CUDA graphs (the cuda tag).
const built = false
