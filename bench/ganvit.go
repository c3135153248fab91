package bench

import (
	"math/rand/v2"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes/ganvit"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// ViTTwin is recipes/ganvit's genre classifier (torchvision's
// VisionTransformer with vit_b_16's names) at a preset, trained as the
// recipe's Classifier trains it (scripts/twins/ganvit_vit.py).
type ViTTwin struct{ Preset string }

func init() { Register(ViTTwin{"cpu"}) }

// Name is "ganvit/vit-<preset>".
func (v ViTTwin) Name() string { return "ganvit/vit-" + v.Preset }

// Script is the Python twin.
func (ViTTwin) Script() string { return "scripts/twins/ganvit_vit.py" }

// Build makes the preset's ViT for the recipe's four genres (seeded,
// torchvision's initialisation but for the head, which torchvision zeroes
// and which is drawn N(0, 0.05) here so that one step's gradients reach the
// backbone), AdamW as the Classifier's (lr 3e-4, weight decay 0.01 on every
// parameter, clipping at 1) with the whole network trainable (no
// progressive unfreezing), and a batch of cfg.Batch spectrograms (1 ×
// mels × cfg.Length frames, uniform in [−1, 1], the recipe's scaling;
// default the preset's 130 frames) with random genres. The loss resizes
// them to the ViT's image as the recipe does (ganvit.Images).
func (v ViTTwin) Build(cfg Config) (Instance, error) {
	p, ok := ganvit.Presets[v.Preset]
	if !ok {
		return nil, ganvitPresetError(v.Preset)
	}
	vc, err := p.ViTConfig(len(ganvit.Genres))
	if err != nil {
		return nil, err
	}
	frames := int64(cfg.Length)
	if frames <= 0 {
		frames = p.Frames
	}
	var s *SingleModel
	err = torch.Main().DoErr(func() error {
		torch.ManualSeed(cfg.Seed)
		m, err := ganvit.NewViT(vc)
		if err != nil {
			return err
		}
		torch.NoGrad(func() { nn.Normal(m.Heads.Head.Weight, 0, 0.05) })
		rng := rand.New(rand.NewPCG(cfg.Seed, 18))
		labels := make([]int64, cfg.Batch)
		for i := range labels {
			labels[i] = rng.Int64N(int64(len(ganvit.Genres)))
		}
		b := &data.Batch{Fields: map[string]*torch.Tensor{
			"spec":  torch.Rand([]int64{int64(cfg.Batch), 1, p.Mels, frames}).MulScalar(2).AddScalar(-1).Keep(),
			"label": torch.FromSlice(labels, nil).Keep(),
		}}
		py := ptfile.NewDict("spec", b.Fields["spec"].Ref(), "label", b.Fields["label"].Ref())
		s = &SingleModel{
			Model: m, Batch: b, PyBatch: py, Precision: cfg.Precision, LR: 3e-4, ClipNorm: 1,
			Groups: []nn.ParamGroup{nn.ParamGroup{Params: nn.Parameters(m)}.WithWeightDecay(0.01)},
			Loss: func(mb *data.Batch) *torch.Tensor {
				x := ganvit.Images(mb.Fields["spec"], vc.Image)
				return torch.CrossEntropy(m.Forward(x), mb.Fields["label"], nil, torch.ReduceMean, -100, 0)
			},
			Spec: map[string]any{
				"image": vc.Image, "patch": vc.Patch, "layers": vc.Layers, "heads": vc.Heads, "hidden": vc.Hidden,
				"mlp": vc.MLP, "classes": vc.Classes,
			},
		}
		return s.Init()
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

type ganvitPresetError string

func (e ganvitPresetError) Error() string {
	return "bench: recipes/ganvit has no preset " + string(e)
}
