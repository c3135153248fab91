package nn_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// boolMask returns a random bool mask (true with probability p) whose last
// dimension's first entry is false, so no query loses every key.
func boolMask(p float64, shape ...int64) *torch.Tensor {
	m := torch.Rand(shape).LtScalar(p)
	m.Select(-1, 0).FillIn(0)
	return m
}

func mhaCase(name string, batchFirst bool, py string, inputs func() []*torch.Tensor, opts func(xs []*torch.Tensor) (q, k, v *torch.Tensor, o nn.AttnOpts)) refCase {
	return refCase{
		name:  name,
		build: func() nn.Module { return nn.NewMultiheadAttention(8, 2, 0, batchFirst) },
		fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
			q, k, v, o := opts(xs)
			out, w := m.(*nn.MultiheadAttention).Forward(q, k, v, o)
			return []*torch.Tensor{out, w}
		},
		py: py, inputs: inputs,
	}
}

func TestAttentionMatchPyTorch(t *testing.T) {
	const L, S, N, E = 4, 5, 3, 8
	cfg := func(normFirst, batchFirst bool, act string, dropout float64) nn.TransformerConfig {
		c := nn.DefaultTransformerConfig(E, 2)
		c.DimFeedforward, c.NormFirst, c.BatchFirst, c.Activation, c.Dropout = 16, normFirst, batchFirst, act, dropout
		return c
	}
	cases := []refCase{
		mhaCase("MHA/self/key_padding_mask", false,
			"m = nn.MultiheadAttention(8, 2)\ndef fwd(m, x, kpm):\n    return m(x, x, x, key_padding_mask=kpm)",
			func() []*torch.Tensor { return []*torch.Tensor{randn(L, N, E), boolMask(0.4, N, L)} },
			func(xs []*torch.Tensor) (q, k, v *torch.Tensor, o nn.AttnOpts) {
				return xs[0], xs[0], xs[0], nn.AttnOpts{KeyPaddingMask: xs[1], NeedWeights: true}
			}),
		mhaCase("MHA/cross/batch_first/float_mask/per_head", true,
			"m = nn.MultiheadAttention(8, 2, batch_first=True)\ndef fwd(m, q, k, v, am):\n    return m(q, k, v, attn_mask=am, average_attn_weights=False)",
			func() []*torch.Tensor {
				return []*torch.Tensor{randn(N, L, E), randn(N, S, E), randn(N, S, E), randn(L, S)}
			},
			func(xs []*torch.Tensor) (q, k, v *torch.Tensor, o nn.AttnOpts) {
				return xs[0], xs[1], xs[2], nn.AttnOpts{AttnMask: xs[3], NeedWeights: true, PerHeadWeights: true}
			}),
		mhaCase("MHA/causal", true,
			"m = nn.MultiheadAttention(8, 2, batch_first=True)\ndef fwd(m, x):\n    return m(x, x, x, attn_mask=torch.ones(4, 4, dtype=torch.bool).triu(1))",
			func() []*torch.Tensor { return []*torch.Tensor{randn(N, L, E)} },
			func(xs []*torch.Tensor) (q, k, v *torch.Tensor, o nn.AttnOpts) {
				return xs[0], xs[0], xs[0], nn.AttnOpts{Causal: true, NeedWeights: true}
			}),
		mhaCase("MHA/3d_bool_mask+kpm/no_weights", false,
			"m = nn.MultiheadAttention(8, 2)\ndef fwd(m, q, kv, am, kpm):\n    return m(q, kv, kv, attn_mask=am, key_padding_mask=kpm, need_weights=False)",
			func() []*torch.Tensor {
				return []*torch.Tensor{randn(L, N, E), randn(S, N, E), boolMask(0.3, N*2, L, S), boolMask(0.3, N, S)}
			},
			func(xs []*torch.Tensor) (q, k, v *torch.Tensor, o nn.AttnOpts) {
				return xs[0], xs[1], xs[1], nn.AttnOpts{AttnMask: xs[2], KeyPaddingMask: xs[3]}
			}),
		{name: "EncoderLayer/post-norm/relu/eval", build: func() nn.Module { return nn.NewTransformerEncoderLayer(cfg(false, false, "relu", 0.1)) },
			fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{m.(*nn.TransformerEncoderLayer).Forward(xs[0], nn.AttnOpts{KeyPaddingMask: xs[1]})}
			},
			py:     "m = nn.TransformerEncoderLayer(8, 2, 16, 0.1)\ndef fwd(m, x, kpm):\n    return m(x, src_key_padding_mask=kpm)",
			inputs: func() []*torch.Tensor { return []*torch.Tensor{randn(L, N, E), boolMask(0.4, N, L)} }},
		{name: "EncoderLayer/pre-norm/gelu/batch_first/causal/train", train: true,
			build: func() nn.Module { return nn.NewTransformerEncoderLayer(cfg(true, true, "gelu", 0)) },
			fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{m.(*nn.TransformerEncoderLayer).Forward(xs[0], nn.AttnOpts{Causal: true})}
			},
			py:     "m = nn.TransformerEncoderLayer(8, 2, 16, 0.0, activation='gelu', batch_first=True, norm_first=True)\ndef fwd(m, x):\n    return m(x, src_mask=torch.ones(4, 4, dtype=torch.bool).triu(1))",
			inputs: layerIn(shp(N, L, E))},
		{name: "DecoderLayer/post-norm/batch_first/eval", build: func() nn.Module { return nn.NewTransformerDecoderLayer(cfg(false, true, "relu", 0.1)) },
			fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{m.(*nn.TransformerDecoderLayer).Forward(xs[0], xs[1], nn.AttnOpts{Causal: true}, nn.AttnOpts{KeyPaddingMask: xs[2]})}
			},
			py:     "m = nn.TransformerDecoderLayer(8, 2, 16, 0.1, batch_first=True)\ndef fwd(m, x, mem, kpm):\n    return m(x, mem, tgt_mask=torch.ones(4, 4, dtype=torch.bool).triu(1), memory_key_padding_mask=kpm)",
			inputs: func() []*torch.Tensor { return []*torch.Tensor{randn(N, L, E), randn(N, S, E), boolMask(0.4, N, S)} }},
		{name: "DecoderLayer/pre-norm/gelu/train", train: true, build: func() nn.Module { return nn.NewTransformerDecoderLayer(cfg(true, false, "gelu", 0)) },
			fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{m.(*nn.TransformerDecoderLayer).Forward(xs[0], xs[1], nn.AttnOpts{}, nn.AttnOpts{})}
			},
			py:     "m = nn.TransformerDecoderLayer(8, 2, 16, 0.0, activation='gelu', norm_first=True)\ndef fwd(m, x, mem):\n    return m(x, mem)",
			inputs: layerIn(shp(L, N, E), shp(S, N, E))},
		{name: "TransformerEncoder/2/pre-norm/final_norm", build: func() nn.Module { return nn.NewTransformerEncoder(cfg(true, true, "relu", 0.1), 2, true) },
			fwd: func(m nn.Module, xs []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{m.(*nn.TransformerEncoder).Forward(xs[0], nn.AttnOpts{KeyPaddingMask: xs[1]})}
			},
			py:     "m = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.1, batch_first=True, norm_first=True), 2, norm=nn.LayerNorm(8))\ndef fwd(m, x, kpm):\n    return m(x, src_key_padding_mask=kpm)",
			inputs: func() []*torch.Tensor { return []*torch.Tensor{randn(N, L, E), boolMask(0.4, N, L)} }},
	}
	runRefCases(t, cases)
}

// TransformerEncoder clones its first layer, as PyTorch's deepcopy does.
func TestTransformerEncoderLayersStartIdentical(t *testing.T) {
	torch.Tidy(func() {
		e := nn.NewTransformerEncoder(nn.DefaultTransformerConfig(8, 2), 3, false)
		sd := nn.StateDict(e).Map()
		require.Len(t, sd, 3*12)
		for name, v := range sd {
			if name[:9] == "layers.0." {
				for _, k := range []string{"1", "2"} {
					require.True(t, v.Equal(sd["layers."+k+name[8:]]), name)
				}
			}
		}
	})
}
