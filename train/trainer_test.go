package train_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// regression is a 3-layer MLP whose activations grow with the micro-batch.
type regression struct {
	nn.Base
	l1, l2, l3 *nn.Linear
}

func newRegression(seed uint64) *regression {
	torch.ManualSeed(seed)
	m := &regression{}
	m.l1 = nn.RegisterModule(&m.Base, "l1", nn.NewLinear(16, 256, true))
	m.l2 = nn.RegisterModule(&m.Base, "l2", nn.NewLinear(256, 256, true))
	m.l3 = nn.RegisterModule(&m.Base, "l3", nn.NewLinear(256, 1, true))
	return m
}

func (m *regression) loss(b *data.Batch) *torch.Tensor {
	h := m.l1.Forward(b.Fields["x"]).Relu()
	h = m.l2.Forward(h).Relu()
	return torch.MSELoss(m.l3.Forward(h).MeanDim([]int64{1}, false), b.Fields["y"], torch.ReduceMean)
}

func regressionData(n int) *data.TensorDataset {
	torch.ManualSeed(99)
	// Each sample is a 32×16 sequence, so activations dominate the memory.
	x := torch.Randn([]int64{int64(n), 32, 16}).Keep()
	w := torch.Randn([]int64{16, 1})
	y := x.Matmul(w).Sin().MeanDim([]int64{1}, false).Keep()
	ds, err := data.NewTensorDataset(map[string]*torch.Tensor{"x": x, "y": y})
	if err != nil {
		panic(err)
	}
	return ds
}

type run struct {
	params []float32
	losses []float64
	log    []string
	t      *train.Trainer
}

// train runs steps optimizer steps of effective batch 16 at micro-batch micro.
func trainRun(t *testing.T, micro, steps int, limit int64) run {
	t.Helper()
	ds := regressionData(256)
	defer ds.Free()
	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.05, Momentum: 0.9})
	defer opt.Free()
	var r run
	cfg := train.Config{MicroBatch: micro, Accum: 16 / micro, Device: torch.CPU,
		Events: report.Lines(&r.log)}
	tr, err := train.New(m, opt, m.loss, cfg)
	require.NoError(t, err)
	r.t = tr
	loader, err := data.NewLoader(data.Dataset[data.Sample](ds), data.Collate, data.Options{BatchSize: 16, Shuffle: true, Seed: 5})
	require.NoError(t, err)
	defer loader.Close()
	if limit > 0 {
		// The cap leaves room for the momentum buffers the first step creates.
		base := torch.MustMemoryStats(torch.CPU).Allocated + nn.ParamBytes(m)
		require.NoError(t, torch.SetMemoryLimit(torch.CPU, base+limit))
		defer torch.SetMemoryLimit(torch.CPU, 0)
	}
	for i := 0; i < steps; i++ {
		b, err := loader.Next(context.Background())
		require.NoError(t, err)
		info, err := tr.Step(b)
		b.Free()
		require.NoError(t, err)
		r.losses = append(r.losses, info.Loss)
	}
	torch.SetMemoryLimit(torch.CPU, 0)
	for _, p := range nn.Parameters(m) {
		r.params = append(r.params, p.T.Float32s()...)
	}
	return r
}

// peakAt measures the peak bytes above baseline of one step at micro-batch micro.
func peakAt(t *testing.T, micro int) int64 {
	t.Helper()
	ds := regressionData(64)
	defer ds.Free()
	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.05, Momentum: 0.9})
	defer opt.Free()
	tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: micro, Accum: 16 / micro, Device: torch.CPU})
	require.NoError(t, err)
	loader, err := data.NewLoader(data.Dataset[data.Sample](ds), data.Collate, data.Options{BatchSize: 16})
	require.NoError(t, err)
	defer loader.Close()
	b, err := loader.Next(context.Background())
	require.NoError(t, err)
	defer b.Free()
	_, err = tr.Step(b) // creates the momentum buffers
	require.NoError(t, err)
	torch.CollectGarbage() // no earlier garbage released mid-step
	base := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	_, err = tr.Step(b)
	require.NoError(t, err)
	return torch.MustMemoryStats(torch.CPU).PeakAllocated - base
}

func TestAccumulationMatchesFullBatch(t *testing.T) {
	full := trainRun(t, 16, 6, 0)
	acc := trainRun(t, 4, 6, 0)
	require.InDeltaSlice(t, full.losses, acc.losses, 1e-5, "micro-batch 4 × 4 sees the same mean loss as batch 16")
	require.InDeltaSlice(t, full.params, acc.params, 1e-5, "and reaches the same parameters")
	require.Contains(t, acc.log[0], "effective batch 16 = micro-batch 4 × 4 accumulation steps")
}

func TestOOMAdaptationMatchesSmallMicroBatch(t *testing.T) {
	p2, p4, p8 := peakAt(t, 2), peakAt(t, 4), peakAt(t, 8)
	t.Logf("peak step memory: micro 2 %s, micro 4 %s, micro 8 %s", torch.FormatBytes(p2), torch.FormatBytes(p4), torch.FormatBytes(p8))
	require.Less(t, p2, p4)
	// A cap that micro-batch 2 fits under and 4 does not: starting at 8, the
	// loop must halve twice, mid-run, and then carry on.
	limit := (p2 + p4) / 2
	ref := trainRun(t, 2, 6, 0)
	adapted := trainRun(t, 8, 6, limit)
	require.Equal(t, 2, adapted.t.MicroBatch(), "two halvings: 8 → 4 → 2")
	require.Equal(t, 2, adapted.t.OOMEvents())
	require.InDeltaSlice(t, ref.losses, adapted.losses, 1e-5, "the same data and effective batch")
	require.InDeltaSlice(t, ref.params, adapted.params, 1e-5, "parameters equal those of a run at micro-batch 2 from the start")
	joined := strings.Join(adapted.log, "\n")
	require.Contains(t, joined, "out of memory at micro-batch 8 (step 1): redoing the window with micro-batch 4 × 4 accumulation steps; effective batch 16 unchanged")
	require.Contains(t, joined, "out of memory at micro-batch 4 (step 2): redoing the window with micro-batch 2 × 8 accumulation steps")
}

func TestOOMAtMicroBatchOneIsAnError(t *testing.T) {
	ds := regressionData(32)
	defer ds.Free()
	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.05})
	defer opt.Free()
	tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU})
	require.NoError(t, err)
	loader, err := data.NewLoader(data.Dataset[data.Sample](ds), data.Collate, data.Options{BatchSize: 8})
	require.NoError(t, err)
	defer loader.Close()
	b, err := loader.Next(context.Background())
	require.NoError(t, err)
	defer b.Free()
	torch.CollectGarbage()
	before := torch.LiveTensors()
	base := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, base+1024))
	_, err = tr.Step(b)
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0))
	require.Error(t, err)
	require.True(t, errors.Is(err, torch.ErrOutOfMemory))
	require.Contains(t, err.Error(), "out of memory even with micro-batch 1")
	require.Equal(t, before, torch.LiveTensors(), "the failed windows released every tensor")
	require.Equal(t, base, torch.MustMemoryStats(torch.CPU).Allocated, "and every byte")
	_, err = tr.Step(b)
	require.NoError(t, err, "the process stays usable: the next step runs")
}
