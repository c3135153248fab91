package train_test

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// seqModel is the shape of the path that failed on CPUs with native bf16:
// linears with a bias (oneDNN bf16 matmuls with a sum post-op), a
// convolution and a norm, over padded sequences of many lengths.
type seqModel struct {
	nn.Base
	in, out *nn.Linear
	conv    *nn.Conv
	norm    *nn.LayerNorm
}

func newSeqModel() *seqModel {
	torch.ManualSeed(3)
	m := &seqModel{}
	m.in = nn.RegisterModule(&m.Base, "in", nn.NewLinear(12, 32, true))
	m.conv = nn.RegisterModule(&m.Base, "conv", nn.NewConv1d(32, 32, 3, torch.ConvOpts{Padding: []int64{1}}, true))
	m.norm = nn.RegisterModule(&m.Base, "norm", nn.NewLayerNorm(32))
	m.out = nn.RegisterModule(&m.Base, "out", nn.NewLinear(32, 1, true))
	return m
}

func (m *seqModel) loss(b *data.Batch) *torch.Tensor {
	h := m.in.Forward(b.Fields["x"]).Relu()                      // [B, L, 32]
	h = m.conv.Forward(h.Transpose(1, 2)).Transpose(1, 2).Relu() // [B, L, 32]
	// libtorch 1.13's CPU autocast leaves layer_norm alone: it needs the
	// input in the weights' dtype (a model's residual stream is float32).
	y := m.out.Forward(m.norm.Forward(h.ToDType(torch.Float32))).SqueezeDim(-1).ToDType(torch.Float32) // [B, L]
	return torch.MSELoss(y.MeanDim([]int64{1}, false), b.Fields["y"], torch.ReduceMean)
}

// Many bf16 autocast steps over sequences of varying length, on every CPU
// (emulated bf16 where the CPU has none: the model is small), with the
// oneDNN primitive cache shrunk so kernels are created and evicted all the
// time, a loader worker computing beside the loop, and Step called from
// several goroutines in turn: every micro-batch computes on one OS thread,
// no step fails, and the loss falls.
func TestBF16TrainingVaryingLengths(t *testing.T) {
	if prev := torch.OneDNNCacheCapacity(); prev > 0 {
		_, err := torch.SetOneDNNCacheCapacity(8)
		require.NoError(t, err)
		defer torch.SetOneDNNCacheCapacity(prev)
	}
	const n, steps = 96, 120
	ds := data.DatasetFunc[data.Sample]{N: n, F: func(i int) (data.Sample, error) {
		l := int64(3 + (i*37)%61) // 61 lengths
		x := torch.Randn([]int64{l, 12})
		y := x.MeanDim([]int64{0, 1}, false).Sin().Unsqueeze(0) // a target the model can learn
		return data.Sample{"x": x, "y": y.SqueezeDim(0)}, nil
	}}
	collate := data.PadCollate(map[string]data.Pad{"x": {Dim: 0}})
	loader, err := data.NewLoader(ds, collate, data.Options{BatchSize: 8, Shuffle: true, Seed: 5, Workers: 1})
	require.NoError(t, err)
	defer loader.Close()

	m := newSeqModel()
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(3e-3))
	defer opt.Free()
	var mu sync.Mutex
	tids := map[int]bool{}
	tr, err := train.New(m, opt, func(b *data.Batch) *torch.Tensor {
		mu.Lock()
		tids[syscall.Gettid()] = true
		mu.Unlock()
		return m.loss(b)
	}, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU, Precision: train.BF16})
	require.NoError(t, err)

	var losses []float64
	for s := 0; s < steps; s++ {
		b, err := loader.Next(t.Context())
		if err != nil { // end of an epoch
			b, err = loader.Next(t.Context())
		}
		require.NoError(t, err)
		var info train.StepInfo
		done := make(chan error)
		go func() { // a different goroutine each step
			var err error
			info, err = tr.Step(b)
			done <- err
		}()
		require.NoError(t, <-done, "step %d", s+1)
		b.Free()
		losses = append(losses, info.Loss)
	}
	require.Len(t, tids, 1, "every micro-batch computed on one OS thread")
	first, last := mean(losses[:20]), mean(losses[steps-20:])
	t.Logf("mean loss of the first 20 steps %.4f, of the last 20 %.4f", first, last)
	require.Less(t, last, first*0.7)
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// A backend fault inside a step (oneDNN's std::bad_array_new_length, here
// injected into the op call where libtorch throws it) is not out of memory:
// the step fails at once with torch.ErrBackend, the micro-batch is not
// halved and nothing is retried.
func TestBackendFaultIsNotRetried(t *testing.T) {
	for _, f := range []torch.Fault{torch.FaultBadArrayNewLength, torch.FaultBadAlloc, torch.FaultBrokenPromise} {
		m := newRegression(1)
		opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
		var logged []string
		tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU,
			Events: report.Lines(&logged)})
		require.NoError(t, err)
		ds := regressionData(8)
		b, err := data.Collate(samples(t, ds, 8))
		require.NoError(t, err)
		_, err = tr.Step(b) // one clean step
		require.NoError(t, err)
		torch.InjectFault(f, 5) // the fifth op of the next step throws
		_, err = tr.Step(b)
		torch.InjectFault(f, 0)
		require.ErrorIs(t, err, torch.ErrBackend)
		require.False(t, errors.Is(err, torch.ErrOutOfMemory), "%v", err)
		require.Contains(t, err.Error(), "not out of memory")
		require.Equal(t, 0, tr.OOMEvents())
		require.Equal(t, 4, tr.MicroBatch(), "the micro-batch is not halved")
		require.Equal(t, 1, tr.Steps(), "the failed step is not counted")
		for _, l := range logged {
			require.NotContains(t, l, "out of memory")
		}
		b.Free()
		opt.Free()
		nn.Free(m)
	}
}

// samples returns the first n samples of ds (the caller's to free).
func samples(t *testing.T, ds data.Dataset[data.Sample], n int) []data.Sample {
	out := make([]data.Sample, n)
	for i := range out {
		s, err := ds.Get(i)
		require.NoError(t, err)
		out[i] = s
	}
	return out
}
