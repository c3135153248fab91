package nn

import (
	"fmt"
	"math"

	"github.com/torchfit/torchfit/torch"
)

// SinusoidalPositionalEncoding adds the fixed encodings of "Attention Is
// All You Need" to (N, T, D) inputs: pe[t, 2i] = sin(t·ω_i), pe[t, 2i+1] =
// cos(t·ω_i), ω_i = exp(−2i·ln(10000)/D). The table is the buffer "pe"
// (maxLen, D). It is non-persistent by default (recomputed rather than
// saved, so it is not in the state dict); pass persistent true to save it
// as the PyTorch tutorial's PositionalEncoding does (there shaped (maxLen,
// D) too when batch-first).
type SinusoidalPositionalEncoding struct {
	Base
	PE *torch.Tensor
}

// NewSinusoidalPositionalEncoding builds the table for d (even) and maxLen.
func NewSinusoidalPositionalEncoding(d, maxLen int64, persistent bool) *SinusoidalPositionalEncoding {
	if d%2 != 0 {
		panic(invalid("sinusoidal encoding needs an even dimension, got %d", d))
	}
	pe := SinusoidTable(d, maxLen, 1)
	s := &SinusoidalPositionalEncoding{}
	s.PE = s.RegisterBuffer("pe", pe, persistent)
	return s
}

// SinusoidTable is SinusoidalPositionalEncoding's float32 table (n, d)
// (d even) of positions 0…n−1 scaled by rate: row t holds sin(t·rate·ω_i)
// and cos(t·rate·ω_i) interleaved. Rate 1 is the encoding's own table; a
// stream at another rate (codes against phonemes) takes 1/ratio.
func SinusoidTable(d, n int64, rate float64) *torch.Tensor {
	var pe *torch.Tensor
	torch.NoGrad(func() {
		pe = torch.TidyTensor(func() *torch.Tensor {
			pos := torch.Arange(0, float64(n), 1, torch.Float64).Unsqueeze(1)
			if rate != 1 {
				pos = pos.MulScalar(rate)
			}
			div := torch.Arange(0, float64(d), 2, torch.Float64).MulScalar(-math.Log(10000.0) / float64(d)).Exp()
			ang := pos.Mul(div) // (n, d/2)
			// interleave: stack (sin, cos) on a last axis and flatten
			return torch.Stack([]*torch.Tensor{ang.Sin(), ang.Cos()}, 2).Reshape(n, d).ToDType(torch.Float32)
		})
	})
	return pe
}

// Forward returns x + pe[:T] for x (N, T, D).
func (s *SinusoidalPositionalEncoding) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		return x.Add(s.PE.Narrow(0, 0, x.Size(1)))
	})
}

// LearnedPositionalEmbedding is a trained table, parameter "weight"
// (maxLen, D), N(0, 1) initialised as nn.Embedding's (so its state dict
// loads into nn.Embedding(maxLen, D)). Forward adds weight[:T] to (N, T, D).
type LearnedPositionalEmbedding struct {
	Base
	Weight *torch.Tensor
}

// NewLearnedPositionalEmbedding creates the table.
func NewLearnedPositionalEmbedding(maxLen, d int64) *LearnedPositionalEmbedding {
	l := &LearnedPositionalEmbedding{}
	l.Weight = l.RegisterParam("weight", Normal(newParam(maxLen, d), 0, 1))
	return l
}

// Forward returns x + weight[:T] for x (N, T, D).
func (l *LearnedPositionalEmbedding) Forward(x *torch.Tensor) *torch.Tensor {
	t := x.Size(1)
	if t > l.Weight.Size(0) {
		panic(&torch.Error{Op: "LearnedPositionalEmbedding", Msg: fmt.Sprintf("sequence length %d exceeds the table's %d", t, l.Weight.Size(0))})
	}
	return torch.TidyTensor(func() *torch.Tensor { return x.Add(l.Weight.Narrow(0, 0, t)) })
}

// PatchEmbedding is ViT's patch embedding: proj, a Conv2d(inChans, dim,
// kernel = stride = patch), then flatten to (N, patches, dim). State dict:
// proj.weight, proj.bias (as timm's PatchEmbed).
type PatchEmbedding struct {
	Base
	Proj  *Conv
	Patch int64
}

// NewPatchEmbedding builds a patch embedding.
func NewPatchEmbedding(patch, inChans, dim int64) *PatchEmbedding {
	p := &PatchEmbedding{Patch: patch}
	p.Proj = RegisterModule(&p.Base, "proj", NewConv2d(inChans, dim, []int64{patch}, torch.ConvOpts{Stride: []int64{patch}}, true))
	return p
}

// Forward maps images (N, C, H, W) (H and W multiples of the patch size)
// to (N, H/patch·W/patch, dim).
func (p *PatchEmbedding) Forward(x *torch.Tensor) *torch.Tensor {
	s := x.Shape()
	if len(s) != 4 || s[2]%p.Patch != 0 || s[3]%p.Patch != 0 {
		panic(&torch.Error{Op: "PatchEmbedding", Msg: fmt.Sprintf("input %v: want (N, C, H, W) with H, W multiples of %d", s, p.Patch)})
	}
	return torch.TidyTensor(func() *torch.Tensor {
		return p.Proj.Forward(x).Flatten(2, -1).Transpose(1, 2)
	})
}
