package train_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// batchRun trains the regression model (no dropout) with micro-batches of
// micro × accum for up to maxSteps steps, checkpointing every step into
// dir, resuming from resume when set. It returns the parameters and the
// log lines.
func batchRun(t *testing.T, dir string, maxSteps, micro, accum int, resume string) ([]float32, []string) {
	params, lines, _ := epochRun(t, dir, maxSteps, micro, accum, resume)
	return params, lines
}

// epochRun is batchRun that also returns the epoch events.
func epochRun(t *testing.T, dir string, maxSteps, micro, accum int, resume string) ([]float32, []string, []train.EpochEvent) {
	t.Helper()
	torch.SetNumThreads(1)
	ds := regressionData(96)
	defer ds.Free()
	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: micro, Accum: accum, Device: torch.CPU})
	require.NoError(t, err)
	var lines []string
	var epochs []train.EpochEvent
	newLoader := func(st *data.State) (train.Loader, error) {
		return data.NewLoader(data.Dataset[data.Sample](ds), data.Collate,
			data.Options{BatchSize: tr.EffectiveBatch(), Shuffle: true, Seed: 42, DropLast: true, Resume: st})
	}
	_, err = train.Fit(context.Background(), tr, newLoader, train.FitConfig{
		Epochs: 3, MaxSteps: maxSteps, CheckpointDir: dir, CheckpointEvery: 1, Resume: resume,
		Events: func(e train.Event) {
			switch e := e.(type) {
			case train.Message:
				lines = append(lines, e.Text)
			case train.EpochEvent:
				epochs = append(epochs, e)
			}
		},
	})
	require.NoError(t, err)
	var out []float32
	for _, p := range nn.Parameters(m) {
		out = append(out, p.T.Float32s()...)
	}
	return out, lines, epochs
}

func loaderOf(t *testing.T, path string) (data.State, int, int) {
	t.Helper()
	f, err := ckpt.Read(path)
	require.NoError(t, err)
	defer f.Free()
	st, err := f.Loader()
	require.NoError(t, err)
	micro, err := f.Int("micro_batch")
	require.NoError(t, err)
	accum, err := f.Int("accum")
	require.NoError(t, err)
	return st, micro, accum
}

// The ASR seed's advice when memory runs out: resume with
// --batch_size 1 --gradient_accumulation_steps 8. A resumed run steps in
// the micro-batches it is given (not the checkpoint's), at the same
// effective batch the same training up to rounding; a resumed run with
// another effective batch trains with it, says so, and goes on at the
// same example of the epoch.
func TestResumeTakesTheCommandsBatches(t *testing.T) {
	straight, _ := batchRun(t, t.TempDir(), 8, 2, 4, "")

	dir := t.TempDir()
	batchRun(t, dir, 4, 2, 4, "")
	half := ckpt.StepPath(dir, 4)
	more := t.TempDir()
	resumed, lines := batchRun(t, more, 8, 1, 8, half)
	require.InDeltaSlice(t, straight, resumed, 1e-5, "2 × 4 then 1 × 8 trains as 2 × 4 throughout")
	require.Contains(t, strings.Join(lines, "\n"), "micro-batch 1 × 8 (the checkpoint's run stepped in micro-batches of 2)")
	_, micro, accum := loaderOf(t, ckpt.StepPath(more, 8))
	require.Equal(t, []int{1, 8}, []int{micro, accum}, "the checkpoint says what ran")

	// Effective batch 8 → 16: the epoch (12 batches of 8) goes on at
	// example 32, so its next checkpoint is at example 48.
	other := t.TempDir()
	_, lines = batchRun(t, other, 5, 4, 4, half)
	require.Contains(t, strings.Join(lines, "\n"), "the effective batch changes from the checkpoint's 8 (micro-batch 2 × 4) to 16 (micro-batch 4 × 4)")
	st, micro, accum := loaderOf(t, ckpt.StepPath(other, 5))
	require.Equal(t, data.State{Epoch: 0, Batch: 3, Seed: 42}, st, "example 48 is batch 3 of 16")
	require.Equal(t, []int{4, 4}, []int{micro, accum})
}

// Each epoch event says the run's last step: the step cap, or the epochs'
// end (3 epochs of 12 steps), from a resumed run's too.
func TestEpochEventsSayTheLastStep(t *testing.T) {
	for _, tc := range []struct {
		name             string
		maxSteps, resume int
		want             []int
	}{
		{"capped", 5, 0, []int{5}},
		{"three epochs", 0, 0, []int{36, 36, 36}},
		{"resumed in epoch 2", 0, 14, []int{36, 36}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resume := ""
			if tc.resume > 0 {
				dir := t.TempDir()
				batchRun(t, dir, tc.resume, 2, 4, "")
				resume = ckpt.StepPath(dir, tc.resume)
			}
			_, _, epochs := epochRun(t, t.TempDir(), tc.maxSteps, 2, 4, resume)
			var got []int
			for _, e := range epochs {
				got = append(got, e.LastStep)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
