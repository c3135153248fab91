// Package nn is the layer torchfit's recipes are written in: modules with
// PyTorch's parameter naming, layers, losses, optimizers, learning-rate
// schedules, gradient clipping, state dicts and activation checkpointing
// (memory estimates are package memplan's).
//
// A module is a struct that embeds Base and registers its parameters,
// buffers and child modules under the names PyTorch uses, so its StateDict
// lines up name for name and shape for shape with the equivalent PyTorch
// model's state_dict(). Forward methods are ordinary Go methods; layers
// with one tensor in and one out also satisfy Layer, which Sequential chains.
//
// Layers are tested against PyTorch 1.13 (through internal/pyref): each
// layer's state dict loads into the PyTorch layer with strict=True, and
// outputs and gradients agree in float64; with the same seed the
// constructors draw PyTorch's initial weights bit for bit.
// SinusoidalPositionalEncoding's table is a non-persistent buffer unless
// asked otherwise; TransformerEncoder's layers start identical, as after
// PyTorch's deepcopy.
//
// Dropout (the layer, ApplyDropout, and every recipe's dropout through
// them) runs a fused dropout on CPU tensors by default (nn/internal/dropout):
// a Philox4x32-10 mask generated and applied in one vectorised pass and
// made again from its 64-bit seed in backward, so the graph keeps no mask.
// It is deterministic under torch.ManualSeed and RNG snapshots like ATen's,
// but draws other masks than PyTorch: SetFusedDropout(false), or
// TORCHFIT_DROPOUT=aten in the environment, gives ATen's dropout back.
// Comparisons with PyTorch run with dropout off, where the two agree.
// Attention-weight dropout is the fused attention kernel's own (Philox
// too, below) or, on the explicit path, ATen's.
//
// Attention (MultiheadAttention, DotProductAttention) keeps no (L, S)
// matrix for backward when no weights are asked for: on libtorch 2.x it
// calls scaled_dot_product_attention (SDPA), on 1.13 torchfit's own
// flash-style CPU kernel for float32 and float64 (FusedAttention; bfloat16
// with FusedAttentionBF16; package nn/internal/attn), whose memory grows as
// O(L) rather than O(L²) (make bench-attention measures both against
// sequence length). Weights asked for, other devices and dtypes run the
// explicit scores-softmax-product path, PyTorch 1.13's. A causal mask with
// no other mask goes to SDPA as its is_causal (PyTorch's is_causal hint),
// made by no op. MultiheadAttention splits its packed projection into
// query, key and value by one unbind and its packed weight by one split
// (self-attention: the whole weight, through an alias, so that autocast
// keeps no cast of it) where PyTorch selects and slices each part: the
// same numbers, with one backward kernel where each select or slice fills
// and copies a whole-size gradient.
package nn
