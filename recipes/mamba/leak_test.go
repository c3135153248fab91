package mamba

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
)

// Train (with the optimizer offloaded), Evaluate and Generate leave no
// tensor behind: a process running them one after another (a test, a
// notebook) does not grow. Before they ran in a tensor scope, offloaded
// training left 27 MB and evaluation 52 MB.
func TestEntryPointsFreeEverything(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "kjv")
	_, err := BuildData(context.Background(), DataConfig{Out: data, ValidFraction: 0.05})
	require.NoError(t, err)
	a := func() int64 { return torch.MustMemoryStats(torch.CPU).Allocated }
	a0 := a()
	tp := TrainingPresets["cpu"]
	tp.MaxSteps = 2
	mc := ModelSizes["tiny"]
	res, err := Train(context.Background(), TrainConfig{
		Common: recipes.Common{Data: data, MicroBatch: 8, Accum: 1, Precision: "no", Device: torch.CPU, Epochs: 1,
			CheckpointDir: filepath.Join(dir, "ck"), Workers: 1, LR: tp.LR, MaxSteps: tp.MaxSteps, Warmup: tp.WarmupSteps,
			CheckpointEvery: tp.SaveInterval, ClipNorm: tp.MaxGradNorm},
		Model: mc, SeqLen: 128, Optim: tp.Optim, Scan: "fused", EvalTokens: 1024, CPUOffload: true})
	require.NoError(t, err)
	a1 := a()
	require.Zero(t, a1-a0, "offloaded training")
	_, err = Evaluate(EvalConfig{Checkpoint: res.Checkpoint, Data: data, MaxTokens: 1024, Batch: 8})
	require.NoError(t, err)
	a2 := a()
	require.Zero(t, a2-a1, "evaluation")
	_, err = Generate(GenerateConfig{Checkpoint: res.Checkpoint, Prompt: "And", MaxNewTokens: 3})
	require.NoError(t, err)
	require.Zero(t, a()-a2, "generation")
}
