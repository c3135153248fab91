package nn

import (
	"fmt"
	"math"
	"strings"

	"github.com/torchfit/torchfit/nn/internal/attn"
	"github.com/torchfit/torchfit/torch"
)

// MultiheadAttention is nn.MultiheadAttention (kdim = vdim = embed_dim, no
// bias_k/bias_v, no zero attention): parameters in_proj_weight (3E, E),
// in_proj_bias (3E), out_proj.weight (E, E), out_proj.bias (E), initialised
// as PyTorch's (Xavier-uniform in_proj_weight, zero biases, out_proj.weight
// as a Linear's).
type MultiheadAttention struct {
	Base
	InProjWeight, InProjBias *torch.Tensor
	OutProj                  *Linear
	EmbedDim, NumHeads       int64
	Dropout                  float64 // on the attention weights, in training mode
	BatchFirst               bool    // inputs and outputs (N, L, E) rather than (L, N, E)
}

// AttnOpts are the optional arguments of an attention forward pass.
type AttnOpts struct {
	// KeyPaddingMask (N, S): bool (true: ignore that key) or float (added
	// to the scores).
	KeyPaddingMask *torch.Tensor
	// AttnMask (L, S) or (N·heads, L, S): bool (true: not allowed to
	// attend) or float (added to the scores).
	AttnMask *torch.Tensor
	// Causal masks keys after the query position (as a triu(1) bool mask),
	// combined with AttnMask.
	Causal bool
	// CausalOffset shifts the causal mask: query i sees keys up to
	// i+CausalOffset (a triu(1+CausalOffset) mask); S−L when the L queries
	// are the last of S positions (a decoder with a key/value cache).
	CausalOffset int64
	// NeedWeights makes MultiheadAttention return the attention weights:
	// averaged over heads (N, L, S), or per head (N, heads, L, S) with
	// PerHeadWeights.
	NeedWeights, PerHeadWeights bool
}

// NewMultiheadAttention is nn.MultiheadAttention(embedDim, numHeads,
// dropout, bias=True, batch_first=batchFirst).
func NewMultiheadAttention(embedDim, numHeads int64, dropout float64, batchFirst bool) *MultiheadAttention {
	if numHeads <= 0 || embedDim%numHeads != 0 {
		panic(invalid("embed_dim %d must be divisible by num_heads %d", embedDim, numHeads))
	}
	m := &MultiheadAttention{EmbedDim: embedDim, NumHeads: numHeads, Dropout: dropout, BatchFirst: batchFirst}
	m.InProjWeight = m.RegisterParam("in_proj_weight", newParam(3*embedDim, embedDim))
	m.InProjBias = m.RegisterParam("in_proj_bias", torch.Zeros([]int64{3 * embedDim}))
	// PyTorch builds out_proj (drawing its Linear init) before drawing
	// in_proj_weight; the same order draws the same numbers.
	m.OutProj = RegisterModule(&m.Base, "out_proj", NewLinear(embedDim, embedDim, true))
	XavierUniform(m.InProjWeight, 1)
	Zeros(m.OutProj.Bias)
	return m
}

// SDPA chooses PyTorch 2.x's attention (scaled_dot_product_attention) over
// 1.13's explicit softmax where this libtorch has it and no weights are
// asked for, as torch.nn.MultiheadAttention does; tests turn it off to
// compare both.
var SDPA = torch.HasSDPA()

// FusedAttention chooses torchfit's own memory-efficient CPU attention
// (package nn/internal/attn: a flash-style kernel that keeps no (L, S)
// matrix for backward) where SDPA is off — libtorch 1.13 — for CPU tensors
// in float32 or float64 (bfloat16 with FusedAttentionBF16) when no weights
// are asked for. Its
// attention dropout draws its own (Philox) numbers, not the generator's
// bernoulli stream; a query that sees no key gets 0 instead of NaN. Turn
// it off to get 1.13's explicit path (PyTorch 1.13's own numbers).
var FusedAttention = !torch.HasSDPA()

// FusedAttentionBF16 lets FusedAttention take bfloat16 tensors too (the
// kernel computes them in float32). Off by default: in the ASR twin's
// bf16 check (go test ./bench -run ASRTwin) the kernel's float32
// accumulation moves the decoder's feed-forward gradients 0.27 (relative
// to the largest element) from PyTorch 1.13's bf16 explicit path, beyond
// the twin's 5e-2 tolerance, where the explicit path agrees to 3e-2.
var FusedAttentionBF16 = false

// additiveMask turns a bool mask into 0/−inf of dtype dt; float masks pass.
func additiveMask(mask *torch.Tensor, dt torch.DType) *torch.Tensor {
	if mask.DType() == torch.Bool {
		return torch.ZerosLike(mask, dt).MaskedFill(mask, math.Inf(-1))
	}
	if mask.DType() != dt {
		return mask.ToDType(dt)
	}
	return mask
}

// AttentionPath names what DotProductAttention runs for q, k, v and o:
// "sdpa" (libtorch's scaled_dot_product_attention), "fused" (torchfit's CPU
// kernel) or "explicit" (scores, softmax, dropout, product).
func AttentionPath(q, k, v *torch.Tensor, o AttnOpts) string {
	switch {
	case o.NeedWeights:
		return "explicit"
	case SDPA:
		return "sdpa"
	case FusedAttention && attn.Supports(q.Device(), q.DType()) && (q.DType() != torch.BFloat16 || FusedAttentionBF16) &&
		k.DType() == q.DType() && v.DType() == q.DType() && k.Device() == q.Device() && v.Device() == q.Device():
		return "fused"
	}
	return "explicit"
}

// DotProductAttention is the attention inside MultiheadAttention, after
// the projections: q (N, H, L, D), k (N, H, S, D), v (N, H, S, Dv) give
// softmax(q·kᵀ/√D + masks)·v (N, H, L, Dv), with dropout p on the weights.
// o's masks apply (an AttnMask of (N·H, L, S) is taken per head);
// with o.NeedWeights it also returns the weights per head (N, H, L, S).
// AttentionPath says what runs: SDPA on libtorch 2.x, the fused CPU kernel
// on 1.13 (FusedAttention), else the explicit path.
func DotProductAttention(q, k, v *torch.Tensor, o AttnOpts, p float64) (out, weights *torch.Tensor) {
	res := torch.TidyTensors(func() []*torch.Tensor {
		n, h, l, s := q.Size(0), q.Size(1), q.Size(2), k.Size(2)
		am := o.AttnMask
		if am != nil && am.Dim() == 3 && am.Size(0) == n*h && n*h != h {
			am = am.Reshape(n, h, l, s)
		}
		causal := func() *torch.Tensor {
			return torch.Ones([]int64{l, s}, torch.Bool, q.Device()).Triu(1 + o.CausalOffset)
		}
		switch AttentionPath(q, k, v, o) {
		case "fused":
			y, _ := attn.Attention(q, k, v, attn.Opts{KeyPaddingMask: o.KeyPaddingMask, AttnMask: am,
				Causal: o.Causal, CausalOffset: o.CausalOffset, Dropout: p})
			return []*torch.Tensor{y, nil}
		case "sdpa":
			// PyTorch 2.x's F.multi_head_attention_forward without weights:
			// a causal mask alone goes to scaled_dot_product_attention as
			// its is_causal (PyTorch's is_causal hint): no mask is made
			// (on CUDA four kernels a call) and flash attention may run.
			// Otherwise the masks as one additive mask in the query's
			// dtype, then scaled_dot_product_attention (same ops, same
			// numbers).
			if o.Causal && o.CausalOffset == 0 && am == nil && o.KeyPaddingMask == nil {
				return []*torch.Tensor{torch.ScaledDotProductAttention(q, k, v, nil, p, true), nil}
			}
			var mask *torch.Tensor
			add := func(x *torch.Tensor) {
				if mask == nil {
					mask = x
				} else {
					mask = mask.Add(x)
				}
			}
			if am != nil {
				add(additiveMask(am, q.DType()))
			}
			if o.Causal {
				add(additiveMask(causal(), q.DType()))
			}
			if o.KeyPaddingMask != nil {
				add(additiveMask(o.KeyPaddingMask, q.DType()).Reshape(n, 1, 1, s))
			}
			return []*torch.Tensor{torch.ScaledDotProductAttention(q, k, v, mask, p, false), nil}
		}
		scores := q.DivScalar(math.Sqrt(float64(q.Size(3)))).Matmul(k.Transpose(-2, -1)) // (N, H, L, S)
		dt := scores.DType()
		if am != nil {
			scores = scores.Add(additiveMask(am, dt))
		}
		if o.Causal {
			scores = scores.Add(additiveMask(causal(), dt))
		}
		if o.KeyPaddingMask != nil {
			scores = scores.Add(additiveMask(o.KeyPaddingMask, dt).Reshape(n, 1, 1, s))
		}
		w := scores.Softmax(-1)
		a := w
		if p > 0 {
			a = w.Dropout(p, true)
		}
		y := a.Matmul(v)
		if !o.NeedWeights {
			w = nil
		}
		return []*torch.Tensor{y, w}
	})
	return res[0], res[1]
}

// Forward attends query (L, N, E) to key/value (S, N, E) (batch-first:
// (N, L, E), (N, S, E)). It returns the output shaped like query and, with
// o.NeedWeights, the attention weights (else nil). The attention itself is
// DotProductAttention's.
func (m *MultiheadAttention) Forward(query, key, value *torch.Tensor, o AttnOpts) (out, weights *torch.Tensor) {
	res := torch.TidyTensors(func() []*torch.Tensor {
		q, k, v := query, key, value
		if !m.BatchFirst {
			q, k, v = q.Transpose(0, 1), k.Transpose(0, 1), v.Transpose(0, 1)
		}
		n, l, e := q.Size(0), q.Size(1), q.Size(2)
		s := k.Size(1)
		if e != m.EmbedDim {
			panic(&torch.Error{Op: "MultiheadAttention", Msg: fmt.Sprintf("embedding size %d, expected %d", e, m.EmbedDim)})
		}
		h := m.NumHeads
		d := e / h
		// project runs parts consecutive projections of x (weight w and
		// bias b: those parts' rows of the packed ones) as one linear,
		// giving each as (N, H, length, d). Self-attention (query, key and
		// value the same tensor) and a shared key/value project together,
		// as PyTorch's _in_projection_packed does, so that under autocast
		// their input is cast and kept for backward once rather than once
		// per projection.
		//
		// The parts of a projection are split by one unbind, whose
		// backward is one stack, where PyTorch's proj[0], proj[1], proj[2]
		// each fill and copy a gradient of the whole projection and then
		// add the three up (on CUDA 8 kernel launches become 1).
		// Self-attention takes the packed weight and bias whole, and the
		// other forms split them by one split each, whose backward is one
		// concatenation, where a slice per part each fills a zero tensor
		// of the parameter's size and copies into it
		// (scripts/projection_kernels.py counts both forms). The
		// gradients are the same to the bit (each element is one part's
		// value plus zeros).
		project := func(x, w, b *torch.Tensor, parts, length int64) []*torch.Tensor {
			y := torch.Linear(x, w, b)
			y = y.Reshape(n, length, parts, e).Permute(2, 0, 1, 3).Contiguous() // (parts, N, len, E); no copy for one part
			ys := []*torch.Tensor{y}
			if parts > 1 {
				ys = y.Unbind(0)
			}
			out := make([]*torch.Tensor, parts)
			for i := range out {
				out[i] = ys[i].Reshape(n, length, h, d).Transpose(1, 2)
			}
			return out
		}
		// split cuts a packed parameter into runs of the given numbers of
		// E rows (nil for a missing bias).
		split := func(t *torch.Tensor, parts ...int64) []*torch.Tensor {
			if t == nil {
				return make([]*torch.Tensor, len(parts))
			}
			sizes := make([]int64, len(parts))
			for i, p := range parts {
				sizes[i] = p * e
			}
			return t.Split(sizes, 0)
		}
		var qh, kh, vh *torch.Tensor
		switch {
		case query == key && key == value:
			// An alias, not the parameter itself: under autocast a
			// parameter's cast is kept until the region ends (a cache
			// for leaves), which in a checkpointed forward holds every
			// layer's; a view's is made at use and freed with its graph
			// (the slices did the same). Its backward is no kernel.
			b := m.InProjBias
			if b != nil {
				b = b.Alias()
			}
			qkv := project(q, m.InProjWeight.Alias(), b, 3, l)
			qh, kh, vh = qkv[0], qkv[1], qkv[2]
		case key == value:
			w, b := split(m.InProjWeight, 1, 2), split(m.InProjBias, 1, 2)
			kv := project(k, w[1], b[1], 2, s)
			qh, kh, vh = project(q, w[0], b[0], 1, l)[0], kv[0], kv[1]
		default:
			w, b := split(m.InProjWeight, 1, 1, 1), split(m.InProjBias, 1, 1, 1)
			qh, kh, vh = project(q, w[0], b[0], 1, l)[0], project(k, w[1], b[1], 1, s)[0], project(v, w[2], b[2], 1, s)[0]
		}
		p := 0.0
		if m.Training() {
			p = m.Dropout
		}
		ctx, w := DotProductAttention(qh, kh, vh, o, p)
		y := m.OutProj.Forward(ctx.Transpose(1, 2).Reshape(n, l, e))
		if !m.BatchFirst {
			y = y.Transpose(0, 1)
		}
		if w != nil && !o.PerHeadWeights {
			w = w.SumDim([]int64{1}, false).DivScalar(float64(h))
		}
		return []*torch.Tensor{y, w}
	})
	return res[0], res[1]
}

// TransformerConfig configures nn.TransformerEncoderLayer and
// nn.TransformerDecoderLayer. DefaultTransformerConfig gives PyTorch's
// defaults.
type TransformerConfig struct {
	DModel, NHead  int64
	DimFeedforward int64   // PyTorch: 2048
	Dropout        float64 // PyTorch: 0.1
	Activation     string  // "relu" (PyTorch's default) or "gelu"
	LayerNormEps   float64 // PyTorch: 1e-5
	BatchFirst     bool
	NormFirst      bool // pre-norm
}

// DefaultTransformerConfig returns PyTorch's defaults for dModel and nHead.
func DefaultTransformerConfig(dModel, nHead int64) TransformerConfig {
	return TransformerConfig{DModel: dModel, NHead: nHead, DimFeedforward: 2048, Dropout: 0.1, Activation: "relu", LayerNormEps: 1e-5}
}

func (c TransformerConfig) activation() func(*torch.Tensor) *torch.Tensor {
	switch strings.ToLower(c.Activation) {
	case "", "relu":
		return (*torch.Tensor).Relu
	case "gelu":
		return (*torch.Tensor).Gelu
	}
	panic(invalid("transformer activation %q (want relu or gelu)", c.Activation))
}

func (c TransformerConfig) norm() *LayerNorm {
	l := NewLayerNorm(c.DModel)
	if c.LayerNormEps != 0 {
		l.Eps = c.LayerNormEps
	}
	return l
}

// feedForward is the position-wise block: linear2(dropout(act(linear1(x)))).
type feedForward struct {
	Linear1, Linear2 *Linear
	Dropout          *Dropout
	act              func(*torch.Tensor) *torch.Tensor
}

func (f *feedForward) forward(x *torch.Tensor) *torch.Tensor {
	return f.Linear2.Forward(f.Dropout.Forward(f.act(f.Linear1.Forward(x))))
}

// TransformerEncoderLayer is nn.TransformerEncoderLayer: self_attn.*,
// linear1.*, linear2.*, norm1.*, norm2.* (post-norm, or pre-norm with
// NormFirst).
type TransformerEncoderLayer struct {
	Base
	SelfAttn           *MultiheadAttention
	Linear1, Linear2   *Linear
	Norm1, Norm2       *LayerNorm
	Dropout            *Dropout // inside the feed-forward block
	Dropout1, Dropout2 *Dropout
	NormFirst          bool
	ff                 feedForward
}

// NewTransformerEncoderLayer builds a layer (submodules registered in
// PyTorch's order, so the same seed draws the same initial weights).
func NewTransformerEncoderLayer(c TransformerConfig) *TransformerEncoderLayer {
	c.activation() // validate early
	l := &TransformerEncoderLayer{NormFirst: c.NormFirst}
	b := &l.Base
	l.SelfAttn = RegisterModule(b, "self_attn", NewMultiheadAttention(c.DModel, c.NHead, c.Dropout, c.BatchFirst))
	l.Linear1 = RegisterModule(b, "linear1", NewLinear(c.DModel, c.DimFeedforward, true))
	l.Dropout = RegisterModule(b, "dropout", NewDropout(c.Dropout))
	l.Linear2 = RegisterModule(b, "linear2", NewLinear(c.DimFeedforward, c.DModel, true))
	l.Norm1 = RegisterModule(b, "norm1", c.norm())
	l.Norm2 = RegisterModule(b, "norm2", c.norm())
	l.Dropout1 = RegisterModule(b, "dropout1", NewDropout(c.Dropout))
	l.Dropout2 = RegisterModule(b, "dropout2", NewDropout(c.Dropout))
	l.ff = feedForward{l.Linear1, l.Linear2, l.Dropout, c.activation()}
	return l
}

// Forward runs the layer on src ((S, N, E), or (N, S, E) batch-first);
// o's masks apply to self-attention (its NeedWeights is ignored).
func (l *TransformerEncoderLayer) Forward(src *torch.Tensor, o AttnOpts) *torch.Tensor {
	o.NeedWeights = false
	return torch.TidyTensor(func() *torch.Tensor {
		sa := func(x *torch.Tensor) *torch.Tensor {
			y, _ := l.SelfAttn.Forward(x, x, x, o)
			return l.Dropout1.Forward(y)
		}
		ff := func(x *torch.Tensor) *torch.Tensor { return l.Dropout2.Forward(l.ff.forward(x)) }
		x := src
		if l.NormFirst {
			x = x.Add(sa(l.Norm1.Forward(x)))
			return x.Add(ff(l.Norm2.Forward(x)))
		}
		x = l.Norm1.Forward(x.Add(sa(x)))
		return l.Norm2.Forward(x.Add(ff(x)))
	})
}

// TransformerDecoderLayer is nn.TransformerDecoderLayer: self_attn.*,
// multihead_attn.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*.
type TransformerDecoderLayer struct {
	Base
	SelfAttn, MultiheadAttn      *MultiheadAttention
	Linear1, Linear2             *Linear
	Norm1, Norm2, Norm3          *LayerNorm
	Dropout                      *Dropout
	Dropout1, Dropout2, Dropout3 *Dropout
	NormFirst                    bool
	ff                           feedForward
}

// NewTransformerDecoderLayer builds a decoder layer in PyTorch's order.
func NewTransformerDecoderLayer(c TransformerConfig) *TransformerDecoderLayer {
	c.activation()
	l := &TransformerDecoderLayer{NormFirst: c.NormFirst}
	b := &l.Base
	l.SelfAttn = RegisterModule(b, "self_attn", NewMultiheadAttention(c.DModel, c.NHead, c.Dropout, c.BatchFirst))
	l.MultiheadAttn = RegisterModule(b, "multihead_attn", NewMultiheadAttention(c.DModel, c.NHead, c.Dropout, c.BatchFirst))
	l.Linear1 = RegisterModule(b, "linear1", NewLinear(c.DModel, c.DimFeedforward, true))
	l.Dropout = RegisterModule(b, "dropout", NewDropout(c.Dropout))
	l.Linear2 = RegisterModule(b, "linear2", NewLinear(c.DimFeedforward, c.DModel, true))
	l.Norm1 = RegisterModule(b, "norm1", c.norm())
	l.Norm2 = RegisterModule(b, "norm2", c.norm())
	l.Norm3 = RegisterModule(b, "norm3", c.norm())
	l.Dropout1 = RegisterModule(b, "dropout1", NewDropout(c.Dropout))
	l.Dropout2 = RegisterModule(b, "dropout2", NewDropout(c.Dropout))
	l.Dropout3 = RegisterModule(b, "dropout3", NewDropout(c.Dropout))
	l.ff = feedForward{l.Linear1, l.Linear2, l.Dropout, c.activation()}
	return l
}

// Forward runs the layer on tgt attending to memory; tgtOpts mask the
// self-attention (tgt_mask, tgt_key_padding_mask, causal), memOpts the
// cross-attention (memory_mask, memory_key_padding_mask).
func (l *TransformerDecoderLayer) Forward(tgt, memory *torch.Tensor, tgtOpts, memOpts AttnOpts) *torch.Tensor {
	tgtOpts.NeedWeights, memOpts.NeedWeights = false, false
	return torch.TidyTensor(func() *torch.Tensor {
		sa := func(x *torch.Tensor) *torch.Tensor {
			y, _ := l.SelfAttn.Forward(x, x, x, tgtOpts)
			return l.Dropout1.Forward(y)
		}
		mha := func(x *torch.Tensor) *torch.Tensor {
			y, _ := l.MultiheadAttn.Forward(x, memory, memory, memOpts)
			return l.Dropout2.Forward(y)
		}
		ff := func(x *torch.Tensor) *torch.Tensor { return l.Dropout3.Forward(l.ff.forward(x)) }
		x := tgt
		if l.NormFirst {
			x = x.Add(sa(l.Norm1.Forward(x)))
			x = x.Add(mha(l.Norm2.Forward(x)))
			return x.Add(ff(l.Norm3.Forward(x)))
		}
		x = l.Norm1.Forward(x.Add(sa(x)))
		x = l.Norm2.Forward(x.Add(mha(x)))
		return l.Norm3.Forward(x.Add(ff(x)))
	})
}

// TransformerEncoder is nn.TransformerEncoder: layers.0.*, layers.1.*, ...
// and, optionally, a final norm.*. As in PyTorch (which deep-copies one
// layer), all layers start with identical weights.
type TransformerEncoder struct {
	Base
	Layers *ModuleList[*TransformerEncoderLayer]
	Norm   *LayerNorm // nil without a final norm
}

// NewTransformerEncoder stacks numLayers layers of config c; finalNorm adds
// a LayerNorm after the last (PyTorch's norm argument, usual with NormFirst).
func NewTransformerEncoder(c TransformerConfig, numLayers int, finalNorm bool) *TransformerEncoder {
	e := &TransformerEncoder{}
	e.Layers = RegisterModule(&e.Base, "layers", NewModuleList[*TransformerEncoderLayer]())
	for k := 0; k < numLayers; k++ {
		l := NewTransformerEncoderLayer(c)
		if k > 0 {
			copyState(l, e.Layers.Items[0])
		}
		e.Layers.Append(l)
	}
	if finalNorm {
		e.Norm = RegisterModule(&e.Base, "norm", c.norm())
	}
	return e
}

// copyState copies src's state dict values into dst (same architecture).
func copyState(dst, src Module) {
	d, s := StateDict(dst), StateDict(src)
	torch.NoGrad(func() {
		for k := range d {
			d[k].T.CopyFrom(s[k].T)
		}
	})
}

// Forward runs the layers in turn (o's masks apply to each) and the final norm.
func (e *TransformerEncoder) Forward(src *torch.Tensor, o AttnOpts) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		x := src
		for _, l := range e.Layers.Items {
			x = l.Forward(x, o)
		}
		if e.Norm != nil {
			x = e.Norm.Forward(x)
		}
		return x
	})
}
