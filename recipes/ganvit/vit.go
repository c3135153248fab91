package ganvit

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

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
		ln := b.LN1.Forward(x)
		y, _ := b.Attn.Forward(ln, ln, ln, nn.AttnOpts{})
		x = b.Dropout.Forward(y).Add(x)
		return x.Add(b.MLP.Forward(b.LN2.Forward(x)))
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
		h := v.ConvProj.Forward(x).Reshape(n, c.Hidden, -1).Permute(0, 2, 1)
		cls := v.ClassToken.ToDType(h.DType()).Expand(n, -1, -1)
		h = torch.Cat([]*torch.Tensor{cls, h}, 1)
		h = h.Add(v.Encoder.PosEmbedding)
		for _, b := range v.Encoder.Layers.Items {
			// Release each block's input once the next has it: autograd
			// keeps what backward needs, and the scope would otherwise hold
			// every block's output until the forward ends.
			next := v.block(b, h)
			h.Free()
			h = next
		}
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

// LayerPrefix is the state-dict prefix of encoder block i.
func LayerPrefix(i int) string { return fmt.Sprintf("encoder.layers.encoder_layer_%d.", i) }

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
		nn.Unfreeze(v, LayerPrefix(i))
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
