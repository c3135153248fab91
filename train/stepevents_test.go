package train_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// stepsTo returns a sink that records the StepEvents it receives.
func stepsTo(got *[]train.StepEvent) train.Sink {
	return func(e train.Event) {
		if s, ok := e.(train.StepEvent); ok {
			*got = append(*got, s)
		}
	}
}

// Trainer.Step reports every step to Config.Events, as Fit does, and Fit
// reports each step once: to FitConfig.Events when set (the trainer's
// sink then gets none while Fit runs), else to the trainer's.
func TestStepEventsComeFromStep(t *testing.T) {
	type want struct{ steps, epochs []int }
	cases := []struct {
		name     string
		run      func(t *testing.T, tr *train.Trainer, f *fitter, fitEvents train.Sink)
		trainer  want // StepEvents the trainer's Config.Events gets
		fitEvent want // and FitConfig.Events
	}{
		{
			name: "Step alone",
			run: func(t *testing.T, tr *train.Trainer, f *fitter, _ train.Sink) {
				ld, err := f.newLoader(nil)
				require.NoError(t, err)
				defer ld.Close()
				for i := range 3 {
					if i == 2 {
						tr.SetEpoch(4)
					}
					b, err := ld.Next(context.Background())
					require.NoError(t, err)
					_, err = tr.Step(b)
					b.Free()
					require.NoError(t, err)
				}
			},
			trainer: want{steps: []int{1, 2, 3}, epochs: []int{0, 0, 4}},
		},
		{
			name: "Fit to the trainer's events",
			run: func(t *testing.T, tr *train.Trainer, f *fitter, _ train.Sink) {
				_, err := train.Fit(context.Background(), tr, f.newLoader, train.FitConfig{Epochs: 2, MaxSteps: 10})
				require.NoError(t, err)
			},
			trainer: want{steps: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, epochs: []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}},
		},
		{
			name: "Fit to its own events, then Step to the trainer's",
			run: func(t *testing.T, tr *train.Trainer, f *fitter, events train.Sink) {
				_, err := train.Fit(context.Background(), tr, f.newLoader, train.FitConfig{Epochs: 1, MaxSteps: 3, Events: events})
				require.NoError(t, err)
				ld, err := f.newLoader(nil)
				require.NoError(t, err)
				defer ld.Close()
				b, err := ld.Next(context.Background())
				require.NoError(t, err)
				defer b.Free()
				_, err = tr.Step(b)
				require.NoError(t, err)
			},
			trainer:  want{steps: []int{4}, epochs: []int{0}},
			fitEvent: want{steps: []int{1, 2, 3}, epochs: []int{0, 0, 0}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFitter(t, 16)
			var fromTrainer, fromFit []train.StepEvent
			tr, err := train.New(f.m, f.opt, f.m.loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU, Events: stepsTo(&fromTrainer)})
			require.NoError(t, err)
			var infos []train.StepInfo
			tr.OnStep = func(i train.StepInfo) { infos = append(infos, i) }
			c.run(t, tr, f, stepsTo(&fromFit))
			for _, g := range []struct {
				got  []train.StepEvent
				want want
			}{{fromTrainer, c.trainer}, {fromFit, c.fitEvent}} {
				var steps, epochs []int
				for _, e := range g.got {
					steps, epochs = append(steps, e.Step), append(epochs, e.Epoch)
					require.Equal(t, comparable(infos[e.Step-1]), comparable(e.StepInfo), "the event carries the step's info")
				}
				require.Equal(t, g.want.steps, steps)
				require.Equal(t, g.want.epochs, epochs)
			}
			require.Len(t, infos, len(fromTrainer)+len(fromFit), "one event per step")
		})
	}
}

// comparable makes a NaN gradient norm (none computed) equal to itself.
func comparable(i train.StepInfo) train.StepInfo {
	if math.IsNaN(i.GradNorm) {
		i.GradNorm = -1
	}
	return i
}

// A step that fails (a *NonFiniteError) reports no StepEvent, as Fit never
// did.
func TestStepEventNotForAFailedStep(t *testing.T) {
	f := newFitter(t, 16)
	var got []train.StepEvent
	nan := func(b *data.Batch) *torch.Tensor { return f.m.loss(b).MulScalar(math.NaN()) }
	tr, err := train.New(f.m, f.opt, nan, train.Config{MicroBatch: 8, Accum: 1, Device: torch.CPU, MaxNonFinite: 2, Events: stepsTo(&got)})
	require.NoError(t, err)
	ld, err := f.newLoader(nil)
	require.NoError(t, err)
	defer ld.Close()
	var nf *train.NonFiniteError
	for i := range 2 {
		b, err := ld.Next(context.Background())
		require.NoError(t, err)
		_, err = tr.Step(b)
		b.Free()
		if i == 0 {
			require.NoError(t, err)
		} else {
			require.ErrorAs(t, err, &nf)
		}
	}
	require.Len(t, got, 1, "the skipped step is reported, the one that stops training is not")
	require.True(t, got[0].Skipped)
}
