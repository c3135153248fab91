package ganvit

import (
	"fmt"

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
