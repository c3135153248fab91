package clip

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// The demo path in miniature: pretrain on shapes, fine-tune on cars from
// the pretrained weights (exact, then naive), resume, evaluate; the seed's
// log lines are there, validation runs, checkpoints load in Python's
// format with the model under OpenAI's names.
func TestPretrainThenFineTune(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	shapes, cars := filepath.Join(dir, "shapes"), filepath.Join(dir, "cars")
	_, err := Generate(ctx, GenerateConfig{Out: shapes, Kind: "shapes", Images: 80, Size: 64, Seed: 1})
	require.NoError(t, err)
	_, err = Generate(ctx, GenerateConfig{Out: cars, Kind: "cars", Images: 80, Size: 64, Seed: 2})
	require.NoError(t, err)

	var lines []string
	base := TrainConfig{
		Common: recipes.Common{Data: shapes, MicroBatch: 4, Accum: 4, Precision: "no", Device: torch.CPU, Epochs: 1, MaxSteps: 2, LR: 1e-3, ClipNorm: 1, Workers: 1, Prefetch: 2, Seed: 1, MemoryEvery: 1, CheckpointDir: filepath.Join(dir, "pre")},
		Stage:  "pretrain", Mode: Exact, WeightDecay: 0.1, Events: report.Lines(&lines),
	}
	res, err := Train(ctx, base)
	require.NoError(t, err)
	require.Equal(t, 2, res.Steps)
	require.Equal(t, "cpu", res.Preset)
	log := strings.Join(lines, "\n")
	require.Contains(t, log, "Effective batch size: 16")
	require.Contains(t, log, "GPU Memory - Allocated: ")
	require.Contains(t, log, "device cpu: torchfit's counting allocator")
	require.Contains(t, log, "validation before training")
	pre := res.Checkpoint
	require.FileExists(t, pre)

	// Fine-tune from it.
	lines = nil
	ft := base
	ft.Stage, ft.Data, ft.Init, ft.CheckpointDir, ft.MaxSteps, ft.CheckpointEvery = "train", cars, pre, filepath.Join(dir, "ft"), 2, 1
	res, err = Train(ctx, ft)
	require.NoError(t, err)
	require.Equal(t, 2, res.Steps)
	require.Contains(t, strings.Join(lines, "\n"), "initialised from "+pre)
	require.Contains(t, strings.Join(lines, "\n"), "exact 16-way over micro-batch 4 × 4")
	require.Equal(t, 96, res.Final.Classes)

	// A run of the same model from random weights to step 3, and the
	// resumed run to step 3: the resumed run holds no more (it once kept
	// the file it resumed from beside the run, 3× the model's size, as a
	// run with --init kept its file).
	st := ft
	// The peaks are the process's: what earlier runs left to the garbage
	// collector goes first.
	st.Init, st.CheckpointDir, st.MaxSteps = "", filepath.Join(dir, "straight"), 3
	torch.CollectGarbage()
	straight, err := Train(ctx, st)
	require.NoError(t, err)
	rs := ft
	rs.Init, rs.Resume, rs.MaxSteps = "", res.Checkpoint, 3
	torch.CollectGarbage()
	res, err = Train(ctx, rs)
	require.NoError(t, err)
	require.Equal(t, 3, res.Steps)
	t.Logf("peak memory: straight %d B, resumed %d B", straight.PeakMemory, res.PeakMemory)
	require.LessOrEqual(t, res.PeakMemory, straight.PeakMemory, "peak memory of the resumed run")

	// The checkpoint: the model part is a CLIP state dict with OpenAI's names.
	f, err := ckpt.Read(res.Checkpoint)
	require.NoError(t, err)
	sd, err := f.Tensors("model")
	require.NoError(t, err)
	require.Contains(t, sd.Names(), "visual.transformer.resblocks.3.attn.in_proj_weight")
	require.Contains(t, sd.Names(), "logit_scale")
	f.Free()

	// Naive mode and evaluation.
	lines = nil
	nv := ft
	nv.Mode, nv.CheckpointDir, nv.MaxSteps = Naive, filepath.Join(dir, "naive"), 1
	_, err = Train(ctx, nv)
	require.NoError(t, err)
	require.Contains(t, strings.Join(lines, "\n"), "naive accumulation, 4-way per micro-batch of 4 × 4")
	ev, err := Evaluate(res.Checkpoint, cars, SplitTest, torch.CPU, "no", 8)
	require.NoError(t, err)
	require.Equal(t, 8, ev.N)
	require.GreaterOrEqual(t, ev.ZeroShot, 0.0)
	require.Equal(t, "cpu", ev.Preset)
}

// Inputs of the wrong kind are the user's errors and change nothing: a
// checkpoint of another recipe, a CLIP of another shape against --preset,
// a plain state dict for --resume, a truncated file, a missing data
// directory, too few images for an effective batch.
func TestBadInputs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cars := filepath.Join(dir, "cars")
	_, err := Generate(ctx, GenerateConfig{Out: cars, Kind: "cars", Images: 40, Size: 64, Seed: 2})
	require.NoError(t, err)
	other := filepath.Join(dir, "asr.pt")
	require.NoError(t, ptfile.Save(other, ptfile.NewDict("model", ptfile.NewDict("encoder.weight", torch.Zeros([]int64{2, 2})),
		"meta", ptfile.NewDict("recipe", "asr", "model", "{}"))))
	small := twinConfig
	m, err := NewModel(small)
	require.NoError(t, err)
	named := nn.StateDict(m)
	stateDict := filepath.Join(dir, "sd.pt")
	require.NoError(t, ptfile.SaveTensors(stateDict, named))
	safeStateDict := filepath.Join(dir, "sd.safetensors")
	require.NoError(t, safetensors.Save(safeStateDict, named, nil))
	nn.Free(m)
	raw, err := os.ReadFile(stateDict)
	require.NoError(t, err)
	truncated := filepath.Join(dir, "trunc.pt")
	require.NoError(t, os.WriteFile(truncated, raw[:len(raw)/2], 0o644))

	base := TrainConfig{
		Common: recipes.Common{Data: cars, MicroBatch: 4, Accum: 4, Precision: "no", Device: torch.CPU, Epochs: 1, MaxSteps: 1, LR: 1e-3, Seed: 1, CheckpointDir: filepath.Join(dir, "ck")},
		Stage:  "train", Mode: Exact,
	}
	for _, tc := range []struct {
		name string
		edit func(*TrainConfig)
		want string
	}{
		{"another recipe's checkpoint", func(c *TrainConfig) { c.Init = other }, "asr recipe"},
		{"another shape than --preset", func(c *TrainConfig) { c.Init, c.Preset = stateDict, "cpu" }, "is not preset cpu"},
		{"a state dict for --resume", func(c *TrainConfig) { c.Resume = stateDict }, "not a torchfit CLIP checkpoint"},
		{"a truncated file", func(c *TrainConfig) { c.Init = truncated }, "not a readable torch.save file"},
		{"a safetensors state dict of another shape than --preset", func(c *TrainConfig) { c.Init, c.Preset = safeStateDict, "cpu" }, "is not preset cpu"},
		{"no data", func(c *TrainConfig) { c.Data = filepath.Join(dir, "none") }, "torchfit clip data"},
		{"too few images", func(c *TrainConfig) { c.MicroBatch = 64 }, "fewer than one effective batch"},
		{"an unknown preset", func(c *TrainConfig) { c.Preset = "huge" }, "unknown preset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			_, err := Train(ctx, cfg)
			require.Error(t, err)
			require.True(t, recipes.IsUserError(err), err.Error())
			require.Contains(t, err.Error(), tc.want)
			require.NoDirExists(t, cfg.CheckpointDir, "nothing written")
		})
	}
	_, err = Evaluate(other, cars, SplitTest, torch.CPU, "no", 8)
	require.True(t, recipes.IsUserError(err))
	_, err = Evaluate(stateDict, cars, "dev", torch.CPU, "no", 8)
	require.True(t, recipes.IsUserError(err))
}

// 128-way contrastive training in the memory of 16: a grad-cache step of
// 16 × 8 peaks within a few hundred KiB of the seed's naive 16 × 8 (the
// window's embeddings and its 128 × 128 logits), far below a plain batch
// of 128; both accumulating layouts hold the gradients (6.6 MiB here)
// while later micro-batches run, which a plain batch of 16 does not
// (counting allocator, the cpu preset, fp32).
func TestExactFitsInTheMemoryOf16(t *testing.T) {
	ms, _, err := Measure(MeasureConfig{Preset: "cpu", Device: torch.CPU, Precision: "no", Steps: 1, Seed: 1,
		Layouts: []Layout{{16, 8, Exact}, {16, 8, Naive}, {128, 1, Exact}, {16, 1, Exact}}})
	require.NoError(t, err)
	var b strings.Builder
	writeTable(&b, ms)
	t.Logf("\n%s", b.String())
	exact, naive, plain128, plain16 := ms[0], ms[1], ms[2], ms[3]
	require.Equal(t, 127, exact.Negatives())
	require.Equal(t, 15, naive.Negatives())
	act := func(m Measurement) int64 { return m.Peak - m.Held }
	require.Less(t, act(exact), act(plain128)/3)
	require.Less(t, act(exact)-act(naive), int64(1<<20), "within 1 MiB of naive 16 × 8")
	grads := 4 * nn.NumParams(mustModel(t))
	require.Less(t, act(exact)-act(plain16), grads+int64(1<<20), "a plain batch of 16 plus the gradients held across micro-batches")
}

func mustModel(t *testing.T) *Model {
	t.Helper()
	c, err := Preset("cpu")
	require.NoError(t, err)
	m, err := NewModel(c)
	require.NoError(t, err)
	t.Cleanup(func() { nn.Free(m) })
	return m
}

// The seed's memory line is an epoch's summary: none on the steps (25 of
// them at --memory-every 10 printed it every 2–3 s), one at each epoch's
// end.
func TestSeedMemoryLineEachEpoch(t *testing.T) {
	c, err := Preset("cpu")
	require.NoError(t, err)
	m, err := NewModel(c)
	require.NoError(t, err)
	defer nn.Free(m)
	var lines []string
	p := &progress{cfg: TrainConfig{Common: recipes.Common{Device: torch.CPU, MemoryEvery: 10}}, m: m, res: &Result{}, perEpoch: 100,
		logf:  func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) },
		score: func() (Scores, error) { return Scores{}, nil }}
	for step := 1; step <= 25; step++ {
		p.step(train.StepInfo{Step: step})
	}
	require.Empty(t, lines)
	_, err = p.eval(1)
	require.NoError(t, err)
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], "GPU Memory - Allocated: ")
	require.True(t, p.epochEnd)
	p.step(train.StepInfo{Step: 26})
	require.False(t, p.epochEnd, "a step after the epoch's line: the run's end logs one")
}
