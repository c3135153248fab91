package train_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

func TestTrainerFindBatchSizeUnderCap(t *testing.T) {
	ds := regressionData(128)
	defer ds.Free()
	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewAdam(nn.Parameters(m), nn.AdamDefaults(1e-3))
	defer opt.Free()
	tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: 1, Accum: 1, Device: torch.CPU})
	require.NoError(t, err)
	batch := func(n int) (*data.Batch, error) {
		samples := make([]data.Sample, n)
		for i := range samples {
			samples[i], _ = ds.Get(i)
		}
		defer func() {
			for _, s := range samples {
				for _, t := range s {
					t.Free()
				}
			}
		}()
		return data.Collate(samples)
	}
	before := nn.StateDict(m)
	want := map[string][]float32{}
	for _, p := range before {
		want[p.Name] = p.T.Float32s()
	}
	opt.State() // the optimizer's own hyperparameter tensors, created once
	torch.CollectGarbage()
	live := torch.LiveTensors()
	base := torch.MustMemoryStats(torch.CPU).Allocated
	// Room for the search's CPU copy of the parameters and for a step at
	// micro-batch 8 (Adam's state included) with a little to spare.
	p8 := peakFor(t, tr, batch, 8)
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, base+nn.ParamBytes(m)+p8+p8/10))
	res, err := tr.FindBatchSize(128, batch)
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0))
	require.NoError(t, err)
	var buf bytes.Buffer
	res.Table(&buf)
	t.Log("\n" + buf.String())
	require.GreaterOrEqual(t, res.MicroBatch, 8)
	require.Less(t, res.MicroBatch, 16)
	for _, tri := range res.Trials {
		if tri.Fits {
			require.Positive(t, tri.Peak)
		}
	}
	for _, p := range nn.StateDict(m) {
		require.Equal(t, want[p.Name], p.T.Float32s(), "parameters restored after the search")
	}
	require.Equal(t, live, torch.LiveTensors(), "the search leaves no tensor behind")
	require.Equal(t, base, torch.MustMemoryStats(torch.CPU).Allocated, "and no memory")
}

// peakFor returns the peak of a trial step at micro-batch n.
func peakFor(t *testing.T, tr *train.Trainer, batch func(int) (*data.Batch, error), n int) int64 {
	res, err := tr.FindBatchSize(n, batch)
	require.NoError(t, err)
	last := res.Trials[len(res.Trials)-1]
	require.Equal(t, n, last.MicroBatch)
	return last.Peak
}
