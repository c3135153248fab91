package bench

import (
	"fmt"
	"math/rand/v2"

	"github.com/torchfit/torchfit/recipes/mamba"
	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// MambaTwin is recipes/mamba's language model at a model size, trained
// with a training preset's AdamW as the recipe trains it
// (scripts/twins/mamba.py). Sequential replaces the recipe's fused scan
// with scan.Sequential, the same loop over positions as the Python
// twin's reference scan: like for like.
type MambaTwin struct {
	Size, Training string
	Sequential     bool
}

func init() {
	Register(MambaTwin{Size: "tiny", Training: "cpu"})
	Register(MambaTwin{Size: "tiny", Training: "cpu", Sequential: true})
}

// Name is "mamba/<size>", or "mamba/<size>-sequential".
func (m MambaTwin) Name() string {
	if m.Sequential {
		return "mamba/" + m.Size + "-sequential"
	}
	return "mamba/" + m.Size
}

// Script is the Python twin.
func (MambaTwin) Script() string { return "scripts/twins/mamba.py" }

// mambaPyPeakTokens is the most tokens a batch may hold for the Python
// peak to be measured: the reference scan's loop records a few ops per
// position and the profiler's memory grows faster than their number
// (on 1.13, 0.6 GB more for 32 positions of a (8, 256, 16) state, 2 GB
// for 64; at 8 × 128 tokens it passed 20 GB and the kernel killed it).
const mambaPyPeakTokens = 2 * mambaSeq

// PyPeakUnmeasured: above mambaPyPeakTokens tokens a batch, Python's peak
// is not measured (-batch 2 measures it).
func (MambaTwin) PyPeakUnmeasured(cfg Config) string {
	seq := cfg.Length
	if seq <= 0 {
		seq = mambaSeq
	}
	if cfg.Batch*seq > mambaPyPeakTokens {
		return fmt.Sprintf("profiler: n/a above %d tokens", mambaPyPeakTokens)
	}
	return ""
}

// mambaSeq is the CPU preset's sequence length (--vram cpu: 8 × 128).
const mambaSeq = 128

// Build makes the LM (seeded; the recipe's fused scan), AdamW with the
// training preset's learning rate, betas, epsilon, clipping and weight
// decay on the projections and the convolution only (the recipe's groups:
// LM.ParamGroups), and a batch of cfg.Batch windows of cfg.Length tokens
// (default 128) drawn uniformly from GPT-2's vocabulary, targets the next
// tokens. The loss is the recipe's (LM.Loss: chunked head, label
// smoothing).
func (t MambaTwin) Build(cfg Config) (Instance, error) {
	mc, err := mamba.ModelSize(t.Size)
	if err != nil {
		return nil, err
	}
	tp, err := mamba.TrainingPreset(t.Training)
	if err != nil {
		return nil, err
	}
	seq := int64(cfg.Length)
	if seq <= 0 {
		seq = mambaSeq
	}
	var s *SingleModel
	err = torch.Main().DoErr(func() error {
		torch.ManualSeed(cfg.Seed)
		m, err := mamba.NewLM(mc)
		if err != nil {
			return err
		}
		if t.Sequential {
			m.Scan = scan.Sequential()
		}
		c := m.Config
		n := int64(cfg.Batch)
		rng := rand.New(rand.NewPCG(cfg.Seed, 20))
		ids := make([]int64, n*(seq+1))
		for i := range ids {
			ids[i] = rng.Int64N(c.VocabSize)
		}
		all := torch.FromSlice(ids, []int64{n, seq + 1})
		b := &data.Batch{Fields: map[string]*torch.Tensor{
			"x": all.Narrow(1, 0, seq).Contiguous().Keep(),
			"y": all.Narrow(1, 1, seq).Contiguous().Keep(),
		}}
		all.Free()
		py := ptfile.NewDict("x", b.Fields["x"].Ref(), "y", b.Fields["y"].Ref())
		ls := tp.LabelSmoothing
		s = &SingleModel{
			Model: m, Batch: b, PyBatch: py, Precision: cfg.Precision, LR: tp.LR, ClipNorm: tp.MaxGradNorm, Device: cfg.Dev(),
			Beta2: tp.Beta2, Eps: tp.Eps, Groups: m.ParamGroups(tp.WeightDecay),
			Loss: func(mb *data.Batch) *torch.Tensor { return m.Loss(mb.Fields["x"], mb.Fields["y"], ls) },
			Spec: map[string]any{
				"d_model": c.DModel, "n_layers": c.NLayers, "d_state": c.DState, "expand": c.Expand,
				"dt_rank": c.DtRank, "d_conv": c.DConv, "padded_vocab": c.PaddedVocab(), "norm_eps": c.NormEps,
				"label_smoothing": ls,
			},
		}
		return s.Init()
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
