// Package cudagraph captures a whole training step — forward, backward and
// a capturable optimizer step — as one CUDA graph and replays it, so that a
// small model's step costs one graph launch instead of hundreds of kernel
// launches, each with the host-side work of an op call.
//
// Capture runs the step a few times on a side stream first (warm-up: the
// optimizer's state, cuBLAS handles and workspaces, the autograd engine's
// device threads come into being outside the capture, as PyTorch's
// torch.cuda.graph requires), then once more inside
// at::cuda::CUDAGraph::capture_begin/capture_end. The captured step's
// allocations come from a private pool of libtorch's caching allocator,
// which the graph keeps until Free: the tensors the step made (its loss,
// the gradients) stay where replays write them.
//
// What a captured step must respect (as with torch.cuda.graph):
//   - static shapes and static tensors: the inputs live in tensors made
//     before the capture, and each replay reads whatever was copied into
//     them (CopyFrom) before it; outputs are the tensors the step made
//     during the capture (Keep them), which each replay overwrites;
//   - no host synchronisation inside the step: no Item, no host copies, no
//     data-dependent shapes, no clipping that reads the norm on the host;
//   - an optimizer whose step reads its step count and bias corrections on
//     the device: AdamW here (libtorch's _fused_adamw_ with the step
//     counters as device tensors, PyTorch's fused, capturable AdamW);
//     nn.Adam computes the bias corrections on the host, which a graph would
//     freeze at the captured step;
//   - under float16, a GradScaler whose skip happens on the device: the
//     scaler unscales (amp.GradScaler.Unscale), AdamW.StepUnlessInf takes
//     its FoundInf tensor and the kernel leaves everything as it was on inf
//     or nan, and the scaler's Update adapts the scale on the device;
//   - gradients set to nil before backward (ZeroGrad inside the step), so
//     that the captured backward writes them rather than accumulating;
//   - autocast caches cleared at the end of the forward (amp.ClearCache),
//     so that no cast made outside the capture is read inside it.
//
// Capture, Replay and Free run their libtorch work on torch.Main()'s
// thread (the current CUDA stream is per OS thread), the step function
// included.
//
// CUDA graphs need the cuda build tag and a CUDA device: without them
// Capture returns an error matching ErrNoCUDA.
package cudagraph
