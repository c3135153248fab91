package clip

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

// openCLIPScript builds open_clip's own CLIP (open_clip_torch 3.3.0's
// model code, no one here wrote it), randomly initialised: the built-in
// ViT-B-32 config, or a config dict registered under a name (open_clip's
// add_model_config reads it from a JSON file). QuickGELU is forced:
// ViT-B-32's config uses nn.GELU, the recipe (as OpenAI's CLIP) QuickGELU,
// which open_clip's "-quickgelu" configs and force_quick_gelu select; it
// is the one architectural difference, an activation, and the names and
// shapes are the same either way. Every parameter is then perturbed
// (open_clip's init leaves norms at 1 and biases at 0), the state dict
// saved, and the image and text embeddings and logits of random images
// and token ids reported (the inputs saved too).
const openCLIPScript = `
import os, logging
os.environ["HF_HUB_OFFLINE"] = "1"
logging.disable(logging.WARNING)
import open_clip
name = inp["name"]
if inp["cfg"]:
    path = os.path.join(inp["dir"], name + ".json")
    with open(path, "w") as f:
        json.dump(inp["cfg"], f)
    open_clip.add_model_config(path)
torch.manual_seed(0)
m = open_clip.create_model(name, pretrained=None, force_quick_gelu=True).eval()
with torch.no_grad():
    for p in m.parameters():
        p.add_(0.02 * torch.randn_like(p))
torch.save(m.state_dict(), inp["sd"])
r, ctx, vocab = inp["res"], inp["ctx"], inp["vocab"]
images = torch.randn(3, 3, r, r)
# Token ids as a tokenizer writes them: start, words, end (the highest id,
# found by argmax), zero padding; texts of different lengths.
ids = torch.zeros(3, ctx, dtype=torch.long)
for i, n in enumerate([3, ctx - 2, 1]):
    ids[i, 0] = vocab - 2
    ids[i, 1:n + 1] = torch.randint(1, vocab - 2, (n,))
    ids[i, n + 1] = vocab - 1
torch.save({"images": images, "ids": ids}, inp["x"])
with torch.no_grad():
    img, txt = m.encode_image(images), m.encode_text(ids)
    out = m(images, ids)  # (image_features, text_features, logit_scale), normalised; a dict with output_dict
    if isinstance(out, dict):
        out = out["image_features"], out["text_features"], out["logit_scale"]
    imgn, txtn, scale = out[:3]
    logits = scale * imgn @ txtn.T
emit({"img": t2l(img), "txt": t2l(txt), "logits": t2l(logits), "keys": list(m.state_dict().keys()),
      "cls": type(m).__module__ + "." + type(m).__name__})
`

// open_clip's own CLIP, randomly initialised — the built-in ViT-B-32
// (151M parameters) and a config dict with the recipe's cpu preset shapes
// — saved with torch.save(model.state_dict()): ReadWeights (what --init
// reads) infers the configuration from the shapes, the weights load
// strictly, and the image and text embeddings and the logits match
// open_clip's within float32 tolerance. The cpu preset's weights, saved
// by Go, load strictly into open_clip and give the same embeddings.
// This covers, against a reference no one here wrote, what
// TestPythonTwinLoads checks against testdata/twin.py (OpenAI's names,
// written here); the twin stays: it runs on the Debian 1.13 leg, where
// open_clip is not installed, and checks the state dict's key order too.
func TestOpenCLIPLoads(t *testing.T) {
	pyref.SkipWithout(t, "open_clip")
	cpu, err := Preset("cpu")
	require.NoError(t, err)
	vit, err := Preset("vit-b32")
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		// cfg is open_clip's model config dict (nil: a built-in config).
		cfg  map[string]any
		want Config
		// tol bounds max |Δ| relative to the largest |value|.
		tol  float64
		back bool
	}{
		{name: "ViT-B-32", want: vit, tol: 2e-5},
		{name: "torchfit-cpu", cfg: map[string]any{
			"embed_dim": cpu.EmbedDim,
			"vision_cfg": map[string]any{"image_size": cpu.ImageResolution, "layers": cpu.VisionLayers, "width": cpu.VisionWidth,
				"head_width": cpu.VisionWidth / cpu.VisionHeads, "patch_size": cpu.VisionPatchSize},
			"text_cfg": map[string]any{"context_length": cpu.ContextLength, "vocab_size": cpu.VocabSize, "width": cpu.TransformerWidth,
				"heads": cpu.TransformerHeads, "layers": cpu.TransformerLayers},
		}, want: cpu, tol: 1e-5, back: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sdPath, xPath := filepath.Join(dir, "open_clip.pt"), filepath.Join(dir, "x.pt")
			var ref struct {
				Img, Txt, Logits [][]float64
				Keys             []string
				Cls              string
			}
			pyref.Run(t, openCLIPScript, map[string]any{"name": tc.name, "cfg": tc.cfg, "dir": dir, "sd": sdPath, "x": xPath,
				"res": tc.want.ImageResolution, "ctx": tc.want.ContextLength, "vocab": tc.want.VocabSize}, &ref)
			require.Equal(t, "open_clip.model.CLIP", ref.Cls)

			w, err := ReadWeights(sdPath)
			require.NoError(t, err)
			defer w.Free()
			require.Equal(t, tc.want, w.Meta.Config, "configuration inferred from open_clip's shapes")
			m, err := w.Load(sdPath)
			require.NoError(t, err, "open_clip's state dict loads strictly")
			defer nn.Free(m)
			nn.SetTraining(m, false)
			var names []string
			for _, p := range nn.StateDict(m) {
				names = append(names, p.Name)
			}
			require.ElementsMatch(t, ref.Keys, names, "the same names (open_clip's blocks list ln_1 before attn)")

			xs, err := ptfile.LoadTensors(xPath)
			require.NoError(t, err)
			defer xs.Free()
			x := xs.Map()
			var img, txt, logits []float64
			torch.NoGrad(func() {
				torch.Tidy(func() {
					i, tx := m.EncodeImage(x["images"]), m.EncodeText(x["ids"])
					img, txt = i.ToDType(torch.Float64).Float64s(), tx.ToDType(torch.Float64).Float64s()
					logits = m.Logits(i, tx).ToDType(torch.Float64).Float64s()
				})
			})
			require.Greater(t, maxAbs(ref.Img[0], ref.Img[1]), 0.01, "the embeddings differ from image to image")
			require.Greater(t, maxAbs(ref.Txt[0], ref.Txt[1]), 0.01, "and from text to text")
			for _, c := range []struct {
				what      string
				want, got []float64
			}{{"image embeddings", flat(ref.Img), img}, {"text embeddings", flat(ref.Txt), txt}, {"logits", flat(ref.Logits), logits}} {
				d, scale := maxAbs(c.want, c.got), maxAbs(c.want, make([]float64, len(c.want)))
				t.Logf("open_clip %s vs Go: %s max |Δ| %.2e (largest |value| %.2f)", tc.name, c.what, d, scale)
				require.Less(t, d, tc.tol*math.Max(scale, 1), c.what)
			}
			if !tc.back {
				return
			}

			goPath := filepath.Join(dir, "go.pt")
			require.NoError(t, ptfile.SaveTensors(goPath, nn.StateDict(m)))
			var back struct{ Img, Txt [][]float64 }
			pyref.Run(t, `
				import os, logging
				os.environ["HF_HUB_OFFLINE"] = "1"
				logging.disable(logging.WARNING)
				import open_clip
				open_clip.add_model_config(os.path.join(inp["dir"], inp["name"] + ".json"))
				m = open_clip.create_model(inp["name"], pretrained=None, force_quick_gelu=True).eval()
				m.load_state_dict(torch.load(inp["go"]), strict=True)
				x = torch.load(inp["x"])
				with torch.no_grad():
				    emit({"img": t2l(m.encode_image(x["images"])), "txt": t2l(m.encode_text(x["ids"]))})
			`, map[string]any{"dir": dir, "name": tc.name, "go": goPath, "x": xPath}, &back)
			require.Less(t, maxAbs(flat(ref.Img), flat(back.Img)), 1e-6, "Go's weights in open_clip: the same image embeddings")
			require.Less(t, maxAbs(flat(ref.Txt), flat(back.Txt)), 1e-6, "and text embeddings")
		})
	}
}
