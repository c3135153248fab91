package ganvit

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// torchvision's vit_b_16, built and saved by Python with a fixed seed (its
// zero-initialised head given random weights so the logits say something),
// loads strictly into NewViT("b16") and gives the same logits within 1e-4,
// and in training mode the same cross-entropy loss and the same gradient
// for every one of its 86M parameters (within 1e-4 of the largest
// component, per tensor). It runs on both legs: torchvision 0.14 with
// Debian's torch 1.13, torchvision 0.26 with torch 2.11 (the version is
// logged).
func TestViTLoadsTorchvisionB16(t *testing.T) {
	dir := t.TempDir()
	sdPath, xPath, gradPath := filepath.Join(dir, "vit_b_16.pt"), filepath.Join(dir, "x.pt"), filepath.Join(dir, "grads.pt")
	var want struct {
		Logits   [][]float64
		Keys     []string
		Loss     float64
		Versions string
	}
	pyref.Run(t, `
		import torchvision
		torch.manual_seed(0)
		m = torchvision.models.vit_b_16(num_classes=4).eval()
		torch.nn.init.normal_(m.heads.head.weight, std=0.05)
		torch.nn.init.normal_(m.heads.head.bias, std=0.05)
		x = torch.randn(2, 3, 224, 224)
		with torch.no_grad():
		    y = m(x)
		torch.save(m.state_dict(), inp["sd"])
		torch.save({"x": x, "y": torch.tensor([1, 3])}, inp["x"])
		m.train()
		loss = torch.nn.functional.cross_entropy(m(x), torch.tensor([1, 3]))
		loss.backward()
		torch.save({n: p.grad for n, p in m.named_parameters()}, inp["grads"])
		emit({"Logits": t2l(y), "Keys": list(m.state_dict().keys()), "Loss": loss.item(),
		      "Versions": "torch %s, torchvision %s" % (torch.__version__, torchvision.__version__)})
	`, map[string]any{"sd": sdPath, "x": xPath, "grads": gradPath}, &want)

	cfg := ViTConfigs["b16"]
	cfg.Classes = 4
	v, err := NewViT(cfg)
	require.NoError(t, err)
	defer nn.Free(v)
	var names []string
	for _, p := range nn.StateDict(v) {
		names = append(names, p.Name)
	}
	require.Equal(t, want.Keys, names, "state-dict names and order")

	sd, err := ptfile.LoadTensors(sdPath)
	require.NoError(t, err)
	defer sd.Free()
	_, err = nn.LoadStateDict(v, sd, true)
	require.NoError(t, err)
	inputs, err := ptfile.LoadTensors(xPath)
	require.NoError(t, err)
	defer inputs.Free()
	xs := inputs.Map()
	nn.SetTraining(v, false)
	var got []float64
	torch.NoGrad(func() {
		torch.Tidy(func() { got = v.Forward(xs["x"]).Float64s() })
	})
	var worst float64
	for i, row := range want.Logits {
		for j, w := range row {
			worst = math.Max(worst, math.Abs(got[i*len(row)+j]-w))
		}
	}
	require.Greater(t, math.Abs(want.Logits[0][0]-want.Logits[0][1])+math.Abs(want.Logits[1][2]-want.Logits[1][3]), 0.1, "the logits differ between classes")
	t.Logf("vit_b_16 (86M parameters, %s), 2 images: max |Go − torchvision| logit difference %.2e", want.Versions, worst)
	require.LessOrEqual(t, worst, 1e-4)

	gradSD, err := ptfile.LoadTensors(gradPath)
	require.NoError(t, err)
	defer gradSD.Free()
	grads := gradSD.Map()
	nn.SetTraining(v, true)
	params := nn.Parameters(v)
	require.Len(t, params, len(grads))
	torch.Tidy(func() {
		loss := torch.CrossEntropy(v.Forward(xs["x"]), xs["y"], nil, torch.ReduceMean, -100, 0)
		require.InDelta(t, want.Loss, loss.Item(), 1e-5)
		loss.Backward()
		var rel float64
		var worstName string
		for _, p := range params {
			g := p.T.Grad()
			require.NotNil(t, g, p.Name)
			w, ok := grads[p.Name]
			require.True(t, ok, p.Name)
			r := g.Sub(w).Abs().Max().Item() / math.Max(w.Abs().Max().Item(), 1e-12)
			if r > rel {
				rel, worstName = r, p.Name
			}
		}
		t.Logf("vit_b_16 gradients: max |Δ| / max |grad| per tensor %.2e (%s)", rel, worstName)
		require.Less(t, rel, 1e-4)
	})
}

// A small torchvision VisionTransformer in float64: the same loss and the
// same gradient for every parameter, with and without checkpointing; and
// with the backbone frozen but one block, only that block, encoder.ln and
// the head get gradients.
func TestViTGradientsMatchTorchvision(t *testing.T) {
	var ref struct {
		SD    map[string][]float64
		X     [][][][]float64
		Y     []int64
		Loss  float64
		Grads map[string][]float64
	}
	pyref.Run(t, `
		import torchvision
		torch.manual_seed(1)
		m = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
		        hidden_dim=16, mlp_dim=32, num_classes=3).double().train()
		torch.nn.init.normal_(m.heads.head.weight, std=0.5)
		torch.nn.init.normal_(m.class_token, std=0.5)
		x = torch.randn(4, 3, 32, 32, dtype=torch.float64)
		y = torch.tensor([0, 2, 1, 2])
		loss = torch.nn.functional.cross_entropy(m(x), y)
		loss.backward()
		emit({"SD": {k: v.flatten().tolist() for k, v in m.state_dict().items()}, "X": x.tolist(), "Y": y.tolist(),
		      "Loss": loss.item(), "Grads": {k: p.grad.flatten().tolist() for k, p in m.named_parameters()}})
	`, nil, &ref)

	cfg := ViTConfigs["tiny"]
	cfg.Classes = 3
	for _, tc := range []struct {
		name       string
		checkpoint bool
		freeze     bool
	}{{"plain", false, false}, {"checkpointing", true, false}, {"frozen but layer 1", false, true}, {"frozen, checkpointing", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewViT(cfg)
			require.NoError(t, err)
			defer nn.Free(v)
			nn.To(v, torch.CPU, torch.Float64)
			var sd torch.StateDict
			for _, p := range nn.StateDict(v) {
				sd = append(sd, torch.Named{Name: p.Name, T: torch.FromSlice(ref.SD[p.Name], p.T.Shape()).Keep()})
			}
			_, err = nn.LoadStateDict(v, sd, true)
			require.NoError(t, err)
			sd.Free()
			v.Checkpointing = tc.checkpoint
			if tc.freeze {
				v.FreezeBackbone()
				require.NoError(t, v.UnfreezeLayers([]int{1}))
				require.Error(t, v.UnfreezeLayers([]int{2}))
			}
			var loss float64
			torch.Tidy(func() {
				x := torch.FromSlice(flat4(ref.X), []int64{4, 3, 32, 32})
				y := torch.FromSlice(ref.Y, []int64{4})
				l := torch.CrossEntropy(v.Forward(x), y, nil, torch.ReduceMean, -100, 0)
				loss = l.Item()
				l.Backward()
			})
			require.InDelta(t, ref.Loss, loss, 1e-12)
			var worst float64
			for _, p := range nn.Parameters(v) {
				g := p.T.Grad()
				frozen := tc.freeze && !(p.Name == "encoder.ln.weight" || p.Name == "encoder.ln.bias" ||
					p.Name == "heads.head.weight" || p.Name == "heads.head.bias" || hasPrefix(p.Name, layerPrefix(1)))
				if frozen {
					require.Nil(t, g, "%s is frozen: no gradient", p.Name)
					continue
				}
				require.NotNil(t, g, p.Name)
				for i, v := range g.Float64s() {
					worst = math.Max(worst, math.Abs(v-ref.Grads[p.Name][i]))
				}
				g.Free()
			}
			require.LessOrEqual(t, worst, 1e-12)
		})
	}
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

func flat4(x [][][][]float64) []float64 {
	var out []float64
	for _, a := range x {
		for _, b := range a {
			for _, c := range b {
				out = append(out, c...)
			}
		}
	}
	return out
}
