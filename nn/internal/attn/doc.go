// Package attn is the fused attention's native code: a libtorch operator,
// torchfit_nn::attention, registered with the dispatcher when the package
// is linked (attn.cc), and called through torch.CallOp.
//
// The operator computes dropout(softmax(scale·q·kᵀ + masks))·v on the CPU
// the way FlashAttention does: the keys are walked in tiles with a running
// (online) softmax per query, so neither pass forms the (L, S) matrix of
// scores. Forward keeps only the output and each row's log-sum-exp;
// backward recomputes the probabilities tile by tile (FlashAttention-2's
// backward with D = rowsum(dO∘O)). Memory beyond the inputs and outputs is
// O(L + S) per head, where the explicit path keeps O(L·S) (the scores, the
// probabilities and the dropout mask) for backward.
//
// Float64 is computed in float64, float32 and bfloat16 in float32.
// Masks: causal (query i sees keys j ≤ i + CausalOffset), a key-padding
// mask (N, S) and an attention mask broadcastable to (N, heads, L, S), each
// bool (true: masked) or float (added to the scores). Attention dropout
// draws its keep mask from Philox (internal/philox) with a seed taken per
// call from the default CPU generator (torch.ManualSeed makes it
// repeatable) and regenerates the mask in backward instead of keeping it.
// A query that sees no key at all gets output 0 (the explicit path gets
// NaN).
//
// It is its own cgo package so that its C++ builds (and rebuilds) alone; it
// uses the op shim's compiler and linker flags and libtorch version switch,
// and compiles against libtorch 1.13 and 2.x alike (on 2.x nn uses
// libtorch's own scaled_dot_product_attention instead; see nn.FusedAttention).
package attn
