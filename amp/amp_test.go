package amp_test

import (
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

func TestAutocastCPUBFloat16(t *testing.T) {
	torch.ManualSeed(1)
	x := torch.Randn([]int64{4, 8})
	w := torch.Randn([]int64{3, 8}, torch.RequiresGrad)
	target := torch.FromSlice([]int64{0, 1, 2, 1}, nil)
	var y *torch.Tensor
	amp.Autocast(torch.CPU, torch.BFloat16, func() {
		on, dt := amp.Enabled(torch.CPU)
		require.True(t, on)
		require.Equal(t, torch.BFloat16, dt)
		y = torch.Linear(x, w, nil)
		require.Equal(t, torch.BFloat16, y.DType(), "a Linear inside a bf16 region runs in bf16")
		amp.Float32(torch.CPU, func() {
			on, _ := amp.Enabled(torch.CPU)
			require.False(t, on, "Float32 switches autocast off inside the region")
			require.Equal(t, torch.Float32, torch.Linear(x, w, nil).DType())
		})
		on, _ = amp.Enabled(torch.CPU)
		require.True(t, on, "the enclosing region's state comes back")
	})
	loss := torch.CrossEntropy(y.ToDType(torch.Float32), target, nil, torch.ReduceMean, -100, 0)
	require.Equal(t, torch.Float32, loss.DType(), "a loss computed after the region is float32")
	loss.Backward()
	g := w.Grad()
	require.Equal(t, torch.Float32, g.DType(), "float32 weights get float32 gradients")
	runtime.LockOSThread()
	on, _ := amp.Enabled(torch.CPU)
	runtime.UnlockOSThread()
	require.False(t, on, "autocast is off again after the region")
}

func TestAutocastDoesNotLeakAcrossGoroutines(t *testing.T) {
	x := torch.Randn([]int64{2, 4}).Keep()
	w := torch.Randn([]int64{4, 4}).Keep()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if g%2 == 0 {
					amp.Autocast(torch.CPU, torch.BFloat16, func() {
						runtime.Gosched()
						torch.Tidy(func() {
							if dt := x.Matmul(w).DType(); dt != torch.BFloat16 {
								errs <- "inside: " + dt.String()
							}
						})
					})
				} else {
					runtime.Gosched()
					torch.Tidy(func() {
						if dt := x.Matmul(w).DType(); dt != torch.Float32 {
							errs <- "outside: " + dt.String()
						}
					})
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal("autocast state leaked:", e)
	}
}

func TestAutocastCacheClearedAfterStep(t *testing.T) {
	// The verified pitfall: inside one region, an in-place weight update is
	// invisible to the next forward until the cache is cleared.
	w := torch.Ones([]int64{2, 2}, torch.RequiresGrad)
	x := torch.Ones([]int64{1, 2})
	amp.Autocast(torch.CPU, torch.BFloat16, func() {
		before := torch.Linear(x, w, nil).Float32s()
		torch.NoGrad(func() { w.ZeroIn() })
		stale := torch.Linear(x, w, nil).Float32s()
		require.Equal(t, before, stale, "libtorch reuses its cached bf16 weight")
		amp.ClearCache()
		require.Equal(t, []float32{0, 0}, torch.Linear(x, w, nil).Float32s(), "after ClearCache the update is seen")
	})
}

// sgd is a minimal optimizer for the scaler tests.
type sgd struct {
	params []*torch.Tensor
	lr     float64
	steps  int
}

func (o *sgd) Parameters() []*torch.Tensor { return o.params }
func (o *sgd) Step() {
	o.steps++
	torch.NoGrad(func() {
		for _, p := range o.params {
			if g := p.Grad(); g != nil {
				p.AddIn(g, -o.lr)
				g.Free()
			}
		}
	})
}

// The scale's update takes libtorch's fused kernel on the CPU where it
// has one (2.11), and host arithmetic elsewhere: each path, forced, follows
// PyTorch's GradScaler; the fused one reads nothing on the host.
func TestGradScalerMatchesPyTorch(t *testing.T) {
	for _, host := range []bool{true, false} {
		t.Run(map[bool]string{true: "host", false: "fused"}[host], func(t *testing.T) {
			if !host && !amp.CPUUpdateKernel() {
				t.Skip("this libtorch has no CPU kernel for _amp_update_scale_ (1.13): the host path is the CPU's")
			}
			defer amp.ForceHostUpdate(host)()
			gradScalerMatchesPyTorch(t)
			s := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{})
			p := torch.Zeros([]int64{2}, torch.Float32, torch.RequiresGrad)
			defer p.Free()
			defer s.Free()
			torch.Tidy(func() { p.SetGrad(torch.Full([]int64{2}, 3, torch.Float32)) })
			opt := &sgd{params: []*torch.Tensor{p}, lr: 0.1}
			s.Unscale(opt)
			reads := torch.HostTransfers(torch.CountCalls(s.Update))
			if host {
				require.NotEmpty(t, reads)
			} else {
				require.Empty(t, reads)
			}
		})
	}
}

func gradScalerMatchesPyTorch(t *testing.T) {
	// A scripted gradient sequence: finite values, then inf, then nan, with a
	// short growth interval so growth happens too.
	type step struct {
		Grad []float64 `json:"grad"`
	}
	inf, nan := math.Inf(1), math.NaN()
	seq := [][]float64{{1, 2}, {3, 4}, {inf, 1}, {0.5, 0.5}, {1, nan}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {-inf, 0}, {1, 2}}
	const interval = 3

	p := torch.Zeros([]int64{2}, torch.Float64, torch.RequiresGrad)
	opt := &sgd{params: []*torch.Tensor{p}, lr: 0.1}
	s := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{InitScale: 1024, GrowthInterval: interval})
	var scales []float64
	var stepped []bool
	var unscaled [][]float64
	for _, g := range seq {
		scaled := make([]float64, len(g))
		sc := s.ScaleValue()
		for k := range g {
			scaled[k] = g[k] * sc
		}
		p.SetGrad(torch.FromSlice(scaled, nil))
		s.Unscale(opt)
		unscaled = append(unscaled, p.Grad().Float64s())
		stepped = append(stepped, s.Step(opt))
		s.Update()
		scales = append(scales, s.ScaleValue())
	}

	// Python: the real GradScaler state machine; its two CUDA-only kernels
	// are replaced by CPU equivalents written from their CUDA sources.
	var want struct {
		Scales   []float64   `json:"scales"`
		Stepped  []bool      `json:"stepped"`
		Params   []float64   `json:"params"`
		Unscaled [][]float64 `json:"unscaled"`
	}
	encoded := make([][]any, len(seq)) // JSON has no inf/nan: send them as strings
	for i, g := range seq {
		for _, v := range g {
			switch {
			case math.IsInf(v, 1):
				encoded[i] = append(encoded[i], "inf")
			case math.IsInf(v, -1):
				encoded[i] = append(encoded[i], "-inf")
			case math.IsNaN(v):
				encoded[i] = append(encoded[i], "nan")
			default:
				encoded[i] = append(encoded[i], v)
			}
		}
	}
	pyref.Run(t, pyref.WithCPUGradScaler(`
		s = GradScaler(init_scale=1024, growth_interval=inp["interval"])
		s._lazy_init_scale_growth_tracker(torch.device("cpu"))
		p = torch.zeros(2, dtype=torch.float64, requires_grad=True)
		opt = torch.optim.SGD([p], lr=0.1)
		calls = [0]
		plain_step = opt.step
		def counted_step(*a, **k):
		    calls[0] += 1
		    return plain_step(*a, **k)
		opt.step = counted_step
		scales, stepped, unscaled = [], [], []
		for g in inp["seq"]:
		    g = torch.tensor([float(v) for v in g], dtype=torch.float64)
		    p.grad = g * s.get_scale()
		    s.unscale_(opt)
		    unscaled.append([v if math.isfinite(v) else str(v) for v in p.grad.tolist()])
		    before = calls[0]
		    s.step(opt)
		    stepped.append(calls[0] > before)
		    s.update()
		    scales.append(s.get_scale())
		emit({"scales": scales, "stepped": stepped, "params": p.detach().tolist(), "unscaled": []})
	`), map[string]any{"seq": encoded, "interval": interval}, &want)

	require.Equal(t, want.Scales, scales, "scale trajectory")
	require.Equal(t, want.Stepped, stepped, "skipped steps")
	require.InDeltaSlice(t, want.Params, p.Float64s(), 1e-12, "parameters after the run")
	require.Equal(t, 3, s.Skipped)
	require.Equal(t, len(seq)-3, opt.steps)
	require.Equal(t, []float64{3, 4}, unscaled[1], "unscaled gradients are the true ones")
}

func TestGradScalerStateRoundTrip(t *testing.T) {
	s := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{})
	require.Equal(t, 65536.0, s.ScaleValue(), "PyTorch's default initial scale")
	p := torch.Zeros([]int64{1}, torch.RequiresGrad)
	opt := &sgd{params: []*torch.Tensor{p}, lr: 1}
	p.SetGrad(torch.FromSlice([]float32{float32(math.Inf(1))}, nil))
	require.False(t, s.Step(opt))
	s.Update()
	require.Equal(t, 32768.0, s.ScaleValue(), "backoff 0.5")
	st := s.State()
	s2 := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{})
	require.NoError(t, s2.LoadState(st))
	require.Equal(t, st, s2.State())
	d := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{Disabled: true})
	l := torch.Scalar(3)
	require.True(t, d.Scale(l).Same(l), "a disabled scaler passes the loss through")
}

// Float16 autocast on the CPU: libtorch 2.4+ does it, as PyTorch's
// torch.autocast("cpu", dtype=torch.float16), and the scaled step equals
// PyTorch's torch.amp.GradScaler("cpu") step; 1.13 refuses it in one line.
func TestAutocastCPUFloat16(t *testing.T) {
	x := torch.FromSlice([]float32{0.5, -1, 2, 0.25, 1.5, -0.75}, []int64{2, 3})
	w := torch.FromSlice([]float32{0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, []int64{2, 3}, torch.RequiresGrad)
	if !amp.CPUFloat16() {
		err := torch.Try(func() { amp.Autocast(torch.CPU, torch.Float16, func() { torch.Linear(x, w, nil) }) })
		require.ErrorContains(t, err, "bfloat16 only")
		_, err = amp.ParsePrecision("fp16", torch.CPU)
		require.ErrorContains(t, err, "needs libtorch 2.4")
		return
	}
	var y *torch.Tensor
	amp.Autocast(torch.CPU, torch.Float16, func() { y = torch.Linear(x, w, nil) })
	require.Equal(t, torch.Float16, y.DType())
	s := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{InitScale: 1024})
	opt := &sgd{params: []*torch.Tensor{w}, lr: 0.1}
	s.Scale(y.ToDType(torch.Float32).Square().Sum()).Backward()
	require.True(t, s.Step(opt))
	s.Update()
	var want struct {
		Y []float64 `json:"y"`
		W []float64 `json:"w"`
	}
	pyref.Run(t, `
		x = torch.tensor([[0.5, -1, 2], [0.25, 1.5, -0.75]])
		w = torch.tensor([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]], requires_grad=True)
		with torch.autocast("cpu", dtype=torch.float16):
		    y = torch.nn.functional.linear(x, w)
		assert y.dtype == torch.float16
		s = torch.amp.GradScaler("cpu", init_scale=1024)
		opt = torch.optim.SGD([w], lr=0.1)
		s.scale(y.float().square().sum()).backward()
		s.step(opt)
		s.update()
		emit({"y": t2l(y.flatten()), "w": t2l(w.flatten())})
	`, nil, &want)
	require.InDeltaSlice(t, want.Y, y.Float64s(), 1e-3)
	require.InDeltaSlice(t, want.W, w.Float64s(), 1e-6)
}
