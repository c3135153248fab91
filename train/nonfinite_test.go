package train_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// divergeRun trains the regression model for up to 12 steps, checkpointing
// every step into dir (keeping 3). badLoss says whether the loss of a step
// (1-based) is replaced by NaN; opt builds the optimizer; extra, when set,
// is added to the loss.
func divergeRun(t *testing.T, dir string, maxNonFinite int, badLoss func(step int) bool,
	opt func(ps []nn.Named) nn.Optimizer, extra func(m *regression) *torch.Tensor) (*train.Trainer, error) {
	t.Helper()
	ds := regressionData(96)
	t.Cleanup(ds.Free)
	m := newRegression(1)
	t.Cleanup(func() { nn.Free(m) })
	o := opt(nn.Parameters(m))
	t.Cleanup(o.Free)
	step := 0
	loss := func(b *data.Batch) *torch.Tensor {
		l := m.loss(b)
		if badLoss(step + 1) {
			l = l.MulScalar(math.NaN())
		}
		if extra != nil {
			l = l.Add(extra(m))
		}
		return l
	}
	tr, err := train.New(m, o, loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU, MaxNonFinite: maxNonFinite})
	require.NoError(t, err)
	tr.OnStep = func(s train.StepInfo) { step = s.Step }
	newLoader := func(st *data.State) (train.Loader, error) {
		return data.NewLoader(data.Dataset[data.Sample](ds), data.Collate, data.Options{BatchSize: 8, Shuffle: true, Seed: 1, Resume: st})
	}
	_, err = train.Fit(context.Background(), tr, newLoader, train.FitConfig{
		Epochs: 1, MaxSteps: 12, CheckpointDir: dir, CheckpointEvery: 1, KeepLast: 3,
	})
	return tr, err
}

// checkpointSteps lists the step checkpoints in dir and requires every one
// to hold finite model weights.
func checkpointSteps(t *testing.T, dir string) []int {
	t.Helper()
	var steps []int
	for s := 0; s <= 12; s++ {
		p := ckpt.StepPath(dir, s)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		steps = append(steps, s)
		v, err := ptfile.Load(p)
		require.NoError(t, err)
		md, _ := v.(*ptfile.Dict).Get("model")
		for _, e := range md.(*ptfile.Dict).Entries {
			w := e.Value.(*torch.Tensor)
			require.Equal(t, 1.0, w.IsFinite().All().Item(), "checkpoint %s: %v is not finite", p, e.Key)
		}
		ptfile.FreeAll(v)
	}
	epochs, _ := filepath.Glob(filepath.Join(dir, "checkpoint_epoch_*.pt"))
	require.Empty(t, epochs)
	sort.Ints(steps)
	return steps
}

func adamW(ps []nn.Named) nn.Optimizer { return nn.NewAdamW(ps, nn.AdamWDefaults(1e-3)) }

func TestNonFiniteLossStopsBeforeCheckpointing(t *testing.T) {
	cases := []struct {
		name         string
		maxNonFinite int
		badLoss      func(int) bool
		stopAt       int   // 0: the run finishes
		onDisk       []int // step checkpoints left
	}{
		// NaN from step 5 on: steps 5..9 (the default 5) are not finite;
		// the newest checkpoint is step 4's, the last good one.
		{"default", 0, func(s int) bool { return s >= 5 }, 9, []int{2, 3, 4}},
		{"configured", 2, func(s int) bool { return s >= 5 }, 6, []int{2, 3, 4}},
		// Two bad steps in a row and then a good one: not a divergence, but
		// steps 10 and 11 are not checkpointed (nor do they prune 8 and 9).
		{"transient", 3, func(s int) bool { return s == 10 || s == 11 }, 0, []int{8, 9, 12}},
		{"never", -1, func(s int) bool { return s >= 5 }, 0, []int{2, 3, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tr, err := divergeRun(t, dir, c.maxNonFinite, c.badLoss, adamW, nil)
			if c.stopAt == 0 {
				require.NoError(t, err)
				require.Equal(t, 12, tr.Steps())
			} else {
				require.ErrorIs(t, err, train.ErrNonFinite)
				var ne *train.NonFiniteError
				require.ErrorAs(t, err, &ne)
				require.Equal(t, c.stopAt, ne.Step)
				require.Equal(t, c.stopAt-4, ne.Count)
				require.True(t, math.IsNaN(ne.Loss))
				require.Empty(t, ne.Param)
				require.Equal(t, c.stopAt, tr.Steps())
			}
			require.Equal(t, c.onDisk, checkpointSteps(t, dir))
		})
	}
}

func never(int) bool { return false }

func TestDivergingLRStopsOnTheLoss(t *testing.T) {
	dir := t.TempDir()
	// Every AdamW update moves a weight by about lr: after step 1 the
	// weights are huge but finite, and from step 2 on the loss overflows.
	_, err := divergeRun(t, dir, 0, never, func(ps []nn.Named) nn.Optimizer {
		return nn.NewAdamW(ps, nn.AdamWDefaults(1e36))
	}, nil)
	var ne *train.NonFiniteError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, 6, ne.Step)
	require.Equal(t, 5, ne.Count)
	require.Empty(t, ne.Param)
	require.Equal(t, []int{1}, checkpointSteps(t, dir), "the last checkpoint with a finite loss is the newest")
}

func TestNaNWeightsAreNeverCheckpointed(t *testing.T) {
	dir := t.TempDir()
	// sqrt(|0·w|) is 0 (the loss stays finite) but its gradient is
	// inf·0 = NaN: without clipping, the first update makes l1.weight NaN.
	_, err := divergeRun(t, dir, 0, never, func(ps []nn.Named) nn.Optimizer {
		return nn.NewSGD(ps, nn.SGDConfig{LR: 0.05})
	}, func(m *regression) *torch.Tensor { return m.l1.Weight.MulScalar(0).Abs().Sqrt().Sum() })
	require.ErrorIs(t, err, train.ErrNonFinite)
	var ne *train.NonFiniteError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, 1, ne.Step)
	require.Equal(t, "l1.weight", ne.Param)
	require.Zero(t, ne.Count, "the loss was finite")
	require.Empty(t, checkpointSteps(t, dir), "no checkpoint holds NaN weights")
}
