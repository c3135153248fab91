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
// (batch, channels, length) layout).
const pyTwin = `
import torch.nn as nn
import torch.nn.functional as F

class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

def selective_scan_ref(u, delta, A, B, C, D, z):
    deltaA = torch.exp(torch.einsum('bdl,dn->bdln', delta, A))
    deltaB_u = torch.einsum('bdl,bnl,bdl->bdln', delta, B, u)
    x = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        ys.append(torch.einsum('bdn,bn->bd', x, C[:, :, i]))
    y = torch.stack(ys, dim=2)
    out = y + u * D[:, None]
    return out * F.silu(z)

class Mamba(nn.Module):
    def __init__(self, d, n, expand, r, k):
        super().__init__()
        e = expand * d
        self.n, self.r = n, r
        self.in_proj = nn.Linear(d, 2 * e, bias=False)
        self.conv1d = nn.Conv1d(e, e, k, groups=e, padding=k - 1, bias=True)
        self.x_proj = nn.Linear(e, r + 2 * n, bias=False)
        self.dt_proj = nn.Linear(r, e, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1, dtype=torch.float32)).repeat(e, 1))
        self.D = nn.Parameter(torch.ones(e))
        self.out_proj = nn.Linear(e, d, bias=False)
    def forward(self, h):
        l = h.shape[1]
        xz = self.in_proj(h).transpose(1, 2)
        x, z = xz.chunk(2, dim=1)
        x = F.silu(self.conv1d(x)[..., :l])
        x_dbl = self.x_proj(x.transpose(1, 2))
        dt, B, C = torch.split(x_dbl, [self.r, self.n, self.n], dim=-1)
        dt = self.dt_proj.weight @ dt.transpose(1, 2)
        delta = F.softplus(dt + self.dt_proj.bias[:, None])
        A = -torch.exp(self.A_log.float())
        y = selective_scan_ref(x, delta, A, B.transpose(1, 2), C.transpose(1, 2), self.D.float(), z)
        return self.out_proj(y.transpose(1, 2))

class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.mixer = Mamba(c['d_model'], c['d_state'], c['expand'], c['dt_rank'], c['d_conv'])
        self.norm = RMSNorm(c['d_model'], 1e-5)
    def forward(self, h, residual):
        residual = h + residual if residual is not None else h
        return self.mixer(self.norm(residual)), residual

class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embedding = nn.Embedding(c['padded_vocab'], c['d_model'])
        self.layers = nn.ModuleList([Block(c) for _ in range(c['n_layers'])])
        self.norm_f = RMSNorm(c['d_model'], 1e-5)
    def forward(self, ids):
        h, res = self.embedding(ids), None
        for layer in self.layers:
            h, res = layer(h, res)
        return self.norm_f(h + res)

class MambaLMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.backbone = Backbone(c)
        self.lm_head = nn.Linear(c['d_model'], c['padded_vocab'], bias=False)
        self.lm_head.weight = self.backbone.embedding.weight
    def forward(self, ids):
        return self.lm_head(self.backbone(ids))
`

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
	pyref.Run(t, pyTwin+`
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
		"dt_rank": cfg.DtRank, "d_conv": cfg.DConv, "padded_vocab": cfg.PaddedVocab()}}, &out)

	m, err := NewLM(cfg)
	require.NoError(t, err)
	defer nn.Free(m)
	var names []string
	for _, p := range nn.StateDict(m) {
		names = append(names, p.Name)
	}
	require.Equal(t, out.Keys, names, "state-dict names and order")
	v, err := ptfile.Load(path)
	require.NoError(t, err)
	defer ptfile.FreeAll(v)
	d := v.(*ptfile.Dict)
	sd := map[string]*torch.Tensor{}
	for _, k := range d.Keys() {
		sd[k.(string)] = d.Tensor(k)
	}
	_, err = nn.LoadStateDict(m, sd, true)
	require.NoError(t, err)
	nn.Train(m, false)
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
	nn.Train(m, true)
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
	nn.Train(m, false)
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
