package clip

import (
	"fmt"
	"math"
	"strings"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// Config is a CLIP model's shape: the arguments of OpenAI's
// clip.model.CLIP (and its build_model), plus the heads, which OpenAI
// derives as width/64 (what Infer assumes for a bare state dict).
type Config struct {
	EmbedDim          int64 `json:"embed_dim"`
	ImageResolution   int64 `json:"image_resolution"`
	VisionLayers      int   `json:"vision_layers"`
	VisionWidth       int64 `json:"vision_width"`
	VisionHeads       int64 `json:"vision_heads"`
	VisionPatchSize   int64 `json:"vision_patch_size"`
	ContextLength     int64 `json:"context_length"`
	VocabSize         int64 `json:"vocab_size"`
	TransformerWidth  int64 `json:"transformer_width"`
	TransformerHeads  int64 `json:"transformer_heads"`
	TransformerLayers int   `json:"transformer_layers"`
	// GradCheckpointing recomputes each residual block in backward
	// (not stored: a training setting).
	GradCheckpointing bool `json:"-"`
}

// Limits on a configuration (far above the presets), checked before any
// allocation: a checkpoint's description is untrusted.
const (
	maxWidth  = 1 << 13
	maxLayers = 1 << 8
	maxTokens = 1 << 12
	maxVocab  = 1 << 20
	maxRes    = 1 << 12
)

// Validate checks the shape's ranges and divisibility.
func (c Config) Validate() error {
	for _, b := range []struct {
		name      string
		v, lo, hi int64
	}{
		{"embed_dim", c.EmbedDim, 1, maxWidth},
		{"image_resolution", c.ImageResolution, 1, maxRes},
		{"vision_layers", int64(c.VisionLayers), 1, maxLayers},
		{"vision_width", c.VisionWidth, 1, maxWidth},
		{"vision_heads", c.VisionHeads, 1, maxWidth},
		{"vision_patch_size", c.VisionPatchSize, 1, maxRes},
		{"context_length", c.ContextLength, 3, maxTokens},
		{"vocab_size", c.VocabSize, 4, maxVocab},
		{"transformer_width", c.TransformerWidth, 1, maxWidth},
		{"transformer_heads", c.TransformerHeads, 1, maxWidth},
		{"transformer_layers", int64(c.TransformerLayers), 1, maxLayers},
	} {
		if b.v < b.lo || b.v > b.hi {
			return fmt.Errorf("%s %d outside [%d, %d]", b.name, b.v, b.lo, b.hi)
		}
	}
	switch {
	case c.ImageResolution%c.VisionPatchSize != 0:
		return fmt.Errorf("image_resolution %d is not a multiple of vision_patch_size %d", c.ImageResolution, c.VisionPatchSize)
	case (c.ImageResolution/c.VisionPatchSize)*(c.ImageResolution/c.VisionPatchSize)+1 > maxTokens:
		return fmt.Errorf("%d image patches: at most %d", (c.ImageResolution/c.VisionPatchSize)*(c.ImageResolution/c.VisionPatchSize), maxTokens-1)
	case c.VisionWidth%c.VisionHeads != 0:
		return fmt.Errorf("vision_width %d is not a multiple of vision_heads %d", c.VisionWidth, c.VisionHeads)
	case c.TransformerWidth%c.TransformerHeads != 0:
		return fmt.Errorf("transformer_width %d is not a multiple of transformer_heads %d", c.TransformerWidth, c.TransformerHeads)
	}
	return nil
}

// Grid is the number of patches per side.
func (c Config) Grid() int64 { return c.ImageResolution / c.VisionPatchSize }

// layerNorm is OpenAI CLIP's LayerNorm: computed in float32 whatever the
// input's dtype (under autocast), returned in the input's dtype.
func layerNorm(l *nn.LayerNorm, x *torch.Tensor) *torch.Tensor {
	if dt := x.DType(); dt != torch.Float32 && dt != torch.Float64 {
		return l.Forward(x.ToDType(torch.Float32)).ToDType(dt)
	}
	return l.Forward(x)
}

// quickGELU is OpenAI CLIP's activation, x·σ(1.702x).
func quickGELU(x *torch.Tensor) *torch.Tensor {
	s := x.MulScalar(1.702)
	defer s.Free() // the sigmoid keeps its output, not its input
	return x.Mul(s.Sigmoid())
}

// mlp is a residual block's feed-forward: c_fc, QuickGELU, c_proj.
type mlp struct {
	nn.Base
	CFc, CProj *nn.Linear
}

// resBlock is OpenAI's ResidualAttentionBlock: attn, ln_1, mlp, ln_2
// (pre-norm), batch-first here (OpenAI permutes to sequence-first; the
// numbers are the same).
type resBlock struct {
	nn.Base
	Attn     *nn.MultiheadAttention
	Ln1, Ln2 *nn.LayerNorm
	MLP      *mlp
	causal   bool
}

func newResBlock(width, heads int64, causal bool) *resBlock {
	b := &resBlock{causal: causal}
	b.Attn = nn.RegisterModule(&b.Base, "attn", nn.NewMultiheadAttention(width, heads, 0, true))
	b.Ln1 = nn.RegisterModule(&b.Base, "ln_1", nn.NewLayerNorm(width))
	b.MLP = nn.RegisterModule(&b.Base, "mlp", &mlp{})
	b.MLP.CFc = nn.RegisterModule(&b.MLP.Base, "c_fc", nn.NewLinear(width, 4*width, true))
	b.MLP.CProj = nn.RegisterModule(&b.MLP.Base, "c_proj", nn.NewLinear(4*width, width, true))
	b.Ln2 = nn.RegisterModule(&b.Base, "ln_2", nn.NewLayerNorm(width))
	return b
}

func (b *resBlock) forward(x *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		// Each temporary is released once used, as Python's reference
		// counting releases it: autograd keeps what backward needs (under
		// autocast, bf16 copies of the norms' outputs).
		h := layerNorm(b.Ln1, x)
		a, _ := b.Attn.Forward(h, h, h, nn.AttnOpts{Causal: b.causal})
		h.Free()
		x = x.Add(a)
		a.Free()
		h = layerNorm(b.Ln2, x)
		f := b.MLP.CFc.Forward(h)
		h.Free()
		g := quickGELU(f)
		f.Free()
		h = b.MLP.CProj.Forward(g)
		g.Free()
		return x.Add(h)
	})
}

// transformer is OpenAI's Transformer: resblocks.N.
type transformer struct {
	nn.Base
	Blocks     *nn.ModuleList[*resBlock]
	Width      int64
	checkpoint bool
}

func newTransformer(width int64, layers int, heads int64, causal bool) *transformer {
	t := &transformer{Width: width}
	blocks := make([]*resBlock, layers)
	for i := range blocks {
		blocks[i] = newResBlock(width, heads, causal)
	}
	t.Blocks = nn.RegisterModule(&t.Base, "resblocks", nn.NewModuleList(blocks...))
	return t
}

func (t *transformer) forward(x *torch.Tensor) *torch.Tensor {
	for _, b := range t.Blocks.Items {
		if t.checkpoint && x.RequiresGrad() {
			b := b
			x = torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor { return []*torch.Tensor{b.forward(in[0])} }, x)[0]
		} else {
			x = b.forward(x)
		}
	}
	return x
}

// visionTransformer is OpenAI's VisionTransformer: class_embedding,
// positional_embedding, proj, conv1, ln_pre, transformer, ln_post.
type visionTransformer struct {
	nn.Base
	ClassEmbedding, PositionalEmbedding, Proj *torch.Tensor
	Conv1                                     *nn.Conv
	LnPre, LnPost                             *nn.LayerNorm
	Transformer                               *transformer
}

func newVisionTransformer(c Config) *visionTransformer {
	w := c.VisionWidth
	v := &visionTransformer{}
	scale := 1 / math.Sqrt(float64(w))
	// PyTorch registers these parameters first in state_dict order
	// (a module's own parameters come before its children's).
	v.ClassEmbedding = v.RegisterParam("class_embedding", torch.Randn([]int64{w}).MulScalarIn(scale))
	v.PositionalEmbedding = v.RegisterParam("positional_embedding", torch.Randn([]int64{c.Grid()*c.Grid() + 1, w}).MulScalarIn(scale))
	v.Proj = v.RegisterParam("proj", torch.Randn([]int64{w, c.EmbedDim}).MulScalarIn(scale))
	p := c.VisionPatchSize
	v.Conv1 = nn.RegisterModule(&v.Base, "conv1", nn.NewConv2d(3, w, []int64{p, p}, torch.ConvOpts{Stride: []int64{p}}, false))
	v.LnPre = nn.RegisterModule(&v.Base, "ln_pre", nn.NewLayerNorm(w))
	v.Transformer = nn.RegisterModule(&v.Base, "transformer", newTransformer(w, c.VisionLayers, c.VisionHeads, false))
	v.LnPost = nn.RegisterModule(&v.Base, "ln_post", nn.NewLayerNorm(w))
	return v
}

func (v *visionTransformer) forward(img *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		x := v.Conv1.Forward(img) // (N, width, grid, grid)
		n, w := x.Size(0), x.Size(1)
		x = x.Reshape(n, w, -1).Permute(0, 2, 1) // (N, grid², width)
		cls := v.ClassEmbedding.ToDType(x.DType()).Reshape(1, 1, w).Expand(n, 1, w)
		x = torch.Cat([]*torch.Tensor{cls, x}, 1)
		x = x.Add(v.PositionalEmbedding.ToDType(x.DType()))
		x = v.Transformer.forward(layerNorm(v.LnPre, x))
		x = layerNorm(v.LnPost, x.Select(1, 0))
		return x.Matmul(v.Proj.ToDType(x.DType()))
	})
}

// Model is CLIP with OpenAI's (and open_clip's) state-dict names:
// positional_embedding, text_projection, logit_scale, visual.*,
// transformer.resblocks.N.*, token_embedding.weight, ln_final.*. A state
// dict saved from OpenAI's model (or open_clip's with QuickGELU) of the
// same shape loads strictly.
type Model struct {
	nn.Base
	Cfg                                             Config
	PositionalEmbedding, TextProjection, LogitScale *torch.Tensor
	Visual                                          *visionTransformer
	Transformer                                     *transformer
	TokenEmbedding                                  *nn.Embedding
	LnFinal                                         *nn.LayerNorm
}

// maxLogitScale is the clamp on the learned temperature: exp(logit_scale)
// at most 100 (OpenAI, open_clip clamp the parameter to ln 100 after each
// optimizer step; see ClampLogitScale).
var maxLogitScale = math.Log(100)

// NewModel builds a CLIP initialised as OpenAI's initialize_parameters
// does (the vision tower keeps PyTorch's default initialisation there).
func NewModel(c Config) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Cfg: c}
	w := c.TransformerWidth
	m.PositionalEmbedding = m.RegisterParam("positional_embedding", torch.Empty([]int64{c.ContextLength, w}))
	m.TextProjection = m.RegisterParam("text_projection", torch.Empty([]int64{w, c.EmbedDim}))
	m.LogitScale = m.RegisterParam("logit_scale", torch.Scalar(math.Log(1/0.07)))
	m.Visual = nn.RegisterModule(&m.Base, "visual", newVisionTransformer(c))
	m.Transformer = nn.RegisterModule(&m.Base, "transformer", newTransformer(w, c.TransformerLayers, c.TransformerHeads, true))
	m.TokenEmbedding = nn.RegisterModule(&m.Base, "token_embedding", nn.NewEmbedding(c.VocabSize, w))
	m.LnFinal = nn.RegisterModule(&m.Base, "ln_final", nn.NewLayerNorm(w))

	torch.NoGrad(func() {
		nn.Normal(m.TokenEmbedding.Weight, 0, 0.02)
		nn.Normal(m.PositionalEmbedding, 0, 0.01)
		fw := float64(w)
		proj := math.Pow(fw, -0.5) * math.Pow(2*float64(c.TransformerLayers), -0.5)
		attn := math.Pow(fw, -0.5)
		fc := math.Pow(2*fw, -0.5)
		for _, b := range m.Transformer.Blocks.Items {
			nn.Normal(b.Attn.InProjWeight, 0, attn)
			nn.Normal(b.Attn.OutProj.Weight, 0, proj)
			nn.Normal(b.MLP.CFc.Weight, 0, fc)
			nn.Normal(b.MLP.CProj.Weight, 0, proj)
		}
		nn.Normal(m.TextProjection, 0, math.Pow(fw, -0.5))
	})
	m.SetGradCheckpointing(c.GradCheckpointing)
	return m, nil
}

// SetGradCheckpointing turns activation checkpointing of every residual
// block on or off.
func (m *Model) SetGradCheckpointing(on bool) {
	m.Cfg.GradCheckpointing = on
	m.Transformer.checkpoint = on
	m.Visual.Transformer.checkpoint = on
}

// EncodeImage returns the image embeddings (N, embed_dim) of images (N, 3,
// res, res), normalised as CLIP's preprocess does.
func (m *Model) EncodeImage(img *torch.Tensor) *torch.Tensor {
	if img.Dim() != 4 || img.Size(1) != 3 || img.Size(2) != m.Cfg.ImageResolution || img.Size(3) != m.Cfg.ImageResolution {
		panic(&torch.Error{Op: "clip.EncodeImage", Msg: fmt.Sprintf("images %v, want (N, 3, %d, %d)", img.Shape(), m.Cfg.ImageResolution, m.Cfg.ImageResolution)})
	}
	return m.Visual.forward(img)
}

// EncodeText returns the text embeddings (N, embed_dim) of token ids (N,
// context_length): the final layer's features at each text's end token
// (the highest id, found by argmax as in OpenAI's encode_text).
func (m *Model) EncodeText(tokens *torch.Tensor) *torch.Tensor {
	if tokens.Dim() != 2 || tokens.Size(1) != m.Cfg.ContextLength {
		panic(&torch.Error{Op: "clip.EncodeText", Msg: fmt.Sprintf("tokens %v, want (N, %d)", tokens.Shape(), m.Cfg.ContextLength)})
	}
	return torch.TidyTensor(func() *torch.Tensor {
		x := m.TokenEmbedding.Forward(tokens)
		x = x.Add(m.PositionalEmbedding.ToDType(x.DType()))
		x = layerNorm(m.LnFinal, m.Transformer.forward(x))
		n := tokens.Size(0)
		rows := torch.Arange(0, float64(n), 1, x.Device())
		x = x.Index(rows, tokens.Argmax(-1, false))
		return x.Matmul(m.TextProjection.ToDType(x.DType()))
	})
}

// Logits returns logits_per_image (N, N): exp(logit_scale) times the
// cosine similarities of image and text embeddings; logits_per_text is its
// transpose.
func (m *Model) Logits(img, txt *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		in := img.Div(img.NormDim(2, []int64{-1}, true))
		tn := txt.Div(txt.NormDim(2, []int64{-1}, true))
		return in.Matmul(tn.T()).Mul(m.LogitScale.Exp().ToDType(in.DType()))
	})
}

// Loss is CLIP's symmetric contrastive loss over a batch of pairs:
// (CE(logits_per_image, arange) + CE(logits_per_text, arange)) / 2, every
// other row of the batch a negative.
func (m *Model) Loss(img, txt *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		logits := m.Logits(img, txt)
		labels := torch.Arange(0, float64(logits.Size(0)), 1, logits.Device())
		a := torch.CrossEntropy(logits, labels, nil, torch.ReduceMean, -100, 0)
		b := torch.CrossEntropy(logits.T(), labels, nil, torch.ReduceMean, -100, 0)
		return a.Add(b).DivScalar(2)
	})
}

// ClampLogitScale clamps logit_scale to [0, ln 100] in place, as
// open_clip does after every optimizer step.
func (m *Model) ClampLogitScale() {
	torch.NoGrad(func() { m.LogitScale.ClampIn(0, maxLogitScale) })
}

// Infer returns the configuration of a CLIP state dict from its shapes, as
// OpenAI's build_model does (heads: width/64, at least 1).
func Infer(sd map[string]*torch.Tensor) (Config, error) {
	get := func(k string, dims int) ([]int64, error) {
		t, ok := sd[k]
		if !ok {
			return nil, fmt.Errorf("no %s (not a CLIP state dict with OpenAI's names)", k)
		}
		if s := t.Shape(); len(s) != dims {
			return nil, fmt.Errorf("%s has shape %v", k, s)
		}
		return t.Shape(), nil
	}
	var c Config
	conv, err := get("visual.conv1.weight", 4)
	if err != nil {
		return c, err
	}
	pos, err := get("visual.positional_embedding", 2)
	if err != nil {
		return c, err
	}
	tp, err := get("text_projection", 2)
	if err != nil {
		return c, err
	}
	tpos, err := get("positional_embedding", 2)
	if err != nil {
		return c, err
	}
	tok, err := get("token_embedding.weight", 2)
	if err != nil {
		return c, err
	}
	c.VisionWidth, c.VisionPatchSize = conv[0], conv[3]
	grid := int64(math.Round(math.Sqrt(float64(pos[0] - 1))))
	if grid*grid+1 != pos[0] {
		return c, fmt.Errorf("visual.positional_embedding has %d rows, not a square grid plus one", pos[0])
	}
	c.ImageResolution = grid * c.VisionPatchSize
	c.EmbedDim = tp[1]
	c.ContextLength, c.TransformerWidth = tpos[0], tpos[1]
	c.VocabSize = tok[0]
	c.VisionLayers = countBlocks(sd, "visual.transformer.resblocks.")
	c.TransformerLayers = countBlocks(sd, "transformer.resblocks.")
	c.VisionHeads, c.TransformerHeads = max(1, c.VisionWidth/64), max(1, c.TransformerWidth/64)
	return c, c.Validate()
}

// countBlocks returns n when the keys under prefix are blocks 0…n−1.
func countBlocks(sd map[string]*torch.Tensor, prefix string) int {
	seen := map[string]bool{}
	for k := range sd {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			num, _, _ := strings.Cut(rest, ".")
			seen[num] = true
		}
	}
	for i := range len(seen) {
		if !seen[fmt.Sprint(i)] {
			return -1
		}
	}
	return len(seen)
}
