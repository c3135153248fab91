// Package dropout is the fused dropout's native code: a libtorch
// operator, torchfit_dropout::dropout, registered with the dispatcher when
// the package is linked (dropout.cc; its own operator namespace, as every
// native package has), and called through torch.CallOp; package nn's
// Dropout reaches it (nn.SetFusedDropout switches it).
//
// The mask is Philox4x32-10 (internal/philox/philox.h, included, not
// copied): element i of a call keeps its value, scaled by 1/(1−p), when
// philox_uniform of word i mod 4 of block i/4 of the stream (seed, 0) is
// below float32(1−p), and is multiplied by 0 otherwise. The seed is drawn
// per call from libtorch's default CPU generator (64 bits), so
// torch.ManualSeed, RNG snapshots and checkpointed RNG states make the
// masks again. The forward pass generates the mask and multiplies in one
// pass over the elements; backward makes the mask again from the seed and
// applies it to the gradient, so the graph saves no mask.
//
// CPU tensors of float32, float64, bfloat16 and float16 take the kernel;
// other devices (CUDA's ATen dropout is already a fused Philox kernel) and
// dtypes take ATen's dropout. It is its own cgo package, apart from the op
// shim, so that its C++ builds alone; it uses the shim's compiler and
// linker flags.
package dropout
