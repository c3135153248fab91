package train_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// TestWindowReadsItsLossOnce: however many micro-batches a window has,
// its backward pass reads one value on the host, the window's loss, after
// the last backward (on a GPU each read waits for the device: one per
// micro-batch stalled every backward). The loss is summed on the device
// in float64, so it has the bits of the micro-batches' weighted losses
// summed on the host in order. With Pass.DeviceLoss nothing is read.
func TestWindowReadsItsLossOnce(t *testing.T) {
	ds := regressionData(16)
	defer ds.Free()
	var samples []data.Sample
	for i := 0; i < 16; i++ {
		s, err := ds.Get(i)
		require.NoError(t, err)
		samples = append(samples, s)
	}
	b, err := data.Collate(samples)
	require.NoError(t, err)
	defer b.Free()
	for _, micro := range []int{16, 4, 1} {
		m := newRegression(3)
		opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
		eng, err := train.NewEngine(train.EngineConfig{MicroBatch: micro, Device: torch.CPU})
		require.NoError(t, err)
		// The host sum of what each micro-batch contributes, in order.
		var want float64
		for i := 0; i < 16; i += micro {
			torch.NoGrad(func() {
				torch.Tidy(func() {
					mb := b.Slice(i, i+micro, torch.CPU)
					l := m.loss(mb)
					if micro < 16 {
						l = l.MulScalar(float64(micro) / 16)
					}
					want += l.Item()
				})
			})
		}
		var w train.Window
		stats := torch.CountCalls(func() {
			w, err = eng.Backward(b, train.Pass{Loss: m.loss})
		})
		require.NoError(t, err)
		require.Equal(t, 16/micro, w.Micro)
		require.Equal(t, []torch.CallStat{{Name: "aten::item", Calls: 1}}, zeroTimes(torch.HostTransfers(stats)), "micro-batch %d", micro)
		require.Equal(t, want, w.Loss, "micro-batch %d: the host sum's bits", micro)
		require.Nil(t, w.LossTensor)

		// Pass.DeviceLoss: nothing read; the same loss on the device.
		opt.ZeroGrad()
		stats = torch.CountCalls(func() {
			w, err = eng.Backward(b, train.Pass{Loss: m.loss, DeviceLoss: true})
		})
		require.NoError(t, err)
		require.Empty(t, torch.HostTransfers(stats))
		require.Zero(t, w.Loss)
		require.Equal(t, want, w.LossTensor.Item())
		w.LossTensor.Free()
		opt.Free()
		nn.Free(m)
	}
	// A data-parallel window sums its ranks' losses on the host.
	eng, err := train.NewEngine(train.EngineConfig{MicroBatch: 4, Device: torch.CPU, Parallel: oneRank{}})
	require.NoError(t, err)
	m := newRegression(3)
	defer nn.Free(m)
	_, err = eng.Backward(b, train.Pass{Loss: m.loss, DeviceLoss: true})
	require.ErrorIs(t, err, train.ErrDeviceLoss)
}

// oneRank is a Parallel of one rank that never communicates.
type oneRank struct{}

func (oneRank) Rank() int                 { return 0 }
func (oneRank) World() int                { return 1 }
func (oneRank) SumFloats([]float64) error { return nil }
func (oneRank) StartWindow() error        { return nil }
func (oneRank) BeforeBackward(bool) error { return nil }
func (oneRank) AfterBackward() error      { return nil }

func zeroTimes(stats []torch.CallStat) []torch.CallStat {
	for k := range stats {
		stats[k].Time = 0
	}
	return stats
}

// A grad-cache window with CachePass.DeviceLoss reads nothing on the
// host, and with NoRNG takes no generator snapshots: for towers without
// dropout its loss and gradients are those of the window with snapshots,
// to the bit, whether the window is cached (4 micro-batches) or whole.
// With dropout, which breaks NoRNG's promise, the second pass draws other
// masks and the gradient is another.
func TestGradCacheDeviceLoss(t *testing.T) {
	b := pairs(16, torch.Float64)
	defer b.Free()
	run := func(micro int, dropout float64, p train.CachePass) (train.Window, map[string][]float64, []torch.CallStat) {
		m := newTwoTowers(3, dropout, 16, torch.Float64)
		defer nn.Free(m)
		eng, err := train.NewEngine(train.EngineConfig{MicroBatch: micro, Device: torch.CPU})
		require.NoError(t, err)
		p.Embed, p.Loss = m.embed, m.batchLoss
		var w train.Window
		torch.ManualSeed(1)
		stats := torch.CountCalls(func() { w, err = eng.GradCache(b, p) })
		require.NoError(t, err)
		return w, grads(m), stats
	}
	for _, micro := range []int{4, 16} {
		host, want, _ := run(micro, 0, train.CachePass{})
		w, got, stats := run(micro, 0, train.CachePass{DeviceLoss: true, NoRNG: true})
		require.Empty(t, torch.HostTransfers(stats), "micro-batch %d", micro)
		require.Zero(t, w.Loss)
		require.Equal(t, host.Loss, w.LossTensor.Item(), "micro-batch %d", micro)
		w.LossTensor.Free()
		require.Equal(t, want, got, "micro-batch %d", micro)
		require.Equal(t, 16/micro, w.Micro)
	}
	_, want, _ := run(4, 0.5, train.CachePass{})
	_, got, _ := run(4, 0.5, train.CachePass{NoRNG: true})
	require.Greater(t, maxDiff(want, got), 1e-3)
}
