package ganvit

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// CondDim is the width of the continuous conditions: the seed's
// `conditions` (GAN_BATCH_SIZE, 2) — here tempo and brightness, normalised.
const CondDim = 2

// GANConfig sizes the conditional GAN.
type GANConfig struct {
	Mels, Frames int64 // spectrogram shape (1, Mels, Frames)
	Latent       int64 // LATENT_DIM
	Classes      int64 // genres
	Embed        int64 // genre embedding width in the generator
	GenChannels  int64 // channels after the generator's first layer (halved per upsampling)
	DiscChannels int64 // channels of the discriminator's first convolution (doubled per downsampling)
	Ups          int   // upsamplings ×2 in the generator, downsamplings in the discriminator
}

// Validate checks the sizes.
func (c GANConfig) Validate() error {
	switch {
	case c.Ups >= 1 && c.Ups <= 6 && (c.Mels < max(8, int64(1)<<c.Ups) || c.Frames < max(8, int64(1)<<c.Ups)):
		// The discriminator halves both sides Ups times with 4×4 kernels.
		return fmt.Errorf("spectrogram %d × %d: %d downsamplings need at least %d mels and frames", c.Mels, c.Frames, c.Ups, max(8, int64(1)<<c.Ups))
	case c.Mels < 8 || c.Mels > 1024 || c.Frames < 8 || c.Frames > 1<<16:
		return fmt.Errorf("spectrogram %d × %d: mels in [8, 1024], frames in [8, 65536]", c.Mels, c.Frames)
	case c.Latent < 1 || c.Latent > 4096:
		return fmt.Errorf("latent dimension %d: want 1 to 4096", c.Latent)
	case c.Classes < 1 || c.Embed < 1 || c.Embed > 1024:
		return fmt.Errorf("classes %d, embedding %d", c.Classes, c.Embed)
	case c.Ups < 1 || c.Ups > 6:
		return fmt.Errorf("%d upsamplings: want 1 to 6", c.Ups)
	case c.GenChannels < 8 || c.GenChannels%(8<<c.Ups) != 0 || c.GenChannels > 4096:
		return fmt.Errorf("generator channels %d: want a multiple of %d up to 4096", c.GenChannels, 8<<c.Ups)
	case c.DiscChannels < 8 || c.DiscChannels%8 != 0 || c.DiscChannels<<(c.Ups-1) > 8192:
		return fmt.Errorf("discriminator channels %d: want a multiple of 8", c.DiscChannels)
	}
	return nil
}

// seed is the generator's starting grid: the spectrogram's size divided by
// 2^Ups, rounded up (the output is cropped to Mels × Frames).
func (c GANConfig) seed() (h, w int64) {
	f := int64(1) << c.Ups
	return (c.Mels + f - 1) / f, (c.Frames + f - 1) / f
}

func groups(ch int64) int64 { return min(8, ch) }

// groupNorm is nn.GroupNorm computed in its parameters' precision: CPU
// autocast in libtorch 1.13 passes group_norm a bfloat16 input with
// float32 parameters, which it refuses. Same state dict as nn.GroupNorm.
type groupNorm struct{ *nn.GroupNorm }

func newGroupNorm(ch int64) groupNorm { return groupNorm{nn.NewGroupNorm(groups(ch), ch)} }

func (g groupNorm) Forward(x *torch.Tensor) *torch.Tensor {
	if dt := g.Weight.DType(); x.DType() != dt {
		return torch.TidyTensor(func() *torch.Tensor { return g.GroupNorm.Forward(x.ToDType(dt)) })
	}
	return g.GroupNorm.Forward(x)
}

// Generator maps (z, conditions, genre) to a log-mel spectrogram
// (N, 1, Mels, Frames) in [−1, 1]: label_emb (genre → Embed), fc (z ‖
// conditions ‖ embedding → GenChannels·h0·w0), ReLU, then net: Ups blocks
// of ConvTranspose2d(4, stride 2, padding 1) + GroupNorm + ReLU halving
// the channels, a 3×3 Conv2d to one channel and tanh; cropped to the
// spectrogram's size. GroupNorm, not BatchNorm: a sample's output does not
// depend on the other samples of its micro-batch, so gradient
// accumulation gives the large batch's gradient.
type Generator struct {
	nn.Base
	Cfg      GANConfig
	LabelEmb *nn.Embedding
	FC       *nn.Linear
	Net      *nn.Sequential
}

// NewGenerator builds a generator (float32, CPU).
func NewGenerator(c GANConfig) *Generator {
	g := &Generator{Cfg: c}
	g.LabelEmb = nn.RegisterModule(&g.Base, "label_emb", nn.NewEmbedding(c.Classes, c.Embed))
	h, w := c.seed()
	g.FC = nn.RegisterModule(&g.Base, "fc", nn.NewLinear(c.Latent+CondDim+c.Embed, c.GenChannels*h*w, true))
	net := nn.NewSequential()
	ch := c.GenChannels
	for i := 0; i < c.Ups; i++ {
		net.Append(nn.NewConvTranspose2d(ch, ch/2, []int64{4}, torch.ConvOpts{Stride: []int64{2}, Padding: []int64{1}}, true))
		net.Append(newGroupNorm(ch / 2))
		net.Append(nn.NewReLU())
		ch /= 2
	}
	net.Append(nn.NewConv2d(ch, 1, []int64{3}, torch.ConvOpts{Padding: []int64{1}}, true))
	net.Append(nn.NewTanh())
	g.Net = nn.RegisterModule(&g.Base, "net", net)
	return g
}

// Forward generates spectrograms: z (N, Latent), cond (N, 2), genre (N) int64.
func (g *Generator) Forward(z, cond, genre *torch.Tensor) *torch.Tensor {
	c := g.Cfg
	h, w := c.seed()
	return torch.TidyTensor(func() *torch.Tensor {
		dt := g.FC.Weight.DType()
		in := torch.Cat([]*torch.Tensor{z.ToDType(dt), cond.ToDType(dt), g.LabelEmb.Forward(genre).ToDType(dt)}, 1)
		x := g.FC.Forward(in).Relu().Reshape(z.Size(0), c.GenChannels, h, w)
		x = g.Net.Forward(x)
		if x.Size(2) != c.Mels || x.Size(3) != c.Frames {
			x = x.Narrow(2, 0, c.Mels).Narrow(3, 0, c.Frames)
		}
		return x
	})
}

// Discriminator scores (spectrogram, conditions, genre): net, Ups blocks
// of Conv2d(4, stride 2, padding 1) + LeakyReLU(0.2) doubling the channels
// (GroupNorm after all but the first), averaged over time and frequency to
// h; the score is fc(h) + ⟨h, label_emb(genre) + cond_proj(conditions)⟩ —
// a projection discriminator (Miyato & Koyama 2018) for the genre and the
// continuous conditions.
type Discriminator struct {
	nn.Base
	Cfg      GANConfig
	Net      *nn.Sequential
	FC       *nn.Linear
	LabelEmb *nn.Embedding
	CondProj *nn.Linear
}

// NewDiscriminator builds a discriminator (float32, CPU).
func NewDiscriminator(c GANConfig) *Discriminator {
	d := &Discriminator{Cfg: c}
	net := nn.NewSequential()
	in, ch := int64(1), c.DiscChannels
	for i := 0; i < c.Ups; i++ {
		net.Append(nn.NewConv2d(in, ch, []int64{4}, torch.ConvOpts{Stride: []int64{2}, Padding: []int64{1}}, true))
		if i > 0 {
			net.Append(newGroupNorm(ch))
		}
		net.Append(nn.NewLeakyReLU(0.2))
		in, ch = ch, ch*2
	}
	d.Net = nn.RegisterModule(&d.Base, "net", net)
	d.FC = nn.RegisterModule(&d.Base, "fc", nn.NewLinear(in, 1, true))
	d.LabelEmb = nn.RegisterModule(&d.Base, "label_emb", nn.NewEmbedding(c.Classes, in))
	d.CondProj = nn.RegisterModule(&d.Base, "cond_proj", nn.NewLinear(CondDim, in, false))
	return d
}

// Forward scores spectrograms x (N, 1, Mels, Frames): logits (N, 1).
func (d *Discriminator) Forward(x, cond, genre *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		h := d.Net.Forward(x).MeanDim([]int64{2, 3}, false)
		proj := d.LabelEmb.Forward(genre).ToDType(h.DType()).Add(d.CondProj.Forward(cond.ToDType(h.DType())))
		return d.FC.Forward(h).Add(h.Mul(proj).SumDim([]int64{1}, true))
	})
}

// ViTConfig sizes a vision transformer (torchvision's VisionTransformer).
type ViTConfig struct {
	Name    string
	Image   int64 // input side: images are (3, Image, Image)
	Patch   int64
	Layers  int
	Heads   int64
	Hidden  int64
	MLP     int64
	Classes int64
}

// ViTConfigs are torchvision's vit_b_16 and the smaller ViT-S/16 and
// ViT-Ti/16 shapes (DeiT's), all at the seed's 224 × 224, and two CPU
// configurations: cpu (ViT-Ti's width at 112 × 112, 6 layers) and tiny
// (for tests).
var ViTConfigs = map[string]ViTConfig{
	"b16":  {Name: "b16", Image: 224, Patch: 16, Layers: 12, Heads: 12, Hidden: 768, MLP: 3072},
	"s16":  {Name: "s16", Image: 224, Patch: 16, Layers: 12, Heads: 6, Hidden: 384, MLP: 1536},
	"ti16": {Name: "ti16", Image: 224, Patch: 16, Layers: 12, Heads: 3, Hidden: 192, MLP: 768},
	"cpu":  {Name: "cpu", Image: 112, Patch: 16, Layers: 6, Heads: 3, Hidden: 192, MLP: 768},
	"tiny": {Name: "tiny", Image: 32, Patch: 16, Layers: 2, Heads: 2, Hidden: 16, MLP: 32},
}

// ViTNames lists ViTConfigs' names, sorted.
func ViTNames() []string {
	var out []string
	for k := range ViTConfigs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Validate checks the sizes.
func (c ViTConfig) Validate() error {
	switch {
	case c.Patch < 1 || c.Image < c.Patch || c.Image%c.Patch != 0 || c.Image > 4096:
		return fmt.Errorf("vit: image %d with patch %d: the image must be a multiple of the patch, at most 4096", c.Image, c.Patch)
	case c.Layers < 1 || c.Layers > 64:
		return fmt.Errorf("vit: %d layers: want 1 to 64", c.Layers)
	case c.Heads < 1 || c.Hidden < 1 || c.Hidden%c.Heads != 0 || c.Hidden > 8192:
		return fmt.Errorf("vit: hidden %d must be divisible by %d heads", c.Hidden, c.Heads)
	case c.MLP < 1 || c.MLP > 32768:
		return fmt.Errorf("vit: mlp %d", c.MLP)
	case c.Classes < 1:
		return fmt.Errorf("vit: %d classes", c.Classes)
	}
	return nil
}

// SeqLen is the number of tokens: patches plus the class token.
func (c ViTConfig) SeqLen() int64 { n := c.Image / c.Patch; return n*n + 1 }

// EncoderBlock is torchvision's EncoderBlock: ln_1, self_attention, ln_2,
// mlp (0: Linear, 1: GELU, 2: Dropout, 3: Linear, 4: Dropout); pre-norm,
// LayerNorm eps 1e-6.
type EncoderBlock struct {
	nn.Base
	LN1     *nn.LayerNorm
	Attn    *nn.MultiheadAttention
	Dropout *nn.Dropout
	LN2     *nn.LayerNorm
	MLP     *nn.Sequential
}

func newEncoderBlock(c ViTConfig) *EncoderBlock {
	b := &EncoderBlock{}
	b.LN1 = nn.RegisterModule(&b.Base, "ln_1", vitNorm(c.Hidden))
	b.Attn = nn.RegisterModule(&b.Base, "self_attention", nn.NewMultiheadAttention(c.Hidden, c.Heads, 0, true))
	b.Dropout = nn.RegisterModule(&b.Base, "dropout", nn.NewDropout(0))
	b.LN2 = nn.RegisterModule(&b.Base, "ln_2", vitNorm(c.Hidden))
	fc1, fc2 := nn.NewLinear(c.Hidden, c.MLP, true), nn.NewLinear(c.MLP, c.Hidden, true)
	for _, l := range []*nn.Linear{fc1, fc2} { // torchvision's MLPBlock init
		nn.XavierUniform(l.Weight, 1)
		nn.Normal(l.Bias, 0, 1e-6)
	}
	b.MLP = nn.RegisterModule(&b.Base, "mlp", nn.NewSequential(fc1, nn.NewGELU("none"), nn.NewDropout(0), fc2, nn.NewDropout(0)))
	return b
}

func vitNorm(d int64) *nn.LayerNorm {
	l := nn.NewLayerNorm(d)
	l.Eps = 1e-6
	return l
}

// Forward runs the block on x (N, L, Hidden).
func (b *EncoderBlock) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		// The norms' outputs are released once used, as Python's rebinding
		// does: under autocast the projections keep bf16 copies of them.
		ln := b.LN1.Forward(x)
		y, _ := b.Attn.Forward(ln, ln, ln, nn.AttnOpts{})
		ln.Free()
		x = b.Dropout.Forward(y).Add(x)
		ln = b.LN2.Forward(x)
		y = b.MLP.Forward(ln)
		ln.Free()
		return x.Add(y)
	})
}

// blocks holds encoder_layer_0, encoder_layer_1, ... as torchvision names them.
type blocks struct {
	nn.Base
	Items []*EncoderBlock
}

// ViTEncoder is torchvision's Encoder: pos_embedding (1, SeqLen, Hidden),
// dropout, layers.encoder_layer_N, ln.
type ViTEncoder struct {
	nn.Base
	PosEmbedding *torch.Tensor
	Layers       *blocks
	LN           *nn.LayerNorm
}

// heads is torchvision's heads: an nn.Sequential with one child, head.
type heads struct {
	nn.Base
	Head *nn.Linear
}

// ViT is torchvision's VisionTransformer (no representation layer), its
// state dict named as vit_b_16's: class_token, conv_proj.{weight,bias},
// encoder.pos_embedding, encoder.layers.encoder_layer_N.{ln_1, self_attention,
// ln_2, mlp.0, mlp.3}, encoder.ln, heads.head. A state dict saved from
// torchvision.models.vit_b_16(num_classes=K) loads strictly into
// NewViT(ViTConfigs["b16"] with Classes K).
//
// Checkpointing (the seed's Option 4) recomputes each encoder block in
// backward instead of keeping its activations. Frozen blocks (Freeze,
// Unfreeze) have no gradients; blocks before the first trainable parameter
// keep no activations either, since nothing upstream needs a gradient.
type ViT struct {
	nn.Base
	Cfg           ViTConfig
	ClassToken    *torch.Tensor
	ConvProj      *nn.Conv
	Encoder       *ViTEncoder
	Heads         *heads
	Checkpointing bool
}

// NewViT builds a ViT initialised as torchvision's: conv_proj truncated
// normal (std √(1/fan_in)), zero class token, pos_embedding N(0, 0.02),
// MLP Xavier-uniform weights and N(0, 1e-6) biases, zero head.
func NewViT(c ViTConfig) (*ViT, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	v := &ViT{Cfg: c}
	v.ClassToken = v.RegisterParam("class_token", torch.Zeros([]int64{1, 1, c.Hidden}))
	v.ConvProj = nn.RegisterModule(&v.Base, "conv_proj", nn.NewConv2d(3, c.Hidden, []int64{c.Patch}, torch.ConvOpts{Stride: []int64{c.Patch}}, true))
	fanIn := 3 * c.Patch * c.Patch
	nn.TruncNormal(v.ConvProj.Weight, 0, math.Sqrt(1/float64(fanIn)), -2, 2)
	nn.Zeros(v.ConvProj.Bias)
	enc := &ViTEncoder{}
	enc.PosEmbedding = enc.RegisterParam("pos_embedding", nn.Normal(torch.Empty([]int64{1, c.SeqLen(), c.Hidden}), 0, 0.02))
	enc.Layers = nn.RegisterModule(&enc.Base, "layers", &blocks{})
	for i := 0; i < c.Layers; i++ {
		b := nn.RegisterModule(&enc.Layers.Base, fmt.Sprintf("encoder_layer_%d", i), newEncoderBlock(c))
		enc.Layers.Items = append(enc.Layers.Items, b)
	}
	enc.LN = nn.RegisterModule(&enc.Base, "ln", vitNorm(c.Hidden))
	v.Encoder = nn.RegisterModule(&v.Base, "encoder", enc)
	v.Heads = nn.RegisterModule(&v.Base, "heads", &heads{})
	v.Heads.Head = nn.RegisterModule(&v.Heads.Base, "head", nn.NewLinear(c.Hidden, c.Classes, true))
	nn.Zeros(v.Heads.Head.Weight)
	nn.Zeros(v.Heads.Head.Bias)
	return v, nil
}

// Forward classifies images x (N, 3, Image, Image): logits (N, Classes).
func (v *ViT) Forward(x *torch.Tensor) *torch.Tensor {
	c := v.Cfg
	if s := x.Shape(); len(s) != 4 || s[1] != 3 || s[2] != c.Image || s[3] != c.Image {
		panic(&torch.Error{Op: "ViT", Msg: fmt.Sprintf("input %v: want (N, 3, %d, %d)", s, c.Image, c.Image)})
	}
	return torch.TidyTensor(func() *torch.Tensor {
		n := x.Size(0)
		y := v.ConvProj.Forward(x)
		r := y.Reshape(n, c.Hidden, -1)
		p := r.Permute(0, 2, 1)
		// Cat promotes to the wider dtype, as torchvision's under autocast:
		// a bf16 patch sequence is cast to the float32 class token's.
		cls := v.ClassToken.Expand(n, -1, -1)
		h := torch.Cat([]*torch.Tensor{cls, p}, 1)
		// Neither cat nor add keeps its inputs for backward: the patches
		// and the sequence before the position embedding go once used, as
		// Python's rebinding of x releases them.
		for _, t := range []*torch.Tensor{y, r, p, cls} {
			t.Free()
		}
		e := h.Add(v.Encoder.PosEmbedding)
		h.Free()
		h = e
		// Each block's input is released once the block has run (the first
		// here, the others by Pipe): autograd keeps what backward needs, and
		// the scope would otherwise hold every block's output until the
		// forward ends.
		items := v.Encoder.Layers.Items
		h = torch.Pipe(h, len(items), func(i int, h *torch.Tensor) *torch.Tensor {
			out := v.block(items[i], h)
			if i == 0 {
				h.Free()
			}
			return out
		})
		h = v.Encoder.LN.Forward(h)
		return v.Heads.Head.Forward(h.Select(1, 0))
	})
}

// block runs one encoder block, checkpointed when asked and when anything
// in it needs a gradient.
func (v *ViT) block(b *EncoderBlock, h *torch.Tensor) *torch.Tensor {
	if !v.Checkpointing || !(h.RequiresGrad() || trainable(b)) || !torch.GradEnabled() {
		return b.Forward(h)
	}
	return torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
		return []*torch.Tensor{b.Forward(in[0])}
	}, h)[0]
}

func trainable(m nn.Module) bool {
	for _, p := range nn.Parameters(m) {
		if p.T.RequiresGrad() {
			return true
		}
	}
	return false
}

// layerPrefix is the state-dict prefix of encoder block i.
func layerPrefix(i int) string { return fmt.Sprintf("encoder.layers.encoder_layer_%d.", i) }

// FreezeBackbone freezes everything but the final norm and the head
// (encoder.ln, heads): where progressive unfreezing starts.
func (v *ViT) FreezeBackbone() {
	nn.Freeze(v, "class_token", "conv_proj.", "encoder.pos_embedding", "encoder.layers.")
}

// UnfreezeLayers makes encoder blocks trainable again.
func (v *ViT) UnfreezeLayers(idx []int) error {
	for _, i := range idx {
		if i < 0 || i >= v.Cfg.Layers {
			return fmt.Errorf("vit: no encoder layer %d (the model has %d: 0 to %d)", i, v.Cfg.Layers, v.Cfg.Layers-1)
		}
		nn.Unfreeze(v, layerPrefix(i))
	}
	return nil
}

// Trainable returns the names of the trainable parameter groups: "all",
// or the unfrozen layers and modules.
func (v *ViT) Trainable() string {
	var frozen, on []string
	for i := range v.Encoder.Layers.Items {
		if trainable(v.Encoder.Layers.Items[i]) {
			on = append(on, fmt.Sprint(i))
		} else {
			frozen = append(frozen, fmt.Sprint(i))
		}
	}
	if len(frozen) == 0 && v.ClassToken.RequiresGrad() {
		return "all"
	}
	return fmt.Sprintf("encoder layers [%s], encoder.ln and heads (frozen: embeddings, layers [%s])", strings.Join(on, " "), strings.Join(frozen, " "))
}
