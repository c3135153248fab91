package asr

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// torchaudioNames maps the names inside one of torchaudio's ConformerLayers
// to the recipe's ConformerBlock's; self_attn.* (both torch's
// MultiheadAttention) is the same in both.
var torchaudioNames = []struct{ from, to string }{
	{"ffn1.sequential.0.", "ff1.norm."},
	{"ffn1.sequential.1.", "ff1.linear1."},
	{"ffn1.sequential.4.", "ff1.linear2."},
	{"self_attn_layer_norm.", "attn_norm."},
	{"conv_module.layer_norm.", "conv_module.norm."},
	{"conv_module.sequential.0.", "conv_module.pointwise_conv1."},
	{"conv_module.sequential.2.", "conv_module.depthwise_conv."},
	{"conv_module.sequential.3.", "conv_module.batch_norm."},
	{"conv_module.sequential.5.", "conv_module.pointwise_conv2."},
	{"ffn2.sequential.0.", "ff2.norm."},
	{"ffn2.sequential.1.", "ff2.linear1."},
	{"ffn2.sequential.4.", "ff2.linear2."},
	{"final_layer_norm.", "final_norm."},
}

// fromTorchaudio renames torchaudio.models.Conformer's state dict
// (conformer_layers.N.…) to the names within the recipe's encoder.layers
// (N.…).
func fromTorchaudio(sd torch.StateDict) torch.StateDict {
	out := make(torch.StateDict, 0, len(sd))
	for _, p := range sd {
		num, name, _ := strings.Cut(strings.TrimPrefix(p.Name, "conformer_layers."), ".")
		for _, r := range torchaudioNames {
			if rest, ok := strings.CutPrefix(name, r.from); ok {
				name = r.to + rest
				break
			}
		}
		out = append(out, torch.Named{Name: num + "." + name, T: p.T})
	}
	return out
}

// torchaudio's Conformer (torchaudio 2.11's torchaudio.models.Conformer,
// no one here wrote it) against the recipe's encoder blocks. Where they
// match — the whole block — torchaudio's weights load strictly into the
// recipe's encoder.layers and give the same outputs (float64, within
// 1e-10): in eval mode (batch norm's running statistics, randomised), and
// in training mode (batch statistics) with the same gradient for every
// parameter and the same running statistics afterwards. Both blocks are
//
//	x = x + ½·FFN(x)                  macaron: the same ½ on both FFNs
//	x = x + MHSA(LayerNorm(x))        torch's nn.MultiheadAttention, absolute
//	x = x + Conv(x)                   convolution after attention
//	x = x + ½·FFN(x)
//	y = LayerNorm(x)                  a final norm per block
//
// with FFN = LayerNorm, Linear, SiLU, dropout, Linear, dropout and Conv =
// LayerNorm, pointwise conv d → 2d, GLU, depthwise conv (same padding,
// bias), BatchNorm1d, SiLU, pointwise conv, dropout, in the same order.
// Where they differ:
//
//   - Padding. The recipe zeroes padded frames before the depthwise
//     convolution (ConvModule.Forward's valid mask); torchaudio convolves
//     whatever the padded frames hold, so valid frames within (kernel−1)/2
//     of a sequence's end see them. With one layer the rest of a padded
//     sequence still matches (checked below: the last (kernel−1)/2 valid
//     frames differ, the earlier ones agree); from the second layer on the
//     difference reaches every frame through attention. Batch norm's
//     training statistics include padded frames in both, zeroed in one
//     and not the other, so only unpadded batches are compared in
//     training mode.
//   - What surrounds the blocks. torchaudio's Conformer is the stack of
//     layers alone: no subsampling front end and no positional encoding.
//     The recipe's encoder adds ×4 convolutional subsampling and absolute
//     sinusoidal positions (x·√d + PE) before the blocks; neither model
//     has the paper's relative positional (Transformer-XL) self-attention,
//     so there is nothing to map there, and the front end has no
//     counterpart to compare.
//   - Options. torchaudio's use_group_norm (GroupNorm for BatchNorm1d) and
//     convolution_first (the convolution module before attention) have no
//     counterpart in the recipe; the defaults (off) are its architecture.
func TestTorchaudioConformerBlocks(t *testing.T) {
	pyref.SkipWithout(t, "torchaudio")
	cfg := ModelConfig{DModel: 32, Heads: 4, EncoderLayers: 2, FFDim: 64, ConvKernel: 7, Vocab: testVocab, NumMels: 80, CTCWeight: 1}
	const b, tt, padLen = 2, 20, 13
	dir := t.TempDir()
	sdPath, xPath, gradPath := filepath.Join(dir, "conformer.pt"), filepath.Join(dir, "x.pt"), filepath.Join(dir, "grads.pt")
	pyref.Run(t, `
		import torchaudio
		c = inp["cfg"]
		torch.manual_seed(0)
		m = torchaudio.models.Conformer(input_dim=c["d"], num_heads=c["heads"], ffn_dim=c["ff"], num_layers=c["layers"],
		        depthwise_conv_kernel_size=c["kernel"], dropout=0.0).double()
		with torch.no_grad():
		    for p in m.parameters():  # norms at 1 and biases at 0 otherwise
		        p.add_(0.1 * torch.randn_like(p))
		    for l in m.conformer_layers:
		        bn = l.conv_module.sequential[3]
		        bn.running_mean.copy_(0.2 * torch.randn_like(bn.running_mean))
		        bn.running_var.copy_(0.5 + torch.rand_like(bn.running_var))
		        bn.num_batches_tracked.fill_(7)
		torch.save(m.state_dict(), inp["sd"])
		b, t = inp["b"], inp["t"]
		x = torch.randn(b, t, c["d"], dtype=torch.float64)
		w = torch.randn(b, t, c["d"], dtype=torch.float64)
		full = torch.full((b,), t)
		padded = torch.tensor([t, inp["pad_len"]])
		m.eval()
		with torch.no_grad():
		    eval_full = m(x, full)[0]
		    mask = torch.arange(t)[None, :] >= padded[:, None]
		    eval_pad = m.conformer_layers[0](x.transpose(0, 1), mask).transpose(0, 1)
		m.train()
		train_full = m(x, full)[0]
		(train_full * w).sum().backward()
		torch.save({"x": x, "w": w, "eval_full": eval_full, "eval_pad": eval_pad, "train_full": train_full.detach()}, inp["x"])
		grads = {n: p.grad for n, p in m.named_parameters()}
		grads.update({n: v for n, v in m.state_dict().items() if "running" in n or "num_batches" in n})
		torch.save(grads, inp["grads"])
	`, map[string]any{"sd": sdPath, "x": xPath, "grads": gradPath, "b": b, "t": tt, "pad_len": padLen,
		"cfg": map[string]any{"d": cfg.DModel, "heads": cfg.Heads, "ff": cfg.FFDim, "layers": cfg.EncoderLayers, "kernel": cfg.ConvKernel}}, nil)

	m, err := NewConformer(cfg)
	require.NoError(t, err)
	defer nn.Free(m)
	nn.To(m, torch.CPU, torch.Float64)
	layers := m.Encoder.Layers
	sd, err := ptfile.LoadTensors(sdPath)
	require.NoError(t, err)
	defer sd.Free()
	_, err = nn.LoadStateDict(layers, fromTorchaudio(sd), true)
	require.NoError(t, err, "torchaudio's layers load strictly into encoder.layers")
	refSD, err := ptfile.LoadTensors(xPath)
	require.NoError(t, err)
	defer refSD.Free()
	ref := refSD.Map()
	refAfter, err := ptfile.LoadTensors(gradPath)
	require.NoError(t, err)
	defer refAfter.Free()
	after := fromTorchaudio(refAfter).Map()

	run := func(n int, mask *torch.Tensor) *torch.Tensor {
		x := ref["x"]
		for _, blk := range layers.Items[:n] {
			x = blk.Forward(x, mask, false)
		}
		return x
	}
	// maxDiff is max |a − b| over frames [from, to) of sequence seq (all: −1).
	maxDiff := func(a, b *torch.Tensor, seq int, from, to int64) float64 {
		if seq >= 0 {
			a, b = a.Select(0, int64(seq)), b.Select(0, int64(seq))
			a, b = a.Narrow(0, from, to-from), b.Narrow(0, from, to-from)
		}
		return a.Sub(b).Abs().Max().Item()
	}

	nn.SetTraining(m, false)
	torch.NoGrad(func() {
		torch.Tidy(func() {
			for _, tc := range []struct {
				name           string
				layers         int
				lens           []int64
				seq            int
				from, to       int64
				want           string
				tol            float64
				differentAbove float64
			}{
				{name: "eval, 2 layers, no padding", layers: 2, want: "eval_full", seq: -1, tol: 1e-10},
				{name: "eval, 1 layer, padded: the full sequence", layers: 1, lens: []int64{tt, padLen}, want: "eval_pad", seq: 0, from: 0, to: tt, tol: 1e-10},
				{name: "eval, 1 layer, padded: frames beyond the kernel's reach of the padding", layers: 1, lens: []int64{tt, padLen}, want: "eval_pad",
					seq: 1, from: 0, to: padLen - (cfg.ConvKernel-1)/2, tol: 1e-10},
				{name: "eval, 1 layer, padded: the last (kernel−1)/2 valid frames see torchaudio's padded frames", layers: 1, lens: []int64{tt, padLen},
					want: "eval_pad", seq: 1, from: padLen - (cfg.ConvKernel-1)/2, to: padLen, differentAbove: 1e-3},
			} {
				var mask *torch.Tensor
				if tc.lens != nil {
					mask = PaddingMask(tc.lens, tt, torch.CPU)
				}
				d := maxDiff(run(tc.layers, mask), ref[tc.want], tc.seq, tc.from, tc.to)
				t.Logf("%s: max |Δ| %.2e", tc.name, d)
				if tc.differentAbove > 0 {
					require.Greater(t, d, tc.differentAbove, tc.name)
				} else {
					require.Less(t, d, tc.tol, tc.name)
				}
			}
		})
	})

	nn.SetTraining(m, true)
	torch.Tidy(func() {
		out := run(cfg.EncoderLayers, nil)
		d := maxDiff(out, ref["train_full"], -1, 0, 0)
		t.Logf("training mode (batch statistics), 2 layers: max |Δ| %.2e", d)
		require.Less(t, d, 1e-10)
		out.Mul(ref["w"]).Sum().Backward()
	})
	params := nn.Parameters(layers)
	require.NotEmpty(t, params)
	var stats int
	torch.Tidy(func() {
		for _, p := range params {
			g := p.T.Grad()
			require.NotNil(t, g, p.Name)
			want, ok := after[p.Name]
			require.True(t, ok, p.Name)
			scale := math.Max(want.Abs().Max().Item(), 1)
			require.Less(t, g.Sub(want).Abs().Max().Item(), 1e-9*scale, "gradient of %s", p.Name)
		}
		for _, p := range nn.StateDict(layers) {
			if strings.Contains(p.Name, "running") || strings.Contains(p.Name, "num_batches") {
				stats++
				d := p.T.ToDType(torch.Float64).Sub(after[p.Name].ToDType(torch.Float64)).Abs().Max().Item()
				require.Less(t, d, 1e-12, "%s after the training step", p.Name)
			}
		}
	})
	require.Equal(t, 3*cfg.EncoderLayers, stats, "running_mean, running_var, num_batches_tracked per layer")
}
