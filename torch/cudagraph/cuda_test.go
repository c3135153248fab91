package cudagraph

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
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

// params is an amp.Optimizer that only names parameters: what a
// GradScaler unscales and keeps its record by.
type params struct{ ts []*torch.Tensor }

func (*params) Step()                         {}
func (p *params) Parameters() []*torch.Tensor { return p.ts }

// An fp16 training step with a GradScaler captures: the loss scaled, the
// gradients unscaled, the update skipped by the kernel on inf or nan
// (StepUnlessInf) and the scale updated, all on the device. Replays of
// finite batches train and keep the scale; a batch holding inf skips the
// update (the weights, the moments and the step counter stay) and halves
// the scale.
func TestCaptureScaledStep(t *testing.T) { scaledStep(t, needCUDA(t), true) }

// The same step run eagerly on the CPU (2.11: float16 autocast and the
// fused AdamW there) does the same, each run a replay's stand-in.
func TestScaledStepOnCPU(t *testing.T) {
	if !fusedCPU() {
		t.Skip("this libtorch has no _fused_adamw_ for CPU tensors")
	}
	scaledStep(t, torch.CPU, false)
}

func scaledStep(t *testing.T, dev torch.Device, capture bool) {
	torch.ManualSeed(9)
	lin := nn.NewLinear(16, 4, true)
	nn.To(lin, dev, torch.Float32)
	defer nn.Free(lin)
	key := &params{nn.Tensors(nn.Parameters(lin))}
	opt, err := NewAdamW([]nn.ParamGroup{{Params: nn.Parameters(lin)}}, nn.AdamWDefaults(1e-2))
	require.NoError(t, err)
	defer opt.Free()
	scaler := amp.NewGradScaler(dev, amp.ScalerOptions{InitScale: 1024}) // far from overflow in fp16
	x := torch.Randn([]int64{8, 16}, dev).Keep()
	y := torch.Randn([]int64{8, 4}, dev).Keep()
	defer x.Free()
	defer y.Free()
	var loss *torch.Tensor
	step := func() error {
		opt.ZeroGrad()
		if loss != nil {
			loss.Free()
		}
		err := torch.Try(func() {
			torch.Tidy(func() {
				var out *torch.Tensor
				amp.Autocast(dev, torch.Float16, func() { out = lin.Forward(x) })
				loss = torch.MSELoss(out.ToDType(torch.Float32), y, torch.ReduceMean).Keep()
				scaler.Scale(loss).Backward()
				scaler.Unscale(key)
			})
		})
		if err != nil {
			return err
		}
		if err := opt.StepUnlessInf(scaler.FoundInf(key)); err != nil {
			return err
		}
		return torch.Try(scaler.Update)
	}
	replay := step
	if capture {
		g, err := Capture(dev, step, Options{})
		require.NoError(t, err)
		defer g.Free()
		replay = g.Replay
	} else {
		for i := 0; i < DefaultWarmup+1; i++ { // as Capture runs it
			require.NoError(t, step())
		}
	}
	defer func() { loss.Free() }()
	// The weights and the optimizer's moments.
	weights := func() (out [][]float32) {
		for _, p := range key.ts {
			out = append(out, p.ToDType(torch.Float32).Float32s())
		}
		for _, g := range opt.groups {
			for k := range g.params {
				out = append(out, g.expAvg[k].Float32s(), g.expAvgSq[k].Float32s())
			}
		}
		return out
	}
	for i := 0; i < 3; i++ {
		before := weights()
		require.NoError(t, replay())
		require.NotEqual(t, before, weights(), "replay %d trains", i)
		require.Equal(t, 1024.0, scaler.ScaleValue())
	}
	n, err := opt.StepCount()
	require.NoError(t, err)
	x.FillIn(math.Inf(1))
	before := weights()
	require.NoError(t, replay())
	require.Equal(t, before, weights(), "an inf batch changes no weight and no moment")
	require.Equal(t, 512.0, scaler.ScaleValue(), "and halves the scale")
	m, err := opt.StepCount()
	require.NoError(t, err)
	require.Equal(t, n, m, "nor the step counter")
}

// The CTC that takes its lengths on the device (torch.CTCLossOnDevice,
// cuDNN's) captures, and each replay gives, for new log-probabilities,
// targets and lengths copied into the static inputs, the loss and the
// gradient of libtorch's own CTC run eagerly. That one (torch.CTCLoss)
// copies its lengths to the host and cannot be captured.
func TestCaptureCTCLoss(t *testing.T) {
	dev := needCUDA(t)
	const n, tt, c, s = 3, 30, 6, 5
	x := torch.Zeros([]int64{tt, n, c}, torch.Float32, dev).SetRequiresGrad(true).Keep()
	tg := torch.Zeros([]int64{n, s}, torch.Int64, dev).Keep()
	il := torch.Zeros([]int64{n}, torch.Int64, dev).Keep()
	tl := torch.Zeros([]int64{n}, torch.Int64, dev).Keep()
	free := func(ts ...*torch.Tensor) {
		for _, v := range ts {
			v.Free()
		}
	}
	defer free(x, tg, il, tl)
	rng := rand.New(rand.NewPCG(1, 2))
	feed := func() {
		ids, in, lab := make([]int64, n*s), make([]int64, n), make([]int64, n)
		for b := range n {
			in[b], lab[b] = 20+rng.Int64N(tt-19), 1+rng.Int64N(s)
			for j := range s {
				ids[b*s+j] = 1 + rng.Int64N(c-1)
			}
		}
		torch.Tidy(func() {
			torch.NoGrad(func() { x.CopyFrom(torch.Randn([]int64{tt, n, c}, dev)) })
			tg.CopyFrom(torch.FromSlice(ids, []int64{n, s}))
			il.CopyFrom(torch.FromSlice(in, nil))
			tl.CopyFrom(torch.FromSlice(lab, nil))
		})
	}
	type out struct{ loss, grad *torch.Tensor }
	step := func(o *out, ctc func(lp *torch.Tensor) *torch.Tensor) func() error {
		return func() error {
			free(o.loss, o.grad)
			return torch.Try(func() {
				torch.Tidy(func() {
					l := ctc(x.LogSoftmax(2))
					g := torch.Gradients([]*torch.Tensor{l}, []*torch.Tensor{x}, nil, false, false)[0]
					o.loss, o.grad = l.Detach().Keep(), g.Keep()
				})
			})
		}
	}
	var want, got out
	onDevice := step(&got, func(lp *torch.Tensor) *torch.Tensor { return torch.CTCLossOnDevice(lp, tg, il, tl) })
	native := step(&want, func(lp *torch.Tensor) *torch.Tensor { return torch.CTCLoss(lp, tg, il, tl, 0, torch.ReduceMean, true) })
	defer func() { free(want.loss, want.grad, got.loss, got.grad) }()

	feed()
	_, err := Capture(dev, native, Options{Warmup: 1})
	require.Error(t, err, "libtorch's own CTC copies its lengths to the host")
	g, err := Capture(dev, onDevice, Options{})
	require.NoError(t, err)
	defer g.Free()
	for i := range 4 {
		feed()
		require.NoError(t, native())
		require.NoError(t, g.Replay())
		require.InEpsilon(t, want.loss.Item(), got.loss.Item(), 1e-4, "replay %d", i)
		torch.Tidy(func() {
			diff := got.grad.Sub(want.grad).Abs().Max().Item()
			require.LessOrEqual(t, diff, 1e-4*want.grad.Abs().Max().Item(), "replay %d: gradient", i)
		})
	}
}
