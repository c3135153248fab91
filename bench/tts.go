package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes/tts"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// ttsVocab is a phoneme vocabulary of the size the demo corpus gives
// (specials included).
const ttsVocab = 64

// TTSTwin is recipes/tts's GPT (with its frozen codec) at the CPU sizes
// (tts.DefaultCodecConfig, tts.DefaultGPTConfig), trained as `tts train`
// trains it (scripts/twins/tts.py).
type TTSTwin struct{}

func init() { Register(TTSTwin{}) }

// Name is "tts/cpu".
func (TTSTwin) Name() string { return "tts/cpu" }

// Script is the Python twin.
func (TTSTwin) Script() string { return "scripts/twins/tts.py" }

// Precisions is fp32 only, the recipe's default (--mixed-precision no).
// Under CPU bf16 autocast Python 1.13's norms refuse the conditioning
// encoder's bf16 input with float32 parameters (aten::layer_norm:
// expected scalar type BFloat16 but found Float), where torchfit's norms
// cast around libtorch 1.13's kernels (nn.LayerNorm), so there is no
// Python side to compare bf16 with on that libtorch.
func (TTSTwin) Precisions() []amp.Precision { return []amp.Precision{amp.FP32} }

// Build makes the model (seeded; codec random and frozen, as before
// `tts train-codec`), AdamW as the recipe's (lr 5e-4, betas 0.9/0.96,
// weight decay 0.01 on the GPT's matrices, clipping at 1) and a batch of
// cfg.Batch utterances collated by tts.Collate: log-mels N(0, 1) of 70–100
// % of cfg.Length frames (default 192, 3 s), reference clips of half to all
// of it, one phoneme per 5 frames. One micro-batch is the whole batch (the
// recipe accumulates 8 micro-batches of 4), and dropout is off on both
// sides: the Python twin computes the GPT functionally, as the recipe's
// tests do, without dropout.
func (TTSTwin) Build(cfg Config) (Instance, error) {
	if !Supports(TTSTwin{}, cfg.Precision) {
		return nil, fmt.Errorf("bench: tts/cpu: precision %s: the twin compares fp32 only", cfg.Precision)
	}
	cc, gc := tts.DefaultCodecConfig(), tts.DefaultGPTConfig()
	gc.Codes, gc.Vocab, gc.Dropout = cc.Codes, ttsVocab, 0
	frames := cfg.Length
	if frames <= 0 {
		frames = 192
	}
	var s *SingleModel
	err := torch.Main().DoErr(func() error {
		torch.ManualSeed(cfg.Seed)
		m, err := tts.NewModel(cc, gc)
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(cfg.Seed, 21))
		samples := make([]data.Sample, cfg.Batch)
		for i := range samples {
			t := int64(frames - rng.IntN(frames*3/10+1))
			tc := t/2 + rng.Int64N(t/2+1)
			text := make([]int64, max(1, t/5))
			for k := range text {
				text[k] = 2 + rng.Int64N(ttsVocab-2)
			}
			samples[i] = data.Sample{"mel": torch.Randn([]int64{t, tts.NMels}), "cond": torch.Randn([]int64{tc, tts.NMels}),
				"text": torch.FromSlice(text, nil)}
		}
		b, err := tts.Collate(gc)(samples)
		for _, smp := range samples {
			for _, t := range smp {
				t.Free()
			}
		}
		if err != nil {
			nn.Free(m)
			return err
		}
		py := ptfile.NewDict("cond_lens", b.Lengths["cond"].Ref())
		for k, v := range b.Fields {
			py.Set(k, v.Ref())
		}
		var gpt []nn.Named
		for _, p := range nn.Parameters(m) {
			if strings.HasPrefix(p.Name, "gpt.") {
				gpt = append(gpt, p)
			}
		}
		ccj, _ := json.Marshal(m.Codec.Cfg)
		gcj, _ := json.Marshal(m.GPT.Cfg)
		s = &SingleModel{
			Model: m, Batch: b, PyBatch: py, Precision: cfg.Precision, LR: 5e-4, ClipNorm: 1, Beta2: 0.96, Device: cfg.Dev(),
			Groups: nn.DecayGroups(gpt, 0.01), Loss: m.Loss,
			Spec: map[string]any{"codec": string(ccj), "gpt": string(gcj)},
		}
		return s.Init()
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
