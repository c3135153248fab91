package nn

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

// optimTrainModule is a two-layer perceptron built from raw parameters (the
// layers live elsewhere in the package; this test needs only Base).
type optimTrainModule struct {
	Base
	w1, b1, w2, b2 *torch.Tensor
}

func (m *optimTrainModule) forward(x *torch.Tensor) *torch.Tensor {
	return torch.Linear(torch.Linear(x, m.w1, m.b1).Tanh(), m.w2, m.b2)
}

func optimTrainData(n, from int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.Sin(float64(from+i)*1.3) * scale)
	}
	return out
}

// TestOptimTrainLoopMatchesPyTorch trains a small MLP with autograd,
// AdamW on decay/no-decay groups, gradient clipping and a warmup-cosine
// schedule, in Go and in PyTorch, and compares the losses and the final
// parameters.
func TestOptimTrainLoopMatchesPyTorch(t *testing.T) {
	const steps = 20
	m := &optimTrainModule{}
	m.w1 = m.RegisterParam("w1", torch.FromSlice(optimTrainData(6*4, 0, 0.5), []int64{6, 4}))
	m.b1 = m.RegisterParam("b1", torch.FromSlice(optimTrainData(6, 100, 0.1), []int64{6}))
	m.w2 = m.RegisterParam("w2", torch.FromSlice(optimTrainData(2*6, 200, 0.5), []int64{2, 6}))
	m.b2 = m.RegisterParam("b2", torch.FromSlice(optimTrainData(2, 300, 0.1), []int64{2}))
	params := Parameters(m)
	defer optimFree(params)
	x := torch.FromSlice(optimTrainData(8*4, 400, 1), []int64{8, 4}).Keep()
	y := torch.FromSlice(optimTrainData(8*2, 500, 1), []int64{8, 2}).Keep()
	defer x.Free()
	defer y.Free()

	opt := NewAdamWGroups(DecayGroups(params, 0.1), AdamConfig{LR: 0.05, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8})
	defer opt.Free()
	sched := NewSchedule(opt, WarmupCosineLR(3, steps, 0.1))
	var losses, norms []float64
	live := int64(-1)
	for s := 0; s < steps; s++ {
		torch.Tidy(func() {
			loss := torch.MSELoss(m.forward(x), y, torch.ReduceMean)
			loss.Backward()
			losses = append(losses, loss.Item())
		})
		n, err := ClipGradNorm(Tensors(params), 0.5, 2)
		require.NoError(t, err)
		norms = append(norms, n)
		opt.Step()
		opt.ZeroGrad()
		sched.Step()
		if s == 2 {
			torch.CollectGarbage()
			live = torch.LiveTensors()
		}
		if s > 2 {
			require.Equal(t, live, torch.LiveTensors(), "step %d", s)
		}
	}

	var want struct {
		Losses []float64   `json:"losses"`
		Norms  []float64   `json:"norms"`
		Params [][]float64 `json:"params"`
	}
	pyref.Run(t, `
		w1 = T(inp["w1"]).reshape(6, 4).requires_grad_()
		b1 = T(inp["b1"]).requires_grad_()
		w2 = T(inp["w2"]).reshape(2, 6).requires_grad_()
		b2 = T(inp["b2"]).requires_grad_()
		x = T(inp["x"]).reshape(8, 4)
		y = T(inp["y"]).reshape(8, 2)
		opt = torch.optim.AdamW([
		    {"params": [w1, w2], "weight_decay": 0.1},
		    {"params": [b1, b2], "weight_decay": 0.0},
		], lr=0.05, betas=(0.9, 0.99), eps=1e-8, foreach=False)
		W, N, R = 3, inp["steps"], 0.1
		def lam(s):
		    if s < W:
		        return s / W
		    return R + (1 - R) * 0.5 * (1 + math.cos(math.pi * min(1.0, (s - W) / (N - W))))
		sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
		losses, norms = [], []
		for s in range(inp["steps"]):
		    loss = torch.nn.functional.mse_loss(torch.tanh(x @ w1.T + b1) @ w2.T + b2, y)
		    loss.backward()
		    losses.append(loss.item())
		    norms.append(torch.nn.utils.clip_grad_norm_([w1, b1, w2, b2], 0.5, 2).item())
		    opt.step()
		    opt.zero_grad(set_to_none=True)
		    sched.step()
		emit({"losses": losses, "norms": norms, "params": [t2l(p.reshape(-1)) for p in [w1, b1, w2, b2]]})
	`, map[string]any{
		"w1": optimTrainData(6*4, 0, 0.5), "b1": optimTrainData(6, 100, 0.1),
		"w2": optimTrainData(2*6, 200, 0.5), "b2": optimTrainData(2, 300, 0.1),
		"x": optimTrainData(8*4, 400, 1), "y": optimTrainData(8*2, 500, 1), "steps": steps,
	}, &want)

	for s := range losses {
		require.InDelta(t, want.Losses[s], losses[s], 1e-5*math.Abs(want.Losses[s]), "loss at step %d", s)
		require.InDelta(t, want.Norms[s], norms[s], 1e-5*math.Abs(want.Norms[s]), "norm at step %d", s)
	}
	require.Less(t, losses[steps-1], losses[0], "training reduces the loss")
	clipped := 0
	for _, n := range norms {
		if n > 0.5 {
			clipped++
		}
	}
	require.Positive(t, clipped, "clipping is exercised")
	t.Logf("loss %.4f -> %.4f; %d of %d steps clipped", losses[0], losses[steps-1], clipped, steps)
	for k, p := range params {
		got := p.T.Float32s()
		for i := range got {
			require.InDelta(t, want.Params[k][i], float64(got[i]), 1e-5, "%s[%d]", p.Name, i)
		}
	}
}
