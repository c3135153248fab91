package bench

import (
	"math/rand/v2"

	"github.com/torchfit/torchfit/recipes/clip"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
)

// clipAccum is the recipe's accumulation: 8 micro-batches per step (16 ×
// 8 = 128 by default).
const clipAccum = 8

// CLIPTwin is recipes/clip's model at a preset, trained as the recipe
// trains it (scripts/twins/clip.py): Mode clip.Exact is the grad-cache
// step (the recipe's default), clip.Naive the seed's plain accumulation.
type CLIPTwin struct{ Preset, Mode string }

func init() {
	Register(CLIPTwin{"cpu", clip.Exact})
	Register(CLIPTwin{"cpu", clip.Naive})
}

// Name is "clip/<preset>" for the exact mode, "clip/<preset>-naive" for
// the naive one.
func (c CLIPTwin) Name() string {
	if c.Mode == clip.Exact {
		return "clip/" + c.Preset
	}
	return "clip/" + c.Preset + "-" + c.Mode
}

// Script is the Python twin.
func (CLIPTwin) Script() string { return "scripts/twins/clip.py" }

// Build makes the CLIP (seeded, OpenAI's initialisation), AdamW as the
// recipe trains it (betas 0.9/0.98, eps 1e-6, weight decay 0.1 on
// matrices, lr 2e-5, clipping at 1, logit_scale clamped after each step)
// and one step's batch: cfg.Batch is the micro-batch, and a step is the
// recipe's 8 of them (-batch 16: the recipe's 16 × 8 = 128). Images are
// N(0, 1) (what CLIP's normalisation gives), captions 3 to context−2
// random words between the start and end ids, padded with 0. cfg.Length
// is unused: the context length is the preset's.
func (c CLIPTwin) Build(cfg Config) (Instance, error) {
	mc, err := clip.Preset(c.Preset)
	if err != nil {
		return nil, err
	}
	var s *SingleModel
	err = torch.Main().DoErr(func() error {
		torch.ManualSeed(cfg.Seed)
		m, err := clip.NewModel(mc)
		if err != nil {
			return err
		}
		n := cfg.Batch * clipAccum
		rng := rand.New(rand.NewPCG(cfg.Seed, 17))
		ctx, vocab := mc.ContextLength, mc.VocabSize
		ids := make([]int64, int64(n)*ctx)
		for i := 0; i < n; i++ {
			row := ids[int64(i)*ctx : int64(i+1)*ctx]
			words := 3 + rng.Int64N(ctx-4)
			row[0] = vocab - 2 // start of text
			for k := int64(1); k <= words; k++ {
				row[k] = 1 + rng.Int64N(vocab-3)
			}
			row[words+1] = vocab - 1 // end of text
		}
		b := &data.Batch{Fields: map[string]*torch.Tensor{
			"image": torch.Randn([]int64{int64(n), 3, mc.ImageResolution, mc.ImageResolution}).Keep(),
			"text":  torch.FromSlice(ids, []int64{int64(n), ctx}).Keep(),
		}}
		py := ptfile.NewDict("image", b.Fields["image"].Ref(), "text", b.Fields["text"].Ref())
		embed, batchLoss, microLoss := clip.Objectives(m, cfg.Dev())
		s = &SingleModel{
			Model: m, Batch: b, PyBatch: py, Precision: cfg.Precision, LR: 2e-5, Decay: 0.1, ClipNorm: 1, Device: cfg.Dev(),
			Beta2: 0.98, Eps: 1e-6, Accum: clipAccum, Loss: microLoss, OnStep: m.ClampLogitScale,
			Spec: map[string]any{
				"embed_dim": mc.EmbedDim, "image_resolution": mc.ImageResolution, "vision_layers": mc.VisionLayers,
				"vision_width": mc.VisionWidth, "vision_heads": mc.VisionHeads, "vision_patch_size": mc.VisionPatchSize,
				"context_length": mc.ContextLength, "vocab_size": mc.VocabSize, "transformer_width": mc.TransformerWidth,
				"transformer_heads": mc.TransformerHeads, "transformer_layers": mc.TransformerLayers, "mode": c.Mode,
			},
		}
		if c.Mode == clip.Exact {
			s.Contrastive = &train.Contrastive{Embed: embed, Loss: batchLoss}
		}
		// CLIP's towers have no dropout (attention's is 0): training
		// draws no random numbers (TestCLIPDrawsNothing).
		s.NoRNG = true
		return s.Init()
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
