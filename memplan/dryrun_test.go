package memplan_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

type dryRunFixture struct {
	m      *resMLP
	opt    nn.Optimizer
	params map[string][]float32
	state  []string
	base   int64
	live   int64
}

func newDryRunFixture(t *testing.T) *dryRunFixture {
	f := &dryRunFixture{m: newResMLP(2)}
	f.opt = nn.NewAdamW(nn.Parameters(f.m), nn.AdamWDefaults(1e-3))
	t.Cleanup(func() { f.opt.Free(); nn.Free(f.m) })
	for _, n := range f.opt.State() { // creates the hyperparameter tensors, once
		f.state = append(f.state, n.Name)
	}
	f.params = map[string][]float32{}
	for _, p := range nn.StateDict(f.m) {
		f.params[p.Name] = p.T.Float32s()
	}
	torch.CollectGarbage()
	f.live = torch.LiveTensors()
	f.base = torch.MustMemoryStats(torch.CPU).Allocated
	return f
}

func (f *dryRunFixture) run(accum, n int, warmup int) (memplan.Measurement, error) {
	return memplan.DryRun{Device: torch.CPU, Model: f.m, Optimizers: []nn.Optimizer{f.opt}, Warmup: warmup, Repeat: 2}.Run(accum,
		func() error { return f.m.micro(n, n*accum, amp.FP32) },
		func() error { f.opt.Step(); f.opt.ZeroGrad(); return nil })
}

// requireRestored: the model, optimizer and memory are as before.
func (f *dryRunFixture) requireRestored(t *testing.T) {
	t.Helper()
	for _, p := range nn.StateDict(f.m) {
		require.Equal(t, f.params[p.Name], p.T.Float32s(), "%s restored", p.Name)
	}
	for _, p := range nn.Parameters(f.m) {
		require.Nil(t, p.T.Grad(), "%s: no gradient left", p.Name)
	}
	var state []string
	for _, n := range f.opt.State() {
		state = append(state, n.Name)
	}
	require.Equal(t, f.state, state, "the optimizer's state is back to none")
	torch.CollectGarbage()
	require.Equal(t, f.live, torch.LiveTensors(), "no tensor left behind")
	require.Equal(t, f.base, torch.MustMemoryStats(torch.CPU).Allocated, "no memory left behind")
}

// TestDryRunMeasuresTheStep: the dry run's Held and Need are what the same
// step, run by hand, holds and peaks at, to the byte; it leaves the model,
// optimizer, generator and memory as they were.
func TestDryRunMeasuresTheStep(t *testing.T) {
	f := newDryRunFixture(t)
	rng := torch.RNGState().Keep()
	defer rng.Free()
	torch.CollectGarbage()
	f.live, f.base = torch.LiveTensors(), torch.MustMemoryStats(torch.CPU).Allocated

	meas, err := f.run(4, 8, 0)
	require.NoError(t, err)
	f.requireRestored(t)
	t.Logf("held %s, peak %s, micro-batch %v, update %v", torch.FormatBytes(meas.Held), torch.FormatBytes(meas.Peak), meas.Micro, meas.Update)
	require.Positive(t, meas.Micro)
	require.Positive(t, meas.Update)

	// The warm-up added AdamW's moments, two per parameter (its step count
	// becomes a 4-byte tensor only when State is called, for a checkpoint).
	var adam int64
	for _, p := range nn.Parameters(f.m) {
		adam += 2 * p.T.NBytes()
	}
	require.Equal(t, f.base+adam, meas.Held, "held: the weights and what was there, plus AdamW's moments")

	// The generator was rewound: the next draw is the one it would have been.
	draw := func() (x []float32) {
		torch.Tidy(func() { x = torch.Randn([]int64{4}).Float32s() })
		return x
	}
	x := draw()
	torch.SetRNGState(rng)
	require.Equal(t, draw(), x)
	torch.SetRNGState(rng)

	// By hand: a warm-up window, then one of two micro-batches and the update.
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	var held int64
	require.NoError(t, train(f.m, f.opt, memplan.Candidate{MicroBatch: 8, Precision: amp.FP32}, 16, 1))
	held = torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, train(f.m, f.opt, memplan.Candidate{MicroBatch: 8, Precision: amp.FP32}, 16, 1))
	peak := torch.MustMemoryStats(torch.CPU).PeakAllocated
	require.Equal(t, held, meas.Held)
	require.Equal(t, peak, meas.Need(), "the dry run's need is the step's peak")
}

func TestDryRunWarmup(t *testing.T) {
	f := newDryRunFixture(t)
	warm, err := f.run(1, 8, 0)
	require.NoError(t, err)
	cold, err := f.run(1, 8, memplan.NoWarmup)
	require.NoError(t, err)
	f.requireRestored(t)
	require.Equal(t, f.base, cold.Held, "without a warm-up the optimizer has no state yet")
	require.Greater(t, warm.Held, cold.Held)
	require.Equal(t, warm.Need(), cold.Need(), "the first step's peak (its state created) is the steady one here")
}

// TestDryRunOutOfMemory: under a cap the step does not fit in, the error is
// ErrOutOfMemory and everything is restored.
func TestDryRunOutOfMemory(t *testing.T) {
	f := newDryRunFixture(t)
	meas, err := f.run(2, 16, 0)
	require.NoError(t, err)
	snap, err := memplan.NewSnapshot(f.m, []nn.Optimizer{f.opt}, nil)
	require.NoError(t, err)
	snapBytes := snap.Bytes
	snap.Free()
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, meas.Need()+snapBytes-meas.Peak/2))
	_, err = f.run(2, 16, 0)
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0))
	require.ErrorIs(t, err, torch.ErrOutOfMemory)
	f.requireRestored(t)
	_, err = f.run(2, 8, 0)
	require.NoError(t, err, "a smaller micro-batch still runs afterwards")
	f.requireRestored(t)
}

func TestDryRunErrors(t *testing.T) {
	f := newDryRunFixture(t)
	boom := errors.New("loader failed")
	calls := 0
	_, err := memplan.DryRun{Model: f.m, Optimizers: []nn.Optimizer{f.opt}}.Run(2, func() error {
		calls++
		if calls == 3 {
			return boom
		}
		return f.m.micro(4, 8, amp.FP32)
	}, func() error { f.opt.Step(); f.opt.ZeroGrad(); return nil })
	require.ErrorIs(t, err, boom)
	f.requireRestored(t)

	var kept *torch.Tensor
	_, err = memplan.DryRun{Model: f.m, Optimizers: []nn.Optimizer{f.opt}}.Run(1, func() error {
		if kept == nil {
			kept = torch.Zeros([]int64{1000}).Keep()
		}
		return f.m.micro(4, 4, amp.FP32)
	}, func() error { f.opt.Step(); f.opt.ZeroGrad(); return nil })
	require.ErrorIs(t, err, memplan.ErrLeak)
	kept.Free()
	f.requireRestored(t)

	// A leak is a leak when the candidate also ran out of memory: reported
	// as such, not as a candidate that does not fit (the next would be
	// measured over what it left).
	kept = nil
	_, err = memplan.DryRun{Model: f.m, Optimizers: []nn.Optimizer{f.opt}}.Run(1, func() error {
		kept = torch.Zeros([]int64{1000}).Keep()
		st := torch.MustMemoryStats(torch.CPU)
		require.NoError(t, torch.SetMemoryLimit(torch.CPU, st.Allocated+1<<20))
		defer torch.SetMemoryLimit(torch.CPU, 0)
		torch.Zeros([]int64{1 << 20}) // 4 MiB: over the limit
		return nil
	}, func() error { return nil })
	require.ErrorIs(t, err, memplan.ErrLeak)
	require.NotErrorIs(t, err, torch.ErrOutOfMemory)
	kept.Free()
	f.requireRestored(t)

	var oe *memplan.OptionError
	_, err = memplan.DryRun{}.Run(0, func() error { return nil }, func() error { return nil })
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "accum", oe.Field)
	_, err = memplan.DryRun{}.Run(1, nil, func() error { return nil })
	require.ErrorAs(t, err, &oe)
}

// TestDryRunClearsAutocastCache: with bf16 autocast and checkpointing, the
// recomputation in backward leaves low-precision casts in autocast's cache
// (libtorch clears it when the outermost region ends, and backward runs
// outside it). The dry run clears it after each window, as the training
// loop does after each step, so Held does not grow with the micro-batch
// and nothing is left behind.
func TestDryRunClearsAutocastCache(t *testing.T) {
	f := newDryRunFixture(t)
	f.m.Checkpointing = true
	defer func() { f.m.Checkpointing = false }()
	held := map[int]int64{}
	for _, n := range []int{4, 16} {
		meas, err := memplan.DryRun{Model: f.m, Optimizers: []nn.Optimizer{f.opt}}.Run(2,
			func() error { return f.m.micro(n, 2*n, amp.BF16) },
			func() error { f.opt.Step(); f.opt.ZeroGrad(); return nil })
		require.NoError(t, err)
		held[n] = meas.Held
		f.requireRestored(t)
	}
	require.Equal(t, held[4], held[16])
}
