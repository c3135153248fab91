package mamba

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// pyTwin is MambaLMHeadModel written in plain PyTorch with mamba-ssm's
// names and its reference scan (selective_scan_ref's loop, in mamba-ssm's
// (batch, channels, length) layout): the bench's twin, scripts/twins/mamba.py,
// one file for both.
func pyTwin(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "scripts", "twins", "mamba.py"))
	require.NoError(t, err)
	return string(src) + "\n"
}

// A model written in Python with mamba-ssm's names and saved by Python
// loads strictly into the Go model, which gives the same logits within
// 1e-5, whichever scan it uses.
func TestPythonTwinLoads(t *testing.T) {
	cfg := ModelConfig{DModel: 16, NLayers: 2, DState: 4, Expand: 2, VocabSize: 50, MaxSeqLen: 64}.withDefaults()
	path := filepath.Join(t.TempDir(), "pytorch_model.bin")
	var out struct {
		Logits [][][]float64        `json:"logits"`
		Keys   []string             `json:"keys"`
		Loss   float64              `json:"loss"`
		Params []string             `json:"params"`
		Grads  map[string][]float64 `json:"grads"`
	}
	ids := [][]int64{{1, 5, 7, 2, 49, 0, 3, 3, 8, 11, 4}, {9, 9, 1, 0, 2, 30, 31, 45, 6, 7, 2}}
	pyref.Run(t, pyTwin(t)+`
torch.manual_seed(0)
c = inp['cfg']
m = MambaLMHeadModel(c)
with torch.no_grad():
    for p in m.parameters():    # random everything, A_log and D included
        p.copy_(torch.randn_like(p) * 0.3)
    for layer in m.backbone.layers:
        layer.mixer.A_log.copy_(torch.rand_like(layer.mixer.A_log) * 2)
torch.save(m.state_dict(), inp['path'])
m.eval()
logits = m(torch.tensor(inp['ids']))
ids = torch.tensor(inp['ids'])
loss = F.cross_entropy(m(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten(), label_smoothing=0.1)
loss.backward()
emit({'logits': t2l(logits), 'keys': list(m.state_dict().keys()), 'loss': loss.item(),
      'params': [n for n, _ in m.named_parameters()],
      'grads': {n: p.grad.flatten().tolist() for n, p in m.named_parameters()}})
`, map[string]any{"path": path, "ids": ids, "cfg": map[string]any{
		"d_model": cfg.DModel, "n_layers": cfg.NLayers, "d_state": cfg.DState, "expand": cfg.Expand,
		"dt_rank": cfg.DtRank, "d_conv": cfg.DConv, "padded_vocab": cfg.PaddedVocab(), "norm_eps": cfg.NormEps}}, &out)

	m, err := NewLM(cfg)
	require.NoError(t, err)
	defer nn.Free(m)
	var names []string
	for _, p := range nn.StateDict(m) {
		names = append(names, p.Name)
	}
	require.Equal(t, out.Keys, names, "state-dict names and order")
	sd, err := ptfile.LoadTensors(path)
	require.NoError(t, err)
	defer sd.Free()
	_, err = nn.LoadStateDict(m, sd, true)
	require.NoError(t, err)
	nn.SetTraining(m, false)
	for _, s := range []scan.Scan{scan.Fused(4), scan.Sequential(), scan.Chunked(3), scan.LogDepth(4)} {
		m.Scan = s
		torch.NoGrad(func() {
			torch.Tidy(func() {
				logits := m.Forward(torch.FromSlice(flat(ids), []int64{2, int64(len(ids[0]))}))
				got := logits.Float64s()
				var want []float64
				for _, b := range out.Logits {
					for _, r := range b {
						want = append(want, r...)
					}
				}
				require.Len(t, got, len(want))
				for k := range want {
					require.InDelta(t, want[k], got[k], 1e-5, "%s: logit %d", s.Name(), k)
				}
			})
		})
	}
	// The training loss (label smoothing 0.1, through HeadLoss's chunks)
	// and every parameter's gradient, the tied embedding's once.
	nn.SetTraining(m, true)
	m.Scan = scan.Fused(4)
	var params []string
	for _, p := range nn.Parameters(m) {
		params = append(params, p.Name)
	}
	require.Equal(t, out.Params, params, "parameters: the tied head's weight is the embedding's, listed once")
	torch.Tidy(func() {
		all := torch.FromSlice(flat(ids), []int64{2, int64(len(ids[0]))})
		l := all.Size(1) - 1
		loss := m.Loss(all.Narrow(1, 0, l).Contiguous(), all.Narrow(1, 1, l).Contiguous(), 0.1)
		require.InDelta(t, out.Loss, loss.Item(), 1e-5)
		loss.Backward()
		for _, p := range nn.Parameters(m) {
			g := p.T.Grad()
			require.NotNil(t, g, p.Name)
			want := out.Grads[p.Name]
			got := g.Float64s()
			require.Len(t, got, len(want), p.Name)
			for k := range want {
				require.InDelta(t, want[k], got[k], 1e-5+1e-4*abs(want[k]), "%s[%d]", p.Name, k)
			}
		}
	})
	_ = os.Remove(path)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func flat(ids [][]int64) []int64 {
	var out []int64
	for _, r := range ids {
		out = append(out, r...)
	}
	return out
}

// Generation's recurrent step (each layer's convolution window and scan
// state) gives the logits the whole-sequence forward gives at every later
// position: after prompts shorter and longer than the convolution, in
// float64 within 1e-9.
func TestStepEqualsForward(t *testing.T) {
	cfg := ModelConfig{DModel: 16, NLayers: 2, DState: 4, Expand: 2, VocabSize: 40, MaxSeqLen: 64}
	torch.ManualSeed(2)
	m, err := NewLM(cfg)
	require.NoError(t, err)
	defer nn.Free(m)
	nn.To(m, torch.CPU, torch.Float64)
	nn.SetTraining(m, false)
	seq := []int64{3, 1, 4, 1, 5, 9, 2, 6, 5, 3}
	for _, prompt := range []int{1, 2, 6} {
		torch.NoGrad(func() {
			torch.Tidy(func() {
				full := m.Forward(torch.FromSlice(seq, []int64{1, int64(len(seq))})) // (1, l, v)
				states := m.NewStates()
				m.Hidden(torch.FromSlice(seq[:prompt], []int64{1, int64(prompt)}), states)
				for k := prompt; k < len(seq); k++ {
					got := m.StepLogits(torch.FromSlice(seq[k:k+1], []int64{1}), states) // (1, v)
					want := full.Select(1, int64(k))
					require.LessOrEqual(t, got.Sub(want).Abs().Max().Item(), 1e-9, "prompt %d, position %d", prompt, k)
				}
				for _, s := range states {
					s.Free()
				}
			})
		})
	}
}
