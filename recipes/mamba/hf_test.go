package mamba

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// Hugging Face transformers' MambaForCausalLM (transformers 5.23.0's
// model code, no one here wrote it) with a small MambaConfig, every
// parameter randomised: its state dict, renamed by FromHF, loads strictly
// into the recipe's LM, which gives the same logits whichever scan it
// uses (transformers without the CUDA kernels runs its slow path, a
// sequential loop over positions in torch), the same causal-LM loss
// (transformers shifts the labels itself) and the same gradient for every
// parameter, the tied embedding's once. This checks against a reference
// what TestPythonTwinLoads checks against scripts/twins/mamba.py (written
// here, mamba-ssm's names and selective_scan_ref); the twin stays: it runs
// on the Debian 1.13 leg, where transformers is not installed, checks the
// state dict's key order (transformers lists norm before mixer, A_log
// first) and label smoothing.
func TestHFMambaLoads(t *testing.T) {
	pyref.SkipWithout(t, "transformers")
	for _, cfg := range []ModelConfig{
		{DModel: 32, NLayers: 2, DState: 4, Expand: 2, VocabSize: 64, MaxSeqLen: 64},
		{DModel: 16, NLayers: 3, DState: 8, Expand: 1, DConv: 3, VocabSize: 40, MaxSeqLen: 64},
	} {
		cfg = cfg.withDefaults()
		t.Run(fmt.Sprintf("d_model %d, %d layers, d_state %d", cfg.DModel, cfg.NLayers, cfg.DState), func(t *testing.T) {
			dir := t.TempDir()
			sdPath, gradPath := filepath.Join(dir, "hf.pt"), filepath.Join(dir, "grads.pt")
			ids := [][]int64{{1, 5, 7, 2, 39, 0, 3, 3, 8, 11, 4, 17}, {9, 9, 1, 0, 2, 30, 31, 35, 6, 7, 2, 2}}
			var ref struct {
				Logits [][][]float64
				Loss   float64
				DtRank int64
				Keys   []string
			}
			pyref.Run(t, `
				import os
				os.environ["HF_HUB_OFFLINE"] = "1"
				import transformers
				transformers.logging.set_verbosity_error()
				from transformers import MambaConfig, MambaForCausalLM
				c = inp["cfg"]
				torch.manual_seed(0)
				m = MambaForCausalLM(MambaConfig(vocab_size=c["vocab"], hidden_size=c["d_model"], state_size=c["d_state"],
				    num_hidden_layers=c["n_layers"], expand=c["expand"], conv_kernel=c["d_conv"], time_step_rank="auto",
				    layer_norm_epsilon=c["eps"]))
				with torch.no_grad():
				    for p in m.parameters():    # random everything, A_log and D included
				        p.copy_(torch.randn_like(p) * 0.3)
				    for layer in m.backbone.layers:
				        layer.mixer.A_log.copy_(torch.rand_like(layer.mixer.A_log) * 2)
				torch.save(m.state_dict(), inp["sd"])
				ids = torch.tensor(inp["ids"])
				m.eval()
				with torch.no_grad():
				    logits = m(ids, use_cache=False).logits
				m.train()
				loss = m(ids, labels=ids, use_cache=False).loss
				loss.backward()
				torch.save({n: p.grad for n, p in m.named_parameters()}, inp["grads"])
				emit({"Logits": t2l(logits), "Loss": loss.item(), "DtRank": m.backbone.layers[0].mixer.time_step_rank,
				      "Keys": list(m.state_dict().keys())})
			`, map[string]any{"sd": sdPath, "grads": gradPath, "ids": ids, "cfg": map[string]any{
				"vocab": cfg.VocabSize, "d_model": cfg.DModel, "d_state": cfg.DState, "n_layers": cfg.NLayers,
				"expand": cfg.Expand, "d_conv": cfg.DConv, "eps": cfg.NormEps}}, &ref)
			require.Equal(t, cfg.DtRank, ref.DtRank, `time_step_rank "auto" is the recipe's dt_rank`)
			require.Equal(t, cfg.VocabSize, cfg.PaddedVocab(), "a vocabulary the recipe does not pad")

			m, err := NewLM(cfg)
			require.NoError(t, err)
			defer nn.Free(m)
			hf, err := ptfile.LoadTensors(sdPath)
			require.NoError(t, err)
			defer hf.Free()
			require.Contains(t, hf.Names(), "backbone.embeddings.weight", "transformers' name for the embedding")
			_, err = nn.LoadStateDict(m, hf, true)
			require.Error(t, err, "transformers' names as they are do not load strictly")
			names, renamed := nn.StateDict(m).Names(), FromHF(hf).Names()
			require.Len(t, ref.Keys, len(hf))
			require.ElementsMatch(t, names, renamed, "the same names once renamed (in another order)")
			_, err = nn.LoadStateDict(m, FromHF(hf), true)
			require.NoError(t, err)

			x := torch.FromSlice(flat(ids), []int64{int64(len(ids)), int64(len(ids[0]))})
			defer x.Free()
			var want []float64
			for _, b := range ref.Logits {
				for _, r := range b {
					want = append(want, r...)
				}
			}
			nn.SetTraining(m, false)
			for _, s := range []scan.Scan{scan.Fused(4), scan.Sequential(), scan.Chunked(3), scan.LogDepth(4)} {
				m.Scan = s
				var got []float64
				torch.NoGrad(func() { torch.Tidy(func() { got = m.Forward(x).Float64s() }) })
				require.Len(t, got, len(want))
				var d, scale float64
				for k := range want {
					d, scale = math.Max(d, math.Abs(got[k]-want[k])), math.Max(scale, math.Abs(want[k]))
				}
				t.Logf("%s: max |Δlogit| %.2e (largest |logit| %.1f)", s.Name(), d, scale)
				require.Less(t, d, 1e-5*math.Max(scale, 1), s.Name())
			}

			nn.SetTraining(m, true)
			m.Scan = scan.Fused(4)
			grads, err := ptfile.LoadTensors(gradPath)
			require.NoError(t, err)
			defer grads.Free()
			wantGrads := FromHF(grads).Map()
			require.Len(t, nn.Parameters(m), len(wantGrads), "the tied head's weight is the embedding's, listed once")
			torch.Tidy(func() {
				l := x.Size(1) - 1
				loss := m.Loss(x.Narrow(1, 0, l).Contiguous(), x.Narrow(1, 1, l).Contiguous(), 0)
				require.InDelta(t, ref.Loss, loss.Item(), 1e-5)
				loss.Backward()
				for _, p := range nn.Parameters(m) {
					g := p.T.Grad()
					require.NotNil(t, g, p.Name)
					w, ok := wantGrads[p.Name]
					require.True(t, ok, p.Name)
					got, exp := g.Float64s(), w.Float64s()
					require.Len(t, got, len(exp), p.Name)
					for k := range exp {
						require.InDelta(t, exp[k], got[k], 1e-5+1e-4*math.Abs(exp[k]), "%s[%d]", p.Name, k)
					}
				}
			})
		})
	}
}
