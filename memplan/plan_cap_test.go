package memplan_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// TestPlanTrainsUnderTheCap: the plan chosen for a budget B trains under a
// CPU cap of B without running out of memory; a configuration it rejected
// runs out of memory under the same cap.
func TestPlanTrainsUnderTheCap(t *testing.T) {
	const effective = 64
	m := newResMLP(6)
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	opt.State() // the optimizer's hyperparameter tensors, created once
	measure := measurer(m, opt, effective)

	// The budget: what the model holds plus 45 % of the activations of a
	// whole effective batch, after a 10 % margin.
	full, err := measure(memplan.Candidate{MicroBatch: effective, Accum: 1, Precision: amp.FP32})
	require.NoError(t, err)
	budget := int64(float64(full.Held+full.Peak*45/100) / 0.9)
	t.Logf("a whole batch of %d needs %s (held %s); budget %s", effective, torch.FormatBytes(full.Need()),
		torch.FormatBytes(full.Held), torch.FormatBytes(budget))

	before := torch.MustMemoryStats(torch.CPU).Allocated
	want := map[string][]float32{}
	for _, p := range nn.StateDict(m) {
		want[p.Name] = p.T.Float32s()
	}
	res, err := memplan.Plan(memplan.PlanOptions{
		Budget: budget, EffectiveBatch: effective, Checkpointing: []bool{false, true},
		Precisions: memplan.Precisions(torch.CPU, amp.HostCPU()),
	}, measure)
	require.NoError(t, err)
	t.Log("\n" + res.String())
	require.Equal(t, before, torch.MustMemoryStats(torch.CPU).Allocated, "planning leaves no memory behind")
	for _, p := range nn.StateDict(m) {
		require.Equal(t, want[p.Name], p.T.Float32s(), "planning leaves the parameters as they were")
	}
	plan := res.Plan
	require.True(t, plan.Fits)
	require.LessOrEqual(t, plan.Need(), res.Usable)
	require.Equal(t, (effective+plan.MicroBatch-1)/plan.MicroBatch, plan.Accum)

	// A rejected configuration that needs more than the cap itself (not
	// only more than the budget less its margin).
	var rejected *memplan.Row
	for k, r := range res.Rows {
		if !r.Fits && r.Err == nil && float64(r.Need()) > 1.02*float64(budget) && (rejected == nil || r.Need() < rejected.Need()) {
			rejected = &res.Rows[k]
		}
	}
	require.NotNil(t, rejected, "the search measured a candidate over the cap")

	require.NoError(t, torch.SetMemoryLimit(torch.CPU, budget))
	defer torch.SetMemoryLimit(torch.CPU, 0)
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	require.NoError(t, train(m, opt, plan.Candidate, effective, 3), "the plan trains under the cap")
	peak := torch.MustMemoryStats(torch.CPU).PeakAllocated
	t.Logf("chosen %v: 3 steps under a %s cap, peak %s (planned %s)", plan.Candidate, torch.FormatBytes(budget),
		torch.FormatBytes(peak), torch.FormatBytes(plan.Need()))
	require.LessOrEqual(t, peak, plan.Need(), "training stays within what the dry run measured")
	require.InEpsilon(t, float64(plan.Need()), float64(peak), 0.05, "the dry run measured what training takes")

	err = train(m, opt, rejected.Candidate, effective, 1)
	t.Logf("rejected %v (needs %s): %v", rejected.Candidate, torch.FormatBytes(rejected.Need()), err)
	require.ErrorIs(t, err, torch.ErrOutOfMemory, "a configuration the plan rejected runs out of memory under the cap")
}
