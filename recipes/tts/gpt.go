package tts

import (
	"fmt"
	"math"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// GPTConfig sizes the GPT. DecoderDim and TextEncoderDim are the seed's
// model.decoder_dim and model.text_encoder_dim.
type GPTConfig struct {
	DecoderDim     int64   `json:"decoder_dim"`      // the transformer's width
	TextEncoderDim int64   `json:"text_encoder_dim"` // the phoneme embeddings' width (projected to DecoderDim when different)
	Layers         int     `json:"layers"`
	Heads          int64   `json:"heads"`
	FF             int64   `json:"ff"` // feed-forward width
	Dropout        float64 `json:"dropout"`
	CondLatents    int64   `json:"cond_latents"` // speaker latents from the reference clip
	Vocab          int64   `json:"vocab"`        // phoneme vocabulary (specials included)
	Codes          int64   `json:"codes"`        // the codec's codebook
	MaxText        int64   `json:"max_text"`     // phonemes per utterance
	MaxCodes       int64   `json:"max_codes"`    // codes per utterance
	// TextWeight and CodeWeight weigh the two cross-entropies as XTTS
	// does (0.01 and 1); TextRatio, the training split's codes per
	// phoneme, turns the text term into a per-code sum (see Model.Loss).
	TextWeight float64 `json:"text_weight"`
	CodeWeight float64 `json:"code_weight"`
	TextRatio  float64 `json:"text_ratio"`
	// GradCheckpointing recomputes each transformer block in backward
	// (model.enable_gradient_checkpointing).
	GradCheckpointing bool `json:"-"`
	// AlignedPositions starts the positions as sinusoids, the audio
	// stream's at the text's rate (see alignedPositions); else N(0, 0.02)
	// like the other embeddings.
	AlignedPositions bool `json:"aligned_positions,omitempty"`
}

// Validate checks the sizes.
func (c GPTConfig) Validate() error {
	switch {
	case c.DecoderDim < 2 || c.DecoderDim > 8192:
		return fmt.Errorf("tts: decoder_dim %d outside [2, 8192]", c.DecoderDim)
	case c.TextEncoderDim < 1 || c.TextEncoderDim > 8192:
		return fmt.Errorf("tts: text_encoder_dim %d outside [1, 8192]", c.TextEncoderDim)
	case c.Heads < 1 || c.DecoderDim%c.Heads != 0:
		return fmt.Errorf("tts: decoder_dim %d is not divisible by %d heads", c.DecoderDim, c.Heads)
	case c.Layers < 1 || c.Layers > 256:
		return fmt.Errorf("tts: %d layers outside [1, 256]", c.Layers)
	case c.FF < 1 || c.FF > 1<<16:
		return fmt.Errorf("tts: feed-forward width %d outside [1, 65536]", c.FF)
	case c.CondLatents < 1 || c.CondLatents > 1024:
		return fmt.Errorf("tts: %d conditioning latents outside [1, 1024]", c.CondLatents)
	case c.Vocab < 3 || c.Vocab > 1<<16:
		return fmt.Errorf("tts: phoneme vocabulary of %d outside [3, 65536]", c.Vocab)
	case c.Codes < 2 || c.Codes > 1<<16:
		return fmt.Errorf("tts: %d codes outside [2, 65536]", c.Codes)
	case c.MaxText < 1 || c.MaxText > 1<<16 || c.MaxCodes < 1 || c.MaxCodes > 1<<16:
		return fmt.Errorf("tts: maximum lengths %d phonemes / %d codes outside [1, 65536]", c.MaxText, c.MaxCodes)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("tts: dropout %v outside [0, 1)", c.Dropout)
	case !(c.TextWeight >= 0 && c.CodeWeight > 0 && c.TextRatio > 0) || math.IsInf(c.TextWeight+c.CodeWeight+c.TextRatio, 0):
		return fmt.Errorf("tts: loss weights text %v, codes %v, ratio %v", c.TextWeight, c.CodeWeight, c.TextRatio)
	}
	return nil
}

// Token ids beyond each vocabulary: the start and stop tokens of the text
// stream (after the phonemes) and of the audio stream (after the codes).
func (c GPTConfig) textStart() int64  { return c.Vocab }
func (c GPTConfig) textStop() int64   { return c.Vocab + 1 }
func (c GPTConfig) audioStart() int64 { return c.Codes }
func (c GPTConfig) audioStop() int64  { return c.Codes + 1 }

// Token kinds in a batch's "kind" field.
const (
	kindPad   = 0
	kindText  = 1 // the text stream: start, phonemes, stop
	kindAudio = 2 // the audio stream: start, codes, stop
)

// block is a pre-norm GPT-2 block: x + attn(ln1(x)), x + mlp(ln2(x)).
type block struct {
	nn.Base
	LN1  *nn.LayerNorm
	QKV  *nn.Linear
	Proj *nn.Linear
	LN2  *nn.LayerNorm
	FC1  *nn.Linear
	FC2  *nn.Linear
	Drop *nn.Dropout

	heads int64
}

func newBlock(c GPTConfig) *block {
	b := &block{heads: c.Heads}
	d := c.DecoderDim
	b.LN1 = nn.RegisterModule(&b.Base, "ln1", nn.NewLayerNorm(d))
	b.QKV = nn.RegisterModule(&b.Base, "qkv", nn.NewLinear(d, 3*d, true))
	b.Proj = nn.RegisterModule(&b.Base, "proj", nn.NewLinear(d, d, true))
	b.LN2 = nn.RegisterModule(&b.Base, "ln2", nn.NewLayerNorm(d))
	b.FC1 = nn.RegisterModule(&b.Base, "fc1", nn.NewLinear(d, c.FF, true))
	b.FC2 = nn.RegisterModule(&b.Base, "fc2", nn.NewLinear(c.FF, d, true))
	b.Drop = nn.RegisterModule(&b.Base, "drop", nn.NewDropout(c.Dropout))
	return b
}

// kvCache holds a block's keys and values (B, heads, S, head dim) of the
// positions seen so far.
type kvCache struct{ k, v *torch.Tensor }

func (c *kvCache) free() {
	c.k.Free()
	c.v.Free()
	c.k, c.v = nil, nil
}

// forward runs the block on x (B, L, D). With a cache, x holds the L
// positions after the cached ones, and the cache grows by them (its
// tensors are kept out of the enclosing scope).
func (b *block) forward(x *torch.Tensor, cache *kvCache) *torch.Tensor {
	s := x.Shape()
	n, l, d := s[0], s[1], s[2]
	h, dh := b.heads, d/b.heads
	qkv := b.QKV.Forward(b.LN1.Forward(x)).View(n, l, 3, h, dh).Permute(2, 0, 3, 1, 4)
	// One unbind, not three selects: its backward is one stack, where each
	// select's fills and copies a gradient the size of qkv and the three
	// are added (nn.MultiheadAttention's projection does the same).
	parts := qkv.Unbind(0)
	q, k, v := parts[0], parts[1], parts[2]
	if cache != nil {
		if cache.k != nil {
			k = torch.Cat([]*torch.Tensor{cache.k, k}, 2)
			v = torch.Cat([]*torch.Tensor{cache.v, v}, 2)
		}
		old := *cache
		cache.k, cache.v = k.Ref().Keep(), v.Ref().Keep()
		old.free()
	}
	// Query i sits at total−l+i and sees keys up to there; the attention is
	// nn.DotProductAttention's (SDPA on 2.x, the fused kernel on 1.13).
	o := nn.AttnOpts{Causal: l > 1, CausalOffset: k.Size(2) - l}
	p := 0.0
	if b.Drop.Training() {
		p = b.Drop.P
	}
	att, _ := nn.DotProductAttention(q, k, v, o, p)
	y := att.Transpose(1, 2).Reshape(n, l, d)
	x = x.Add(b.Drop.Forward(b.Proj.Forward(y)))
	return x.Add(b.Drop.Forward(b.FC2.Forward(b.FC1.Forward(b.LN2.Forward(x)).Gelu())))
}

// CondEncoder turns a reference clip's normalised log-mels into speaker
// latents: two convolutions (the second halves the frame rate), a
// transformer layer, then CondLatents learned queries attending to the
// frames (XTTS's conditioning encoder and perceiver resampler, shrunk).
type CondEncoder struct {
	nn.Base
	Conv1, Conv2 *nn.Conv
	Layer        *nn.TransformerEncoderLayer
	Latents      *torch.Tensor // (CondLatents, D)
	Attn         *nn.MultiheadAttention
	Norm         *nn.LayerNorm
}

func newCondEncoder(c GPTConfig) *CondEncoder {
	e := &CondEncoder{}
	d := c.DecoderDim
	e.Conv1 = nn.RegisterModule(&e.Base, "conv1", nn.NewConv1d(NMels, d, 3, torch.ConvOpts{Padding: []int64{1}}, true))
	e.Conv2 = nn.RegisterModule(&e.Base, "conv2", nn.NewConv1d(d, d, 3, torch.ConvOpts{Stride: []int64{2}, Padding: []int64{1}}, true))
	tc := nn.DefaultTransformerConfig(d, c.Heads)
	tc.DimFeedforward, tc.Dropout, tc.Activation, tc.BatchFirst, tc.NormFirst = c.FF, c.Dropout, "gelu", true, true
	e.Layer = nn.RegisterModule(&e.Base, "layer", nn.NewTransformerEncoderLayer(tc))
	e.Latents = e.RegisterParam("latents", torch.Randn([]int64{c.CondLatents, d}).MulScalarIn(0.02))
	e.Attn = nn.RegisterModule(&e.Base, "attn", nn.NewMultiheadAttention(d, c.Heads, 0, true))
	e.Norm = nn.RegisterModule(&e.Base, "norm", nn.NewLayerNorm(d))
	return e
}

// condFrames is the longest reference clip used (6 s); longer clips are cut.
const condFrames = 375

// Forward returns latents (B, CondLatents, D) of mels (B, T, NMels) with
// lengths lens (int64 [B]; nil: all T).
func (e *CondEncoder) Forward(mel, lens *torch.Tensor) *torch.Tensor {
	// In a scope of its own, so what backward does not keep is released
	// before the GPT runs.
	return torch.TidyTensor(func() *torch.Tensor { return e.forward(mel, lens) })
}

func (e *CondEncoder) forward(mel, lens *torch.Tensor) *torch.Tensor {
	n, t := mel.Size(0), mel.Size(1)
	tt := (t + 1) / 2 // conv2: kernel 3, stride 2, padding 1
	// Frame j after conv2 is padding when 2j reaches the clip's length
	// (at most T): j ≥ ⌈l/2⌉, the Python twin's arange(T') ≥ (l+1)//2.
	// The mask is made on the device from the lengths: nothing is read on
	// the host or copied from it, which on a GPU would wait for the
	// kernels queued before, and could not be captured in a CUDA graph.
	var mask *torch.Tensor
	if lens != nil {
		if lens.Device() != mel.Device() {
			lens = lens.ToDevice(mel.Device())
		}
		mask = torch.Arange(0, float64(2*tt), 2, mel.Device()).Unsqueeze(0).Ge(lens.ClampMax(float64(t)).Unsqueeze(1))
	}
	x := e.Conv1.Forward(mel.Transpose(1, 2)).Gelu()
	// Transposed before the GELU: libtorch 1.13's GELU backward computes
	// garbage for a non-contiguous incoming gradient, which a transpose
	// after it would give it (TestLossesMatchPython caught it).
	x = e.Conv2.Forward(x).Transpose(1, 2).Gelu() // (B, T', D)
	if x.Size(1) != tt {
		panic(&torch.Error{Op: "CondEncoder", Msg: fmt.Sprintf("conv2 gave %d frames for %d, want %d", x.Size(1), t, tt)})
	}
	x = e.Layer.Forward(x, nn.AttnOpts{KeyPaddingMask: mask})
	q := e.Latents.Unsqueeze(0).Expand(n, -1, -1)
	out, _ := e.Attn.Forward(q, x, x, nn.AttnOpts{KeyPaddingMask: mask})
	return e.Norm.Forward(out.Add(q))
}

// GPT is the autoregressive model over [speaker latents | text stream |
// audio stream] with a head for each stream.
type GPT struct {
	nn.Base
	Cfg        GPTConfig
	Cond       *CondEncoder
	TextEmbed  *nn.Embedding
	TextProj   *nn.Linear // nil when TextEncoderDim == DecoderDim
	TextPos    *nn.Embedding
	AudioEmbed *nn.Embedding
	AudioPos   *nn.Embedding
	Blocks     *nn.ModuleList[*block]
	LNF        *nn.LayerNorm
	TextHead   *nn.Linear
	AudioHead  *nn.Linear
}

// NewGPT builds a GPT (GPT-2 initialisation: N(0, 0.02) weights, residual
// projections scaled by 1/√(2·layers)).
func NewGPT(cfg GPTConfig) (*GPT, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &GPT{Cfg: cfg}
	d := cfg.DecoderDim
	err := torch.Try(func() {
		g.Cond = nn.RegisterModule(&g.Base, "cond", newCondEncoder(cfg))
		g.TextEmbed = nn.RegisterModule(&g.Base, "text_embed", nn.NewEmbedding(cfg.Vocab+2, cfg.TextEncoderDim))
		if cfg.TextEncoderDim != d {
			g.TextProj = nn.RegisterModule(&g.Base, "text_proj", nn.NewLinear(cfg.TextEncoderDim, d, false))
		}
		g.TextPos = nn.RegisterModule(&g.Base, "text_pos", nn.NewEmbedding(cfg.MaxText+2, d))
		g.AudioEmbed = nn.RegisterModule(&g.Base, "audio_embed", nn.NewEmbedding(cfg.Codes+2, d))
		g.AudioPos = nn.RegisterModule(&g.Base, "audio_pos", nn.NewEmbedding(cfg.MaxCodes+2, d))
		g.Blocks = nn.RegisterModule(&g.Base, "blocks", nn.NewModuleList[*block]())
		for range cfg.Layers {
			g.Blocks.Append(newBlock(cfg))
		}
		g.LNF = nn.RegisterModule(&g.Base, "ln_f", nn.NewLayerNorm(d))
		g.TextHead = nn.RegisterModule(&g.Base, "text_head", nn.NewLinear(d, cfg.Vocab+2, true))
		g.AudioHead = nn.RegisterModule(&g.Base, "audio_head", nn.NewLinear(d, cfg.Codes+2, true))
		torch.NoGrad(func() {
			for _, e := range []*nn.Embedding{g.TextEmbed, g.TextPos, g.AudioEmbed, g.AudioPos} {
				nn.Normal(e.Weight, 0, 0.02)
			}
			if cfg.AlignedPositions {
				torch.Tidy(func() { // the tables freed here, not by a later GC
					g.TextPos.Weight.CopyFrom(alignedPositions(cfg.MaxText+2, d, 1))
					g.AudioPos.Weight.CopyFrom(alignedPositions(cfg.MaxCodes+2, d, 1/cfg.TextRatio))
				})
			}
			resid := 0.02 / math.Sqrt(2*float64(cfg.Layers))
			for _, b := range g.Blocks.Items {
				for _, l := range []*nn.Linear{b.QKV, b.FC1, g.TextHead, g.AudioHead} {
					nn.Normal(l.Weight, 0, 0.02)
					nn.Zeros(l.Bias)
				}
				for _, l := range []*nn.Linear{b.Proj, b.FC2} {
					nn.Normal(l.Weight, 0, resid)
					nn.Zeros(l.Bias)
				}
			}
		})
	})
	if err != nil {
		nn.Free(g)
		return nil, err
	}
	return g, nil
}

// alignedPositions is nn.SinusoidTable of positions 0…n−1 scaled by rate,
// at the size of the embeddings' N(0, 0.02) (0.02·√2 each component).
//
// With rate 1/TextRatio for the audio stream, code j starts where phoneme
// j/TextRatio does, at the training split's average speaking rate: the
// query of a code already resembles the key of the phoneme it is likely
// to say, so attention starts near the monotonic alignment a TTS model
// must otherwise find from scratch, and learned positions (still trained)
// only correct it.
func alignedPositions(n, d int64, rate float64) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor { return nn.SinusoidTable(d, n, rate).MulScalar(0.02 * math.Sqrt2) })
}

// Embed returns the embeddings (B, L, D) of token ids (B, L) of the given
// kinds (kindText or kindAudio; padding is embedded as text) at their
// positions within their stream.
func (g *GPT) Embed(ids, kind, pos *torch.Tensor) *torch.Tensor {
	// In a scope of its own: the two streams' embeddings and sums are not
	// needed by backward (torch.where keeps only its condition), and are
	// released before the blocks run.
	return torch.TidyTensor(func() *torch.Tensor {
		audio := kind.EqScalar(kindAudio)
		zero := torch.ZerosLike(ids)
		te := g.TextEmbed.Forward(torch.Where(audio, zero, ids))
		if g.TextProj != nil {
			te = g.TextProj.Forward(te)
		}
		te = te.Add(g.TextPos.Forward(torch.Where(audio, zero, pos)))
		ae := g.AudioEmbed.Forward(torch.Where(audio, ids, zero)).Add(g.AudioPos.Forward(torch.Where(audio, pos, zero)))
		return torch.Where(audio.Unsqueeze(-1), ae, te)
	})
}

// Forward returns the final hidden states (B, N+L, D) of latents (B, N, D)
// followed by the tokens' embeddings (B, L, D). With caches (one per
// block), the inputs continue the cached positions.
func (g *GPT) Forward(latents, emb *torch.Tensor, caches []kvCache) *torch.Tensor {
	x := emb
	if latents != nil {
		x = torch.Cat([]*torch.Tensor{latents, emb}, 1)
	}
	ckpt := g.Cfg.GradCheckpointing && g.Training() && torch.GradEnabled() && caches == nil
	// Each block runs in a scope of its own, and its output is released
	// once the next block has run (autograd keeps what backward needs).
	x = torch.Pipe(x, len(g.Blocks.Items), func(i int, x *torch.Tensor) *torch.Tensor {
		b := g.Blocks.Items[i]
		switch {
		case caches != nil:
			return b.forward(x, &caches[i])
		case ckpt:
			return torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{b.forward(in[0], nil)}
			}, x)[0]
		default:
			return b.forward(x, nil)
		}
	})
	return g.LNF.Forward(x)
}
