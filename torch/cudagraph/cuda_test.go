package cudagraph

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// These run where a CUDA device is (gpu-check's go-test check); elsewhere
// they skip.

func needCUDA(t *testing.T) torch.Device {
	dev := torch.CUDA(0)
	if !Available(dev) {
		t.Skip("needs the cuda tag and a CUDA device")
	}
	return dev
}

// A captured function replays on what is copied into its static input,
// after exactly Warmup + 1 runs of the Go function.
func TestCaptureReplay(t *testing.T) {
	dev := needCUDA(t)
	x := torch.Zeros([]int64{4}, torch.Float32, dev).Keep()
	defer x.Free()
	var y *torch.Tensor
	runs := 0
	step := func() error {
		runs++
		if y != nil {
			y.Free()
		}
		y = x.MulScalar(2).AddScalar(1).Keep()
		return nil
	}
	g, err := Capture(dev, step, Options{Warmup: 2})
	require.NoError(t, err)
	defer y.Free()
	require.Equal(t, 3, runs)
	for _, v := range []float64{1, 5, -3} {
		x.FillIn(v)
		require.NoError(t, g.Replay())
		torch.Tidy(func() { require.InDelta(t, 2*v+1, y.Max().Item(), 1e-6) })
	}
	require.Equal(t, 3, runs, "replays do not call the Go function")
	require.NoError(t, g.Free())
	require.ErrorIs(t, g.Replay(), ErrArg)
}

// A step's error, and a step that reads back to the host inside the
// capture, fail Capture with the stream restored: a capture afterwards
// works.
func TestCaptureErrors(t *testing.T) {
	dev := needCUDA(t)
	x := torch.Ones([]int64{8}, torch.Float32, dev).Keep()
	defer x.Free()
	boom := errors.New("boom")
	_, err := Capture(dev, func() error { return boom }, Options{})
	require.ErrorIs(t, err, boom)
	n := 0
	_, err = Capture(dev, func() error {
		n++
		torch.Tidy(func() { x.Sum().Item() }) // a host read: fine eagerly, refused while capturing
		return nil
	}, Options{Warmup: 1})
	require.Error(t, err)
	require.Equal(t, 2, n)
	var y *torch.Tensor
	g, err := Capture(dev, func() error {
		if y != nil {
			y.Free()
		}
		y = x.AddScalar(1).Keep()
		return nil
	}, Options{Warmup: 1})
	require.NoError(t, err)
	defer g.Free()
	defer y.Free()
	require.NoError(t, g.Replay())
	torch.Tidy(func() { require.InDelta(t, 2, y.Min().Item(), 1e-6) })
}

// A whole training step captured with the capturable AdamW: each replay
// gives eager's loss, with the step counter advancing on the device.
func TestCaptureTrainingStep(t *testing.T) {
	dev := needCUDA(t)
	type net struct {
		lin  *nn.Linear
		opt  *AdamW
		x, y *torch.Tensor
		loss *torch.Tensor
	}
	build := func() *net {
		torch.ManualSeed(7)
		lin := nn.NewLinear(16, 4, true)
		nn.To(lin, dev, torch.Float32)
		opt, err := NewAdamW([]nn.ParamGroup{{Params: nn.Parameters(lin)}}, nn.AdamWDefaults(1e-2))
		require.NoError(t, err)
		return &net{lin: lin, opt: opt, x: torch.Zeros([]int64{8, 16}, torch.Float32, dev).Keep(),
			y: torch.Zeros([]int64{8, 4}, torch.Float32, dev).Keep()}
	}
	step := func(n *net) func() error {
		return func() error {
			n.opt.ZeroGrad()
			if n.loss != nil {
				n.loss.Free()
			}
			torch.Tidy(func() {
				n.loss = torch.MSELoss(n.lin.Forward(n.x), n.y, torch.ReduceMean).Keep()
				n.loss.Backward()
			})
			return n.opt.Step()
		}
	}
	torch.ManualSeed(8)
	xs, ys := torch.Randn([]int64{6, 8, 16}, dev).Keep(), torch.Randn([]int64{6, 8, 4}, dev).Keep()
	defer xs.Free()
	defer ys.Free()
	feed := func(n *net, i int) {
		torch.Tidy(func() {
			n.x.CopyFrom(xs.Select(0, int64(i)))
			n.y.CopyFrom(ys.Select(0, int64(i)))
		})
	}
	eager, graphed := build(), build()
	var want []float64
	feed(eager, 0)
	for i := 0; i < DefaultWarmup; i++ {
		require.NoError(t, step(eager)())
	}
	for i := 1; i < 6; i++ {
		feed(eager, i)
		require.NoError(t, step(eager)())
		want = append(want, eager.loss.Item())
	}
	feed(graphed, 0)
	g, err := Capture(dev, step(graphed), Options{})
	require.NoError(t, err)
	defer g.Free()
	for i := 1; i < 6; i++ {
		feed(graphed, i)
		require.NoError(t, g.Replay())
		require.InEpsilon(t, want[i-1], graphed.loss.Item(), 1e-4, "step %d", i)
	}
	n, err := graphed.opt.StepCount()
	require.NoError(t, err)
	require.Equal(t, float64(DefaultWarmup+5), n)
}
