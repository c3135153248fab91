// Package amp is mixed precision for torchfit: autocast regions and a
// GradScaler with PyTorch's semantics.
//
// Autocast runs eligible ops (matmul, linear, convolutions) in a lower
// precision — float16 or bfloat16 on CUDA, bfloat16 on the CPU — and keeps
// precision-sensitive ones (softmax, losses, reductions) in float32. Its state
// is per OS thread in libtorch, so Autocast locks the goroutine to its thread
// for the region's extent, nests, and restores the previous state. libtorch
// caches low-precision copies of the weights inside a region; the cache is
// cleared when the outermost region ends, and must be cleared after every
// optimizer step that happens inside one (ClearCache), or the next forward
// uses stale weights.
//
// GradScaler multiplies the loss before backward so small float16 gradients
// do not flush to zero, unscales the gradients before clipping and the
// optimizer step, skips the step when any gradient is inf or nan, and adapts
// the scale: defaults as torch.cuda.amp.GradScaler (init 65536, growth 2,
// backoff 0.5, growth interval 2000). On CUDA it uses libtorch's fused
// kernels; libtorch 1.13 has none for the CPU, where equivalent ordinary ops
// run instead, so the scaler is exercised by CPU tests too (2.11 has the
// scale's update for the CPU, which the scaler then takes). Step reads
// whether to skip on the host; a step that must read nothing (a CUDA
// graph's) passes FoundInf to an optimizer kernel that skips on the device
// (cudagraph.AdamW.StepUnlessInf). Unscale reads nothing, and Update
// neither where libtorch has its kernel for the device (CUDA; the CPU on
// 2.11, not on 1.13, where its arithmetic reads the scale and tracker).
package amp
