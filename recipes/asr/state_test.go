package asr

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// The optimizer state the log reports is what the optimizer holds after
// its first update, also when a resumed checkpoint loaded it before (the
// allocator's growth over that update said 0 B).
func TestCountedOptimizerCountsLoadedState(t *testing.T) {
	torch.ManualSeed(0)
	m := nn.NewSequential(nn.NewLinear(64, 32, true), nn.NewReLU(), nn.NewLinear(32, 1, true))
	defer nn.Free(m)
	step := func(o nn.Optimizer) {
		torch.Tidy(func() {
			loss := torch.MSELoss(m.Forward(torch.Randn([]int64{8, 64})), torch.Randn([]int64{8, 1}), torch.ReduceMean)
			loss.Backward()
			o.Step()
			o.ZeroGrad()
		})
	}
	fresh := &countedOptimizer{Optimizer: nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))}
	defer fresh.Free()
	step(fresh)
	moments := 2 * 4 * nn.NumParams(m) // exp_avg and exp_avg_sq, float32
	require.GreaterOrEqual(t, fresh.grew, moments)

	saved := map[string]*torch.Tensor{}
	for _, st := range fresh.State() {
		saved[st.Name] = st.T
	}
	resumed := &countedOptimizer{Optimizer: nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))}
	defer resumed.Free()
	require.NoError(t, resumed.LoadState(saved))
	step(resumed)
	require.Equal(t, fresh.grew, resumed.grew)
}
