package clip

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
)

// twinConfig is a small CLIP for the Python twin (heads = width/64, as
// OpenAI's build_model infers them).
var twinConfig = Config{EmbedDim: 48, ImageResolution: 32, VisionLayers: 2, VisionWidth: 128, VisionHeads: 2, VisionPatchSize: 8,
	ContextLength: 12, VocabSize: 40, TransformerWidth: 64, TransformerHeads: 1, TransformerLayers: 2}

func maxAbs(a, b []float64) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

func flat(x [][]float64) []float64 {
	var out []float64
	for _, r := range x {
		out = append(out, r...)
	}
	return out
}

// A CLIP written in Python with OpenAI's module names (testdata/twin.py),
// randomly initialised and saved with torch.save(model.state_dict()),
// loads strictly into the Go model — its configuration inferred from the
// shapes as OpenAI's build_model does — and gives the same image and text
// embeddings within 1e-5. Its keys come in the same order as Go's state
// dict; and the Go model's state dict, saved by Go, loads strictly into
// the Python model with the same embeddings.
func TestPythonTwinLoads(t *testing.T) {
	dir := t.TempDir()
	twin, err := filepath.Abs("testdata/twin.py")
	require.NoError(t, err)
	tok, err := NewTokenizer(vocabularyWords()[:20], twinConfig.VocabSize, twinConfig.ContextLength)
	require.NoError(t, err)
	captions := []string{"a photo of a red sedan facing left", "the van is blue and faces right", "a", "a drawing of a green sports car facing to the left and more words"}
	var ids [][]int64
	for _, c := range captions {
		ids = append(ids, tok.Encode(c))
	}
	c := twinConfig
	in := map[string]any{"twin": twin, "path": filepath.Join(dir, "py.pt"), "ids": ids, "go_path": filepath.Join(dir, "go.pt"),
		"cfg": map[string]any{"embed_dim": c.EmbedDim, "image_resolution": c.ImageResolution, "vision_layers": c.VisionLayers,
			"vision_width": c.VisionWidth, "vision_patch_size": c.VisionPatchSize, "context_length": c.ContextLength,
			"vocab_size": c.VocabSize, "transformer_width": c.TransformerWidth, "transformer_heads": c.TransformerHeads,
			"transformer_layers": c.TransformerLayers}}
	var py struct {
		Keys      []string
		Images    [][][][]float64
		Img, Text [][]float64
	}
	pyref.Run(t, `
import importlib.util
spec = importlib.util.spec_from_file_location("twin", inp["twin"])
twin = importlib.util.module_from_spec(spec); spec.loader.exec_module(twin)
torch.manual_seed(0)
m = twin.CLIP(**inp["cfg"]).eval()
with torch.no_grad():  # OpenAI's init leaves these at PyTorch's defaults; randomise them all
    for p in m.parameters():
        p.add_(0.02 * torch.randn_like(p))
torch.save(m.state_dict(), inp["path"])
r = inp["cfg"]["image_resolution"]
images = torch.randn(3, 3, r, r)
ids = torch.tensor(inp["ids"])
with torch.no_grad():
    emit({"keys": list(m.state_dict().keys()), "images": images.tolist(),
          "img": t2l(m.encode_image(images)), "text": t2l(m.encode_text(ids))})
`, in, &py)

	w, err := ReadWeights(in["path"].(string))
	require.NoError(t, err)
	defer w.Free()
	require.Equal(t, twinConfig, w.Meta.Config, "configuration inferred from the shapes")
	m, err := w.Load(in["path"].(string))
	require.NoError(t, err)
	defer nn.Free(m)
	nn.SetTraining(m, false)
	var keys []string
	for _, p := range nn.StateDict(m) {
		keys = append(keys, p.Name)
	}
	require.Equal(t, py.Keys, keys, "state-dict names and order")

	var img, txt []float64
	torch.NoGrad(func() {
		torch.Tidy(func() {
			var px []float32
			for _, im := range py.Images {
				for _, ch := range im {
					for _, row := range ch {
						for _, v := range row {
							px = append(px, float32(v))
						}
					}
				}
			}
			x := torch.FromSlice(px, []int64{3, 3, c.ImageResolution, c.ImageResolution})
			img = m.EncodeImage(x).ToDType(torch.Float64).Float64s()
			var flatIDs []int64
			for _, r := range ids {
				flatIDs = append(flatIDs, r...)
			}
			txt = m.EncodeText(torch.FromSlice(flatIDs, []int64{int64(len(ids)), c.ContextLength})).ToDType(torch.Float64).Float64s()
		})
	})
	// The embeddings are not trivial: they differ from image to image and
	// caption to caption.
	require.Greater(t, maxAbs(py.Img[0], py.Img[1]), 0.01)
	require.Greater(t, maxAbs(py.Text[0], py.Text[1]), 0.01)
	di, dt := maxAbs(flat(py.Img), img), maxAbs(flat(py.Text), txt)
	t.Logf("Python twin vs Go: max |Δ| image embeddings %.2e, text embeddings %.2e", di, dt)
	require.Less(t, di, 1e-5)
	require.Less(t, dt, 1e-5)

	// The other way: Go's state dict into Python, strictly.
	require.NoError(t, ptfile.SaveTensors(in["go_path"].(string), nn.StateDict(m)))
	var back struct{ Img [][]float64 }
	pyref.Run(t, `
import importlib.util
spec = importlib.util.spec_from_file_location("twin", inp["twin"])
twin = importlib.util.module_from_spec(spec); spec.loader.exec_module(twin)
m = twin.CLIP(**inp["cfg"]).eval()
m.load_state_dict(torch.load(inp["go_path"]), strict=True)
torch.manual_seed(0)
r = inp["cfg"]["image_resolution"]
images = torch.tensor(inp["images"])
with torch.no_grad():
    emit({"img": t2l(m.encode_image(images))})
`, map[string]any{"twin": twin, "go_path": in["go_path"], "cfg": in["cfg"], "images": py.Images}, &back)
	require.Less(t, maxAbs(flat(py.Img), flat(back.Img)), 1e-6)
}

// The recipe's exact mode — grad cache over micro-batches through the
// trainer's Contrastive path, with its own objective functions — gives the
// gradient of one plain batch's 32-way loss for every parameter of a CLIP
// (logit_scale included; float64, 4 micro-batches of 8); the naive mode
// (the seed's) gives another.
func TestExactGradient(t *testing.T) {
	torch.ManualSeed(3)
	cfg := twinConfig
	cfg.VisionLayers, cfg.TransformerLayers = 1, 1
	m, err := NewModel(cfg)
	require.NoError(t, err)
	defer nn.Free(m)
	nn.To(m, torch.CPU, torch.Float64)
	tok, err := NewTokenizer(vocabularyWords()[:30], cfg.VocabSize, cfg.ContextLength)
	require.NoError(t, err)
	var ids []int64
	for i := 0; i < 32; i++ {
		ids = append(ids, tok.Encode(vocabularyWords()[i%30]+" "+vocabularyWords()[(i*7)%30])...)
	}
	b := &data.Batch{Fields: map[string]*torch.Tensor{
		"image": torch.Randn([]int64{32, 3, cfg.ImageResolution, cfg.ImageResolution}).ToDType(torch.Float64).Keep(),
		"text":  torch.FromSlice(ids, []int64{32, cfg.ContextLength}).Keep(),
	}}
	defer b.Free()
	grads := func() map[string][]float64 {
		out := map[string][]float64{}
		for _, p := range nn.Parameters(m) {
			if g := p.T.Grad(); g != nil {
				out[p.Name] = g.Float64s()
				g.Free()
			}
			p.T.SetGrad(nil)
		}
		return out
	}
	diff := func(a, b map[string][]float64) (float64, string) {
		var d float64
		var worst string
		for k, x := range a {
			scale := 0.0
			for _, v := range x {
				scale = math.Max(scale, math.Abs(v))
			}
			if e := maxAbs(x, b[k]) / math.Max(scale, 1e-12); e > d {
				d, worst = e, k
			}
		}
		return d, worst
	}
	embed, batchLoss, microLoss := Objectives(m, torch.CPU)
	torch.Tidy(func() { batchLoss(embed(b)).Backward() })
	plain := grads()
	require.Len(t, plain, len(nn.Parameters(m)))

	step := func(mode string) map[string][]float64 {
		eng, err := train.NewEngine(train.EngineConfig{MicroBatch: 8, Device: torch.CPU})
		require.NoError(t, err)
		if mode == Exact {
			_, err = eng.GradCache(b, train.CachePass{Embed: embed, Loss: batchLoss})
		} else {
			_, err = eng.Backward(b, train.Pass{Loss: microLoss})
		}
		require.NoError(t, err)
		return grads()
	}
	de, worst := diff(plain, step(Exact))
	t.Logf("exact 8 × 4 vs plain batch 32: max relative |Δgrad| %.2e (%s)", de, worst)
	require.Less(t, de, 1e-9)
	naive := step(Naive)
	dn, worstN := diff(plain, naive)
	t.Logf("naive 8 × 4 vs plain batch 32: max relative |Δgrad| %.2e (%s); logit_scale gradient %.4f vs %.4f",
		dn, worstN, naive["logit_scale"][0], plain["logit_scale"][0])
	require.Greater(t, dn, 1e-2)
}

// Infer reads the configuration of OpenAI's ViT-B/32 from its shapes
// (built on the meta level only: shapes, no weights).
func TestInferPresets(t *testing.T) {
	for _, name := range PresetNames() {
		c, err := Preset(name)
		require.NoError(t, err)
		if name == "vit-b32" {
			continue // 151M parameters: the shapes alone are checked below
		}
		m, err := NewModel(c)
		require.NoError(t, err)
		got, err := Infer(nn.StateDict(m).Map())
		require.NoError(t, err)
		require.Equal(t, c, got, name)
		t.Logf("preset %s: %d parameters", name, nn.NumParams(m))
		if name == "cpu" {
			require.InDelta(t, 2e6, float64(nn.NumParams(m)), 1e6, "the CPU preset has 1-3M parameters")
		}
		nn.Free(m)
	}
	vit, _ := Preset("vit-b32")
	require.Equal(t, int64(7), vit.Grid())
	require.Equal(t, vit.VisionWidth/64, vit.VisionHeads)
	require.Equal(t, vit.TransformerWidth/64, vit.TransformerHeads)
}
