package bench

import (
	"math/rand/v2"

	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// asrVocab is the demo corpus's vocabulary size (55 tokens, specials included).
const asrVocab = 55

// ASRTwin is recipes/asr's conformer at a preset (scripts/twins/asr.py).
type ASRTwin struct{ Preset string }

func init() {
	Register(ASRTwin{"tiny"})
	Register(ASRTwin{"minimal"})
}

// Name is "asr/<preset>".
func (a ASRTwin) Name() string { return "asr/" + a.Preset }

// Script is the Python twin.
func (ASRTwin) Script() string { return "scripts/twins/asr.py" }

// DefaultFrames is the longest utterance of a benchmark batch (3.2 s):
// the batch's utterances are 70–100 % of it, as the demo corpus's are.
const DefaultFrames = 320

// Build makes the conformer (seeded), AdamW as the recipe trains it (lr
// 1e-3, weight decay 0.01 on matrices, clipping at 5) and a batch of
// cfg.Batch synthetic utterances: log-mel-like features N(0, 1) of
// 70–100 % of cfg.Length frames and 1 token per 8 frames, padded as the
// recipe pads (frames to a multiple of 32, tokens of 8).
func (a ASRTwin) Build(cfg Config) (Instance, error) {
	mc, err := asr.Preset(a.Preset, asrVocab)
	if err != nil {
		return nil, err
	}
	if cfg.Check {
		mc.Dropout = 0
	}
	frames := cfg.Length
	if frames <= 0 {
		frames = DefaultFrames
	}
	var s *SingleModel
	err = torch.Main().DoErr(func() error {
		torch.ManualSeed(cfg.Seed)
		m, err := asr.NewConformer(mc)
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(cfg.Seed, 16))
		samples := make([]data.Sample, cfg.Batch)
		for i := range samples {
			n := int64(frames) - int64(rng.IntN(frames*3/10+1))
			ids := make([]int64, max(1, n/8))
			for k := range ids {
				ids[k] = asr.UNKID + 1 + rng.Int64N(asrVocab-asr.UNKID-1)
			}
			samples[i] = data.Sample{"feats": torch.Randn([]int64{n, mc.NumMels}), "tokens": torch.FromSlice(ids, nil)}
		}
		b, err := asr.Collate(samples)
		for _, smp := range samples {
			for _, t := range smp {
				t.Free()
			}
		}
		if err != nil {
			return err
		}
		noGraph := ""
		if err := asr.CapturableCTC(b); err != nil {
			noGraph = "the captured step's CTC is cuDNN's, which does not take this batch: " + err.Error()
		}
		py := ptfile.NewDict("feats", b.Fields["feats"].Ref(), "feat_lens", b.Lengths["feats"].Ref(),
			"tokens", b.Fields["tokens"].Ref(), "token_lens", b.Lengths["tokens"].Ref())
		s = &SingleModel{
			Model: m, Batch: b, PyBatch: py, Precision: cfg.Precision, LR: 1e-3, Decay: 0.01, ClipNorm: 5, Device: cfg.Dev(),
			Loss: m.BatchLoss,
			// ATen's CTC copies the lengths to the host, and its CUDA
			// kernel copies them back; the captured step takes cuDNN's,
			// which reads them on the device, where the batch fits it.
			GraphLoss:   m.CapturableBatchLoss,
			NoCUDAGraph: noGraph,
			Spec: map[string]any{
				"d_model": mc.DModel, "heads": mc.Heads, "encoder_layers": mc.EncoderLayers,
				"decoder_layers": mc.DecoderLayers, "ff_dim": mc.FFDim, "decoder_ff_dim": decFF(mc),
				"conv_kernel": mc.ConvKernel, "dropout": mc.Dropout, "vocab": mc.Vocab, "mels": mc.NumMels,
				"ctc_weight": mc.CTCWeight, "label_smoothing": mc.LabelSmoothing, "max_len": maxLen(mc),
			},
		}
		return s.Init()
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func decFF(c asr.ModelConfig) int64 {
	if c.DecoderFFDim > 0 {
		return c.DecoderFFDim
	}
	return c.FFDim
}

func maxLen(c asr.ModelConfig) int64 {
	if c.MaxLen > 0 {
		return c.MaxLen
	}
	return 5000
}
