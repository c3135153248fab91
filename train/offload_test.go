package train_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
)

// offloadRun trains the regression MLP with AdamW, its state offloaded to
// the CPU (or not), from the checkpoint resume when given, and returns
// the parameters after steps steps; save names a checkpoint of the end.
func offloadRun(t *testing.T, offload, master bool, steps int, save, resume string) []float32 {
	t.Helper()
	prev := torch.NumThreads()
	torch.SetNumThreads(1)
	defer torch.SetNumThreads(prev)
	ds := regressionData(128)
	defer ds.Free()
	m := newRegression(1)
	defer nn.Free(m)
	newAdamW := func(g []nn.ParamGroup) nn.Optimizer { return nn.NewAdamWGroups(g, nn.AdamWDefaults(1e-3)) }
	groups := nn.DecayGroups(nn.Parameters(m), 0.01)
	var opt nn.Optimizer = newAdamW(groups)
	if offload {
		o, err := train.NewOffload(groups, newAdamW, train.OffloadOptions{Master: master})
		require.NoError(t, err)
		opt.Free()
		opt = o
	}
	defer opt.Free()
	tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: 8, Accum: 2, Device: torch.CPU, ClipNorm: 1})
	require.NoError(t, err)
	opts := data.Options{BatchSize: 16, Shuffle: true, Seed: 2}
	if resume != "" {
		c, err := tr.LoadCheckpoint(resume)
		require.NoError(t, err)
		opts.Resume = &c.Loader
		steps -= c.Step
	}
	loader, err := data.NewLoader(data.Dataset[data.Sample](ds), data.Collate, opts)
	require.NoError(t, err)
	defer loader.Close()
	for i := 0; i < steps; i++ {
		b, err := loader.Next(context.Background())
		require.NoError(t, err)
		_, err = tr.Step(b)
		b.Free()
		require.NoError(t, err)
	}
	if save != "" {
		require.NoError(t, tr.SaveCheckpoint(save, loader.State(), 0, nil))
	}
	var out []float32
	for _, p := range nn.Parameters(m) {
		out = append(out, p.T.Float32s()...)
	}
	return out
}

// With the optimizer state offloaded to the CPU the parameters follow
// exactly the plain optimizer's (on a CPU-only build the device is the
// host: the copies still run), with or without master weights, and the
// checkpoint holds the same state under the same names.
func TestOffloadEqualsPlainOptimizer(t *testing.T) {
	dir := t.TempDir()
	plain := offloadRun(t, false, false, 6, filepath.Join(dir, "plain.pt"), "")
	off := offloadRun(t, true, false, 6, filepath.Join(dir, "off.pt"), "")
	master := offloadRun(t, true, true, 6, "", "")
	require.Equal(t, plain, off, "offloaded AdamW = AdamW, bitwise")
	require.Equal(t, plain, master, "with fp32 master weights too")
	a, err := ptfile.Load(filepath.Join(dir, "plain.pt"))
	require.NoError(t, err)
	defer ptfile.FreeAll(a)
	b, err := ptfile.Load(filepath.Join(dir, "off.pt"))
	require.NoError(t, err)
	defer ptfile.FreeAll(b)
	ka, _ := a.(*ptfile.Dict).Get("optimizer")
	kb, _ := b.(*ptfile.Dict).Get("optimizer")
	var na, nb []string
	for _, e := range ka.(*ptfile.Dict).Entries {
		na = append(na, e.Key.(string))
	}
	for _, e := range kb.(*ptfile.Dict).Entries {
		nb = append(nb, e.Key.(string))
	}
	require.Equal(t, na, nb, "the same optimizer state keys")
}

// Hooks run between backward and the optimizer step: after unscaling,
// before clipping, before the parameters change.
func TestHooksRunBetweenUnscaleAndClip(t *testing.T) {
	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.1})
	defer opt.Free()
	ds := regressionData(16)
	defer ds.Free()
	b, err := data.Collate(samples(t, ds, 16))
	require.NoError(t, err)
	defer b.Free()

	// The unscaled, unclipped gradient of this batch, for reference.
	torch.Tidy(func() { m.loss(b).Backward() })
	var want []float32
	for _, p := range nn.Parameters(m) {
		g := p.T.Grad()
		want = append(want, g.Float32s()...)
		g.Free()
		p.T.SetGrad(nil)
	}
	before := nn.Parameters(m)[0].T.Float32s()

	scaler := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{InitScale: 256})
	var seen []float32
	var paramsAtHook []float32
	o := &train.Optim{Opt: opt, ClipNorm: 1e-3, Scaler: scaler, Hooks: []train.Hook{func(o *train.Optim) error {
		for _, p := range o.Opt.Parameters() {
			g := p.Grad()
			seen = append(seen, g.Float32s()...)
			g.Free()
		}
		paramsAtHook = nn.Parameters(m)[0].T.Float32s()
		return nil
	}}}
	eng, err := train.NewEngine(train.EngineConfig{MicroBatch: 16, Device: torch.CPU})
	require.NoError(t, err)
	_, err = eng.Backward(b, train.Pass{Loss: m.loss, Scaler: scaler})
	require.NoError(t, err)
	var r train.OptimStep
	require.NoError(t, torch.TidyErr(func() (err error) { r, err = o.Step(); return err }))
	scaler.Update()
	o.Finish()
	require.InDeltaSlice(t, want, seen, 1e-5, "the hook sees the unscaled gradients, not yet clipped")
	require.Greater(t, r.GradNorm, 1e-3, "so clipping came after it")
	require.Equal(t, before, paramsAtHook, "before the step")
	require.NotEqual(t, before, nn.Parameters(m)[0].T.Float32s(), "the step ran")
	for _, p := range nn.Parameters(m) {
		require.Nil(t, p.T.Grad(), "Finish set the gradients to none")
	}
}

// A run whose optimizer state is offloaded resumes bit-exactly: the
// offload's host copies of the parameters are the checkpoint's weights,
// not the fresh model's (the model is restored before the optimizer).
func TestOffloadResumesBitExactly(t *testing.T) {
	for _, master := range []bool{false, true} {
		dir := t.TempDir()
		straight := offloadRun(t, true, master, 6, "", "")
		half := filepath.Join(dir, "half.pt")
		offloadRun(t, true, master, 3, half, "")
		resumed := offloadRun(t, true, master, 6, "", half)
		require.Equal(t, straight, resumed, "3 steps, a checkpoint, 3 resumed steps = 6 steps (master %v)", master)
	}
}

// Resuming holds one part of the checkpoint at a time: the optimizer's
// state read from the file and the state it is copied into (AdamW's two
// moments each: 4 × the weights), not the whole file as well.
func TestResumeHoldsOnePartAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ck.pt")
	offloadRun(t, false, false, 2, path, "")

	m := newRegression(1)
	defer nn.Free(m)
	opt := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.01), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	tr, err := train.New(m, opt, m.loss, train.Config{MicroBatch: 8, Accum: 2, Device: torch.CPU, ClipNorm: 1})
	require.NoError(t, err)
	var weights int64
	for _, p := range nn.Parameters(m) {
		weights += p.T.Numel() * 4
	}
	torch.CollectGarbage()
	base := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	_, err = tr.LoadCheckpoint(path)
	require.NoError(t, err)
	s := torch.MustMemoryStats(torch.CPU)
	t.Logf("weights %d, held after %d, peak above base %d (%.2f× the weights)", weights, s.Allocated-base, s.PeakAllocated-base, float64(s.PeakAllocated-base)/float64(weights))
	require.GreaterOrEqual(t, s.Allocated-base, 2*weights, "AdamW's moments are held")
	// Small tensors besides (steps, the RNG's state, hyperparameters)
	// are a few KiB; the whole file held as well would add the weights.
	require.LessOrEqual(t, s.PeakAllocated-base, 4*weights+16<<10)
}
