package nn_test

import (
	"testing"

	"github.com/torchfit/torchfit/internal/freecheck"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// Every constructor's module is released by nn.Free at once: no
// temporary of its initialisation is left to the garbage collector,
// which would count in whatever peak is measured next.
func TestConstructorsLeaveNoGarbage(t *testing.T) {
	tc := nn.DefaultTransformerConfig(32, 4)
	pre := tc
	pre.NormFirst, pre.Activation = true, "gelu"
	build := func(f func() nn.Module) func() (nn.Module, error) {
		return func() (nn.Module, error) { return f(), nil }
	}
	freecheck.Run(t, []freecheck.Case{
		{Name: "Linear", Build: build(func() nn.Module { return nn.NewLinear(8, 16, true) })},
		{Name: "Bilinear", Build: build(func() nn.Module { return nn.NewBilinear(8, 6, 16, true) })},
		{Name: "Conv1d", Build: build(func() nn.Module { return nn.NewConv1d(4, 8, 3, torch.ConvOpts{}, true) })},
		{Name: "Conv2d", Build: build(func() nn.Module { return nn.NewConv2d(3, 8, []int64{3, 3}, torch.ConvOpts{}, true) })},
		{Name: "ConvTranspose1d", Build: build(func() nn.Module { return nn.NewConvTranspose1d(4, 8, 3, torch.ConvOpts{}, true) })},
		{Name: "ConvTranspose2d", Build: build(func() nn.Module { return nn.NewConvTranspose2d(3, 8, []int64{3, 3}, torch.ConvOpts{}, true) })},
		{Name: "Embedding", Build: build(func() nn.Module { return nn.NewEmbedding(50, 16) })},
		{Name: "Embedding with padding", Build: build(func() nn.Module { return nn.NewEmbedding(50, 16, 0) })},
		{Name: "MultiheadAttention", Build: build(func() nn.Module { return nn.NewMultiheadAttention(32, 4, 0.1, true) })},
		{Name: "TransformerEncoderLayer", Build: build(func() nn.Module { return nn.NewTransformerEncoderLayer(tc) })},
		{Name: "TransformerEncoderLayer norm first", Build: build(func() nn.Module { return nn.NewTransformerEncoderLayer(pre) })},
		{Name: "TransformerDecoderLayer", Build: build(func() nn.Module { return nn.NewTransformerDecoderLayer(tc) })},
		{Name: "TransformerEncoder", Build: build(func() nn.Module { return nn.NewTransformerEncoder(tc, 2, true) })},
		{Name: "BatchNorm1d", Build: build(func() nn.Module { return nn.NewBatchNorm1d(8) })},
		{Name: "BatchNorm2d", Build: build(func() nn.Module { return nn.NewBatchNorm2d(8) })},
		{Name: "LayerNorm", Build: build(func() nn.Module { return nn.NewLayerNorm(16) })},
		{Name: "GroupNorm", Build: build(func() nn.Module { return nn.NewGroupNorm(2, 8) })},
		{Name: "RMSNorm", Build: build(func() nn.Module { return nn.NewRMSNorm(16) })},
		{Name: "SinusoidalPositionalEncoding", Build: build(func() nn.Module { return nn.NewSinusoidalPositionalEncoding(16, 100, true) })},
		{Name: "SinusoidalPositionalEncoding not persistent", Build: build(func() nn.Module { return nn.NewSinusoidalPositionalEncoding(16, 100, false) })},
		{Name: "LearnedPositionalEmbedding", Build: build(func() nn.Module { return nn.NewLearnedPositionalEmbedding(100, 16) })},
		{Name: "PatchEmbedding", Build: build(func() nn.Module { return nn.NewPatchEmbedding(4, 3, 16) })},
		{Name: "CLIPLoss", Build: build(func() nn.Module { return nn.NewCLIPLoss() })},
		{Name: "Sequential", Build: build(func() nn.Module {
			return nn.NewSequential(nn.NewLinear(8, 16, true), nn.NewReLU(), nn.NewDropout(0.1), nn.NewLinear(16, 4, false))
		})},
	})
}
