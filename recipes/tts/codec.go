package tts

import (
	"fmt"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// CodecConfig sizes the VQ-VAE codec.
type CodecConfig struct {
	Channels int64   `json:"channels"`  // convolution width
	CodeDim  int64   `json:"code_dim"`  // the codebook's vectors
	Codes    int64   `json:"codes"`     // codebook entries (the GPT's audio vocabulary)
	Beta     float64 `json:"beta"`      // commitment weight
	ResDepth int     `json:"res_depth"` // residual blocks on each side of the resampling
}

// Down is the number of mel frames per code: 2 (32 ms, 31.25 codes a
// second).
const Down = 2

// Validate checks the sizes.
func (c CodecConfig) Validate() error {
	switch {
	case c.Channels < 1 || c.Channels > 4096:
		return fmt.Errorf("tts: codec channels %d outside [1, 4096]", c.Channels)
	case c.CodeDim < 1 || c.CodeDim > 4096:
		return fmt.Errorf("tts: codec code dimension %d outside [1, 4096]", c.CodeDim)
	case c.Codes < 2 || c.Codes > 1<<16:
		return fmt.Errorf("tts: codebook of %d entries outside [2, 65536]", c.Codes)
	case c.ResDepth < 0 || c.ResDepth > 16:
		return fmt.Errorf("tts: codec residual depth %d outside [0, 16]", c.ResDepth)
	case !(c.Beta >= 0 && c.Beta <= 10):
		return fmt.Errorf("tts: commitment weight %v outside [0, 10]", c.Beta)
	}
	return nil
}

// resBlock is x + conv1(relu(conv3(relu(x)))).
type resBlock struct {
	nn.Base
	Conv1, Conv2 *nn.Conv
}

func newResBlock(c int64) *resBlock {
	r := &resBlock{}
	r.Conv1 = nn.RegisterModule(&r.Base, "conv1", nn.NewConv1d(c, c, 3, torch.ConvOpts{Padding: []int64{1}}, true))
	r.Conv2 = nn.RegisterModule(&r.Base, "conv2", nn.NewConv1d(c, c, 1, torch.ConvOpts{}, true))
	return r
}

func (r *resBlock) Forward(x *torch.Tensor) *torch.Tensor {
	return x.Add(r.Conv2.Forward(r.Conv1.Forward(x.Relu()).Relu()))
}

// Codec is a VQ-VAE over normalised log-mel frames (the DVAE of XTTS, at
// CPU size): a convolutional encoder halves the frame rate, each vector is
// replaced by its nearest codebook entry (cosine distance: vectors and
// entries are l2-normalised, which keeps the codebook in use), and a
// convolutional decoder restores the frames. Its codes are the GPT's audio
// tokens.
type Codec struct {
	nn.Base
	Cfg      CodecConfig
	EncIn    *nn.Conv
	EncPre   *nn.ModuleList[*resBlock]
	EncDown  *nn.Conv
	EncPost  *nn.ModuleList[*resBlock]
	EncOut   *nn.Conv
	Codebook *torch.Tensor // (Codes, CodeDim)
	DecIn    *nn.Conv
	DecPre   *nn.ModuleList[*resBlock]
	DecUp    *nn.Conv
	DecPost  *nn.ModuleList[*resBlock]
	DecOut   *nn.Conv
}

// NewCodec builds a codec.
func NewCodec(cfg CodecConfig) (*Codec, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Codec{Cfg: cfg}
	ch := cfg.Channels
	blocks := func() *nn.ModuleList[*resBlock] {
		l := nn.NewModuleList[*resBlock]()
		for range cfg.ResDepth {
			l.Append(newResBlock(ch))
		}
		return l
	}
	err := torch.Try(func() {
		c.EncIn = nn.RegisterModule(&c.Base, "enc_in", nn.NewConv1d(NMels, ch, 3, torch.ConvOpts{Padding: []int64{1}}, true))
		c.EncPre = nn.RegisterModule(&c.Base, "enc_pre", blocks())
		c.EncDown = nn.RegisterModule(&c.Base, "enc_down", nn.NewConv1d(ch, ch, 2*Down, torch.ConvOpts{Stride: []int64{Down}, Padding: []int64{Down / 2}}, true))
		c.EncPost = nn.RegisterModule(&c.Base, "enc_post", blocks())
		c.EncOut = nn.RegisterModule(&c.Base, "enc_out", nn.NewConv1d(ch, cfg.CodeDim, 1, torch.ConvOpts{}, true))
		c.Codebook = c.RegisterParam("codebook", torch.Randn([]int64{cfg.Codes, cfg.CodeDim}))
		c.DecIn = nn.RegisterModule(&c.Base, "dec_in", nn.NewConv1d(cfg.CodeDim, ch, 3, torch.ConvOpts{Padding: []int64{1}}, true))
		c.DecPre = nn.RegisterModule(&c.Base, "dec_pre", blocks())
		c.DecUp = nn.RegisterModule(&c.Base, "dec_up", nn.NewConvTranspose1d(ch, ch, 2*Down, torch.ConvOpts{Stride: []int64{Down}, Padding: []int64{Down / 2}}, true))
		c.DecPost = nn.RegisterModule(&c.Base, "dec_post", blocks())
		c.DecOut = nn.RegisterModule(&c.Base, "dec_out", nn.NewConv1d(ch, NMels, 3, torch.ConvOpts{Padding: []int64{1}}, true))
	})
	if err != nil {
		nn.Free(c)
		return nil, err
	}
	return c, nil
}

// CodeLen is the number of codes of n frames.
func CodeLen(n int64) int64 { return (n + Down - 1) / Down }

func runBlocks(l *nn.ModuleList[*resBlock], x *torch.Tensor) *torch.Tensor {
	for _, b := range l.Items {
		x = b.Forward(x)
	}
	return x
}

// encode returns the l2-normalised encoder output (B, T/Down, CodeDim) of
// normalised log-mels (B, T, NMels), T a multiple of Down.
func (c *Codec) encode(mel *torch.Tensor) *torch.Tensor {
	if s := mel.Shape(); len(s) != 3 || s[2] != NMels || s[1]%Down != 0 {
		panic(&torch.Error{Op: "Codec", Msg: fmt.Sprintf("mels %v, want (B, T, %d) with T a multiple of %d", s, NMels, Down)})
	}
	x := c.EncIn.Forward(mel.Transpose(1, 2))
	x = runBlocks(c.EncPre, x)
	x = c.EncDown.Forward(x.Relu())
	x = runBlocks(c.EncPost, x)
	z := c.EncOut.Forward(x.Relu()).Transpose(1, 2)
	return l2norm(z)
}

func l2norm(x *torch.Tensor) *torch.Tensor {
	return x.Div(x.NormDim(2, []int64{-1}, true).ClampMin(1e-6))
}

// nearest returns the codes of normalised vectors z (B, N, D).
func (c *Codec) nearest(z *torch.Tensor) *torch.Tensor {
	cb := l2norm(c.Codebook)
	sim := z.Matmul(cb.T()) // (B, N, K)
	_, idx := sim.MaxDim(-1, false)
	return idx
}

// Encode returns the codes (B, T/Down) of normalised log-mels (B, T,
// NMels).
func (c *Codec) Encode(mel *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor { return c.nearest(c.encode(mel)) })
}

// Decode returns normalised log-mels (B, N·Down, NMels) of codes (B, N).
func (c *Codec) Decode(codes *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		q := torch.Embedding(l2norm(c.Codebook), codes, -1)
		return c.decode(q)
	})
}

func (c *Codec) decode(q *torch.Tensor) *torch.Tensor {
	x := c.DecIn.Forward(q.Transpose(1, 2))
	x = runBlocks(c.DecPre, x)
	x = c.DecUp.Forward(x.Relu())
	x = runBlocks(c.DecPost, x)
	return c.DecOut.Forward(x.Relu()).Transpose(1, 2)
}

// CodecLoss is the codec's training loss on a batch of normalised mels.
type CodecLoss struct {
	Total, Recon, Commit *torch.Tensor
	Codes                *torch.Tensor // (B, T/Down)
	Z                    *torch.Tensor // encoder outputs (B, T/Down, D), detached
}

// Loss runs the codec on normalised log-mels (B, T, NMels): reconstruction
// (mean squared error) + codebook loss ‖sg(z) − e‖² + β‖z − sg(e)‖², the
// decoder fed z + sg(e − z) (the straight-through estimator).
func (c *Codec) Loss(mel *torch.Tensor) CodecLoss {
	z := c.encode(mel)
	idx := c.nearest(z.Detach())
	e := torch.Embedding(l2norm(c.Codebook), idx, -1)
	codebook := torch.MSELoss(e, z.Detach(), torch.ReduceMean)
	commit := torch.MSELoss(z, e.Detach(), torch.ReduceMean)
	q := z.Add(e.Sub(z).Detach())
	out := c.decode(q)
	recon := torch.MSELoss(out, mel, torch.ReduceMean)
	total := recon.Add(codebook).Add(commit.MulScalar(c.Cfg.Beta))
	return CodecLoss{Total: total, Recon: recon, Commit: commit, Codes: idx, Z: z.Detach()}
}
