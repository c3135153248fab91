package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes/ganvit"
	"github.com/torchfit/torchfit/torch"
)

// TestGraphStepOnCPU runs MeasureGraph on the CPU for every twin: the
// capturable step (clipping on the device, PyTorch's fused AdamW) follows
// the trainer's losses step for step wherever a twin's step can be
// captured, and every other twin says why not — the steps that would
// wait for a GPU named by their calls. On CUDA (make gpu-check's
// step-time) the same steps are captured and replayed. On libtorch 1.13,
// which has no _fused_adamw_, every step not refused for its structure
// says that instead.
func TestGraphStepOnCPU(t *testing.T) {
	_, err := torch.OpSchema("aten::_fused_adamw_", "")
	fused := err == nil
	cases := []struct {
		twin string
		prec amp.Precision
		// na is what NA says (a part of it); "" where the step runs.
		na string
	}{
		{"ganvit/vit-cpu", amp.FP32, ""},
		{"ganvit/vit-cpu", amp.BF16, ""},
		{"ganvit/vit-cpu", amp.FP16, ""}, // a GradScaler, all on the device
		{"mamba/tiny", amp.FP32, ""},
		{"clip/cpu-naive", amp.FP32, ""},
		{"clip/cpu", amp.FP32, ""}, // the grad cache, no generator snapshots
		{"clip/cpu", amp.BF16, ""},
		{"ganvit/gan-cpu", amp.FP32, ""}, // two models, two AdamWs
		{"ganvit/gan-cpu", amp.BF16, ""},
		{"ganvit/gan-cpu", amp.FP16, ""}, // one GradScaler, two optimizers
		{"clip/cpu", amp.FP16, ""},
		{"asr/tiny", amp.FP32, ""}, // its CTC: libtorch's here, cuDNN's on CUDA
		{"tts/cpu", amp.FP32, ""},
	}
	for _, c := range cases {
		t.Run(c.twin+"/"+string(c.prec), func(t *testing.T) {
			tw, err := Lookup(c.twin)
			require.NoError(t, err)
			cfg := Config{Threads: 1, Precision: c.prec, Batch: 2, Seed: 1}
			res, err := MeasureGraph(tw, cfg, Options{})
			require.NoError(t, err)
			t.Logf("%s %s: NA %q, transfers %v, losses %v / %v, worst %.1e", c.twin, c.prec, res.NA, res.Transfers, res.EagerLoss, res.GraphLoss, res.Worst)
			require.False(t, res.Captured)
			require.Zero(t, res.GraphMS)
			if !fused && (c.na == "" || strings.Contains(c.na, "moves values")) {
				// libtorch 1.13: the step is not run at all.
				require.Contains(t, res.NA, "has no _fused_adamw_")
				return
			}
			if c.na != "" {
				require.Contains(t, res.NA, c.na)
				require.Empty(t, res.EagerLoss)
				if strings.Contains(c.na, "moves values") {
					require.NotEmpty(t, res.Transfers)
				}
				return
			}
			require.Equal(t, "a CUDA graph needs CUDA: the capturable step ran eagerly", res.NA)
			require.Empty(t, res.Transfers)
			require.Len(t, res.GraphLoss, graphSteps)
			require.LessOrEqual(t, res.Worst, res.Tol)
			require.NotEqual(t, res.EagerLoss[0], res.EagerLoss[graphSteps-1], "the steps train")
		})
	}
}

// The ASR twin's captured step takes cuDNN's CTC (asr.CapturableBatchLoss)
// where the batch's lengths fit it, and says why not where they do not.
func TestASRGraphNeedsCuDNNLengths(t *testing.T) {
	tw, err := Lookup("asr/tiny")
	require.NoError(t, err)
	for _, tc := range []struct {
		frames int
		na     string
	}{
		{DefaultFrames, ""},
		{2000, "cuDNN's, which does not take this batch"},
	} {
		inst, err := tw.Build(Config{Threads: 1, Precision: amp.FP32, Batch: 2, Seed: 1, Length: tc.frames})
		require.NoError(t, err)
		s := inst.(*SingleModel)
		require.NotNil(t, s.GraphLoss)
		if tc.na == "" {
			require.Empty(t, s.NoCUDAGraph)
		} else {
			require.Contains(t, s.NoCUDAGraph, tc.na)
		}
		inst.Free()
	}
}

// The GAN's capturable step outside the check draws its noise on the
// device inside the step, as a captured step must (a fresh z at each
// replay): on the CPU that is the global generator GAN.Step draws from,
// so from the same seed the two compute the same iterations, and the
// step moves nothing between Go and tensors.
func TestGANGraphStepDrawsNoise(t *testing.T) {
	_, gs, inst := graphPair(t, "ganvit/gan-cpu", Config{Threads: 1, Precision: amp.FP32, Batch: 2, Seed: 1})
	gan := inst.(*ganInstance).gan
	var transfers []torch.CallStat
	for step := 0; step < 3; step++ {
		seed := uint64(40 + step)
		var want ganvit.GANStep
		var got float64
		require.NoError(t, torch.Main().DoErr(func() error {
			torch.ManualSeed(seed)
			var err error
			if want, err = gan.Step(inst.(*ganInstance).b); err != nil {
				return err
			}
			torch.ManualSeed(seed)
			if step == 0 {
				var err error
				if transfers, err = countedStep(gs); err != nil {
					return err
				}
			} else if err := gs.Step(); err != nil {
				return err
			}
			return torch.Try(func() { got = gs.Loss().Item() })
		}))
		require.Empty(t, transfers)
		require.InDelta(t, want.DLoss+want.GLoss, got, 1e-4*math.Abs(got), "step %d", step)
	}
}

// CLIP's capturable grad-cache step takes no generator snapshots
// (SingleModel.NoRNG), which is right only while its towers draw no
// random numbers in training: two seeds give the same embeddings, to
// the bit. A contrastive twin whose model draws is not captured.
func TestCLIPDrawsNothing(t *testing.T) {
	tw, err := Lookup("clip/cpu")
	require.NoError(t, err)
	inst, err := tw.Build(Config{Threads: 1, Precision: amp.FP32, Batch: 2, Seed: 1})
	require.NoError(t, err)
	defer inst.Free()
	s := inst.(*SingleModel)
	require.NotNil(t, s.Contrastive)
	require.True(t, s.NoRNG)
	var embs [2][][]float32
	require.NoError(t, s.tr.Thread().DoErr(func() error {
		return torch.TidyErr(func() error {
			nn.SetTraining(s.Model, true)
			return torch.Try(func() {
				for k, seed := range []uint64{1, 2} {
					torch.ManualSeed(seed)
					for _, e := range s.Contrastive.Embed(s.Batch) {
						embs[k] = append(embs[k], e.Float32s())
					}
				}
			})
		})
	}))
	require.Len(t, embs[0], 2, "image and text")
	require.Equal(t, embs[0], embs[1])

	if err := capturable(); err != nil {
		return
	}
	s.NoRNG = false
	_, err = s.CaptureStep()
	require.ErrorIs(t, err, ErrNotCapturable)
	require.ErrorContains(t, err, "its model draws random numbers")
}

// Under fp16 the capturable step unscales, skips and updates the scale on
// the device: from a scale at which the gradients overflow it skips its
// steps as the trainer's does (the weights unchanged, the scale halved at
// each), then trains as it does.
func TestGraphStepSkipsOnInf(t *testing.T) {
	gi, gs, inst := graphPair(t, "ganvit/vit-cpu", Config{Threads: 1, Precision: amp.FP16, Batch: 2, Seed: 1, Check: true})
	eager := inst.(*SingleModel)
	high := map[string]float64{"scale": 1 << 20, "growth_tracker": 0}
	require.NoError(t, gs.scaler.LoadState(high))
	require.NoError(t, eager.tr.Scaler.LoadState(high))
	weights := func(m nn.Module) (out [][]float32) {
		for _, p := range nn.Parameters(m) {
			out = append(out, p.T.ToDType(torch.Float32).Float32s())
		}
		return out
	}
	skipped, trained := 0, 0
	for step := 0; trained < 2 && step < 64; step++ {
		before := weights(gi.(*SingleModel).Model)
		scale := gs.scaler.ScaleValue()
		info, err := eager.tr.Step(eager.Batch)
		require.NoError(t, err)
		var got float64
		require.NoError(t, torch.Main().DoErr(func() error {
			if err := gs.Step(); err != nil {
				return err
			}
			return torch.Try(func() { got = gs.Loss().Item() })
		}))
		require.InDelta(t, info.Loss, got, 1e-2*math.Abs(info.Loss), "step %d", step)
		require.Equal(t, eager.tr.Scaler.ScaleValue(), gs.scaler.ScaleValue(), "step %d", step)
		if info.Skipped {
			skipped++
			require.Zero(t, trained, "step %d: skipped after training", step)
			require.Equal(t, before, weights(gi.(*SingleModel).Model), "step %d: skipped, the weights unchanged", step)
			require.Equal(t, scale/2, gs.scaler.ScaleValue(), "step %d: the scale halved", step)
		} else {
			trained++
			require.NotEqual(t, before, weights(gi.(*SingleModel).Model), "step %d: trained", step)
		}
	}
	t.Logf("%d steps skipped from a scale of 2^20, then %d trained", skipped, trained)
	require.Positive(t, skipped)
	require.Equal(t, 2, trained)
}

// graphPair builds twin name at cfg twice: once with its capturable step
// (gi, gs), once to train with the trainer's step (inst); all are freed
// when t ends. Without the capturable AdamW t is skipped.
func graphPair(t *testing.T, name string, cfg Config) (gi Instance, gs *GraphStep, inst Instance) {
	t.Helper()
	if err := capturable(); err != nil {
		t.Skipf("%v", err)
	}
	tw, err := Lookup(name)
	require.NoError(t, err)
	gi, gs, err = buildGraphStep(tw, cfg)
	require.NoError(t, err)
	t.Cleanup(gi.Free)
	t.Cleanup(gs.Free)
	inst, err = tw.Build(cfg)
	require.NoError(t, err)
	t.Cleanup(inst.Free)
	return gi, gs, inst
}
