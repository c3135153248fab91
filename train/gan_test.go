package train_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// A tiny conditional GAN trained with the core's parts — an Engine and an
// Optim per network, one GradScaler shared — equals the same loop written
// in Python PyTorch (its real GradScaler state machine, the two CUDA-only
// kernels replaced by CPU equivalents as in package amp's test, and scale's
// CUDA assertion dropped), same
// initial weights and data, float64, 1 thread:
//
//	D: accumulate 2 micro-batches of 0.5·(BCE(D(x,c),1) + BCE(D(G(z,c).detach(),c),0)), unscale, clip 1.0, step
//	G: accumulate 2 micro-batches of BCE(D(G(z,c),c),1), unscale, clip 0.5, step
//	scaler.update() once; both optimizers' gradients set to none
//
// At iteration 2 the discriminator's loss is multiplied by 1e308: its
// scaled gradients overflow, its step is skipped while the generator's is
// not, and the scale backs off — per-optimizer state in one scaler.
func TestGANMatchesPython(t *testing.T) {
	prev := torch.NumThreads()
	torch.SetNumThreads(1)
	defer torch.SetNumThreads(prev)
	const iters, n = 5, 8
	torch.ManualSeed(3)
	gen := nn.NewSequential(nn.NewLinear(6, 16, true), nn.NewTanh(), nn.NewLinear(16, 3, true))
	disc := nn.NewSequential(nn.NewLinear(5, 16, true), nn.NewTanh(), nn.NewLinear(16, 1, true))
	nn.To(gen, torch.CPU, torch.Float64)
	nn.To(disc, torch.CPU, torch.Float64)
	defer nn.Free(gen)
	defer nn.Free(disc)
	weights := func(m nn.Module) map[string][]float64 {
		out := map[string][]float64{}
		for _, p := range nn.Parameters(m) {
			out[p.Name] = p.T.Float64s()
		}
		return out
	}
	g0, d0 := weights(gen), weights(disc)
	real := torch.Randn([]int64{n, 3}).ToDType(torch.Float64).Keep()
	cond := torch.Rand([]int64{n, 2}).ToDType(torch.Float64).Keep()
	var zs []*torch.Tensor
	for i := 0; i < iters; i++ {
		zs = append(zs, torch.Randn([]int64{n, 4}).ToDType(torch.Float64).Keep())
	}

	scaler := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{InitScale: 1024, GrowthInterval: 2})
	dOpt := nn.NewAdam(nn.Parameters(disc), nn.AdamConfig{LR: 1e-2, Beta1: 0.5, Beta2: 0.999, Eps: 1e-8})
	gOpt := nn.NewAdam(nn.Parameters(gen), nn.AdamConfig{LR: 1e-2, Beta1: 0.5, Beta2: 0.999, Eps: 1e-8})
	defer dOpt.Free()
	defer gOpt.Free()
	dStep := &train.Optim{Opt: dOpt, ClipNorm: 1.0, Scaler: scaler}
	gStep := &train.Optim{Opt: gOpt, ClipNorm: 0.5, Scaler: scaler}
	dEng, err := train.NewEngine(train.EngineConfig{MicroBatch: n / 2, Device: torch.CPU})
	require.NoError(t, err)
	gEng, err := train.NewEngine(train.EngineConfig{MicroBatch: n / 2, Device: torch.CPU})
	require.NoError(t, err)
	bce := func(logits *torch.Tensor, target float64) *torch.Tensor {
		return torch.BCEWithLogits(logits, torch.FullLike(logits, target), nil, nil, torch.ReduceMean)
	}
	var scales []float64
	var dSkipped, gSkipped []bool
	for it := 0; it < iters; it++ {
		b := &data.Batch{Fields: map[string]*torch.Tensor{"x": real, "c": cond, "z": zs[it]}}
		blowUp := 1.0
		if it == 2 {
			blowUp = 1e308
		}
		_, err := dEng.Backward(b, train.Pass{Scaler: scaler, Reset: dStep.Abandon, Loss: func(mb *data.Batch) *torch.Tensor {
			x, c, z := mb.Fields["x"], mb.Fields["c"], mb.Fields["z"]
			fake := gen.Forward(torch.Cat([]*torch.Tensor{z, c}, 1)).Detach()
			lr := bce(disc.Forward(torch.Cat([]*torch.Tensor{x, c}, 1)), 1)
			lf := bce(disc.Forward(torch.Cat([]*torch.Tensor{fake, c}, 1)), 0)
			return lr.Add(lf).MulScalar(0.5 * blowUp)
		}})
		require.NoError(t, err)
		var dr, gr train.OptimStep
		require.NoError(t, torch.TidyErr(func() (err error) { dr, err = dStep.Step(); return err }))
		_, err = gEng.Backward(b, train.Pass{Scaler: scaler, Reset: gStep.Abandon, Loss: func(mb *data.Batch) *torch.Tensor {
			c, z := mb.Fields["c"], mb.Fields["z"]
			fake := gen.Forward(torch.Cat([]*torch.Tensor{z, c}, 1))
			return bce(disc.Forward(torch.Cat([]*torch.Tensor{fake, c}, 1)), 1)
		}})
		require.NoError(t, err)
		require.NoError(t, torch.TidyErr(func() (err error) { gr, err = gStep.Step(); return err }))
		scaler.Update()
		dStep.Finish()
		gStep.Finish()
		scales = append(scales, scaler.ScaleValue())
		dSkipped, gSkipped = append(dSkipped, dr.Skipped), append(gSkipped, gr.Skipped)
	}

	var want struct {
		Gen, Disc          map[string][]float64
		Scales             []float64
		DSkipped, GSkipped []bool
	}
	pyref.Run(t, pyref.WithCPUGradScaler(`
		nn = torch.nn
		F = nn.functional
		def load(m, w):
		    m.load_state_dict({k: torch.tensor(v, dtype=torch.float64).reshape(m.state_dict()[k].shape) for k, v in w.items()})
		gen = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).double()
		disc = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1)).double()
		load(gen, inp["g0"]); load(disc, inp["d0"])
		real = torch.tensor(inp["real"], dtype=torch.float64)
		cond = torch.tensor(inp["cond"], dtype=torch.float64)
		zs = [torch.tensor(z, dtype=torch.float64) for z in inp["zs"]]
		s = GradScaler(init_scale=1024, growth_interval=2)
		s._lazy_init_scale_growth_tracker(torch.device("cpu"))
		optD = torch.optim.Adam(disc.parameters(), lr=1e-2, betas=(0.5, 0.999), eps=1e-8)
		optG = torch.optim.Adam(gen.parameters(), lr=1e-2, betas=(0.5, 0.999), eps=1e-8)
		def stepped(opt):
		    calls = [0]
		    plain = opt.step
		    def counted(*a, **k):
		        calls[0] += 1
		        return plain(*a, **k)
		    opt.step = counted
		    return calls
		dCalls, gCalls = stepped(optD), stepped(optG)
		bce = lambda logits, t: F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, t))
		scales, dSkipped, gSkipped = [], [], []
		h = real.shape[0] // 2
		for it, z in enumerate(zs):
		    blow = 1e308 if it == 2 else 1.0
		    for k in range(2):
		        x, c, zz = real[k*h:(k+1)*h], cond[k*h:(k+1)*h], z[k*h:(k+1)*h]
		        fake = gen(torch.cat([zz, c], 1)).detach()
		        l = (bce(disc(torch.cat([x, c], 1)), 1) + bce(disc(torch.cat([fake, c], 1)), 0)) * (0.5 * blow)
		        s.scale(l * 0.5).backward()
		    s.unscale_(optD)
		    torch.nn.utils.clip_grad_norm_(disc.parameters(), 1.0)
		    before = dCalls[0]; s.step(optD); dSkipped.append(dCalls[0] == before)
		    for k in range(2):
		        c, zz = cond[k*h:(k+1)*h], z[k*h:(k+1)*h]
		        l = bce(disc(torch.cat([gen(torch.cat([zz, c], 1)), c], 1)), 1)
		        s.scale(l * 0.5).backward()
		    s.unscale_(optG)
		    torch.nn.utils.clip_grad_norm_(gen.parameters(), 0.5)
		    before = gCalls[0]; s.step(optG); gSkipped.append(gCalls[0] == before)
		    s.update()
		    optD.zero_grad(set_to_none=True); optG.zero_grad(set_to_none=True)
		    scales.append(s.get_scale())
		emit({"Gen": {k: v.flatten().tolist() for k, v in gen.state_dict().items()},
		      "Disc": {k: v.flatten().tolist() for k, v in disc.state_dict().items()},
		      "Scales": scales, "DSkipped": dSkipped, "GSkipped": gSkipped})
	`), map[string]any{"g0": g0, "d0": d0, "real": nested(real), "cond": nested(cond), "zs": nestedAll(zs)}, &want)

	require.Equal(t, want.Scales, scales, "scale trajectory")
	require.Equal(t, want.DSkipped, dSkipped, "discriminator steps skipped")
	require.Equal(t, want.GSkipped, gSkipped, "generator steps skipped")
	require.Equal(t, []bool{false, false, true, false, false}, dSkipped)
	require.Equal(t, []bool{false, false, false, false, false}, gSkipped)
	var worst float64
	for name, m := range map[string]map[string][]float64{"generator": weights(gen), "discriminator": weights(disc)} {
		ref := want.Gen
		if name == "discriminator" {
			ref = want.Disc
		}
		for k, v := range m {
			require.Len(t, ref[k], len(v), k)
			for i := range v {
				worst = math.Max(worst, math.Abs(v[i]-ref[k][i]))
			}
		}
	}
	t.Logf("%d iterations, scales %v: max |Go − Python| over both networks' parameters %.1e", iters, scales, worst)
	require.LessOrEqual(t, worst, 1e-6)
	real.Free()
	cond.Free()
	for _, z := range zs {
		z.Free()
	}
}

func nested(t *torch.Tensor) [][]float64 {
	s := t.Shape()
	v := t.Float64s()
	out := make([][]float64, s[0])
	for i := range out {
		out[i] = v[int64(i)*s[1] : int64(i+1)*s[1]]
	}
	return out
}

func nestedAll(ts []*torch.Tensor) [][][]float64 {
	out := make([][][]float64, len(ts))
	for i, t := range ts {
		out[i] = nested(t)
	}
	return out
}
