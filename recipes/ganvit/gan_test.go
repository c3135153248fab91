package ganvit

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// The recipe's GAN step — its generator and discriminator, an Engine and
// an Optim per network with different micro-batches (the discriminator
// accumulates 2 micro-batches of 4, the generator 4 of 2), one GradScaler
// shared — equals the same loop written in Python PyTorch (float64, 1
// thread, the same initial weights, data and noise; the GradScaler's two
// CUDA-only kernels replaced by CPU equivalents as in package train's
// GAN test).
func TestGANStepMatchesPython(t *testing.T) {
	prev := torch.NumThreads()
	torch.SetNumThreads(1)
	defer torch.SetNumThreads(prev)
	const iters, n = 4, 8
	cfg := GANConfig{Mels: 16, Frames: 20, Latent: 4, Classes: 3, Embed: 2, GenChannels: 64, DiscChannels: 8, Ups: 2}
	require.NoError(t, cfg.Validate())
	torch.ManualSeed(5)
	g, d := NewGenerator(cfg), NewDiscriminator(cfg)
	defer nn.Free(g)
	defer nn.Free(d)
	nn.To(g, torch.CPU, torch.Float64)
	nn.To(d, torch.CPU, torch.Float64)
	weights := func(m nn.Module) map[string][]float64 {
		out := map[string][]float64{}
		for _, p := range nn.StateDict(m) {
			out[p.Name] = p.T.Float64s()
		}
		return out
	}
	g0, d0 := weights(g), weights(d)
	real := torch.Rand([]int64{n, 1, 16, 20}).MulScalar(2).SubScalar(1).ToDType(torch.Float64).Keep()
	cond := torch.Randn([]int64{n, 2}).ToDType(torch.Float64).Keep()
	label := torch.FromSlice([]int64{0, 1, 2, 0, 1, 2, 2, 1}, []int64{n}).Keep()
	defer real.Free()
	defer cond.Free()
	defer label.Free()

	scaler := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{InitScale: 1024, GrowthInterval: 2})
	gan, err := NewGAN(g, d, GANOptions{Device: torch.CPU, Scaler: scaler, MicroD: 4, MicroG: 2, LR: 1e-2, ClipD: 1, ClipG: 0.5})
	require.NoError(t, err)
	defer gan.Free()
	// NewGAN moved the networks to float32 on the device: back to float64.
	nn.To(g, torch.CPU, torch.Float64)
	nn.To(d, torch.CPU, torch.Float64)
	var dLoss, gLoss, scales []float64
	for it := 0; it < iters; it++ {
		torch.ManualSeed(uint64(100 + it)) // z
		r, err := gan.Step(&data.Batch{Fields: map[string]*torch.Tensor{"spec": real, "cond": cond, "label": label}})
		require.NoError(t, err)
		require.Equal(t, 4, r.DMicro)
		require.Equal(t, 2, r.GMicro)
		dLoss, gLoss, scales = append(dLoss, r.DLoss), append(gLoss, r.GLoss), append(scales, scaler.ScaleValue())
	}
	for _, p := range nn.Parameters(d) {
		require.True(t, p.T.RequiresGrad(), "%s trainable again after the generator's pass", p.Name)
		require.Nil(t, p.T.Grad(), "%s: gradients set to none", p.Name)
	}

	var want struct {
		Gen, Disc     map[string][]float64
		DLoss, GLoss  []float64
		Scales        []float64
		NoDiscGradInG bool
	}
	pyref.Run(t, pyref.WithCPUGradScaler(`
		torch.set_num_threads(1)
		nn = torch.nn
		F = nn.functional
		M, T, L, C, E = 16, 20, 4, 3, 2
		class Gen(nn.Module):
		    def __init__(self):
		        super().__init__()
		        self.label_emb = nn.Embedding(C, E)
		        self.fc = nn.Linear(L + 2 + E, 64 * 4 * 5)
		        self.net = nn.Sequential(nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.GroupNorm(8, 32), nn.ReLU(),
		                                 nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.GroupNorm(8, 16), nn.ReLU(),
		                                 nn.Conv2d(16, 1, 3, padding=1), nn.Tanh())
		    def forward(self, z, c, y):
		        x = F.relu(self.fc(torch.cat([z, c, self.label_emb(y)], 1))).reshape(z.shape[0], 64, 4, 5)
		        return self.net(x)[:, :, :M, :T]
		class Disc(nn.Module):
		    def __init__(self):
		        super().__init__()
		        self.net = nn.Sequential(nn.Conv2d(1, 8, 4, 2, 1), nn.LeakyReLU(0.2),
		                                 nn.Conv2d(8, 16, 4, 2, 1), nn.GroupNorm(8, 16), nn.LeakyReLU(0.2))
		        self.fc = nn.Linear(16, 1)
		        self.label_emb = nn.Embedding(C, 16)
		        self.cond_proj = nn.Linear(2, 16, bias=False)
		    def forward(self, x, c, y):
		        h = self.net(x).mean((2, 3))
		        return self.fc(h) + (h * (self.label_emb(y) + self.cond_proj(c))).sum(1, keepdim=True)
		def load(m, w):
		    m.load_state_dict({k: torch.tensor(v, dtype=torch.float64).reshape(m.state_dict()[k].shape) for k, v in w.items()})
		gen, disc = Gen().double(), Disc().double()
		load(gen, inp["g0"]); load(disc, inp["d0"])
		real = torch.tensor(inp["real"], dtype=torch.float64).reshape(8, 1, M, T)
		cond = torch.tensor(inp["cond"], dtype=torch.float64).reshape(8, 2)
		label = torch.tensor(inp["label"])
		s = GradScaler(init_scale=1024, growth_interval=2)
		s._lazy_init_scale_growth_tracker(torch.device("cpu"))
		optD = torch.optim.Adam(disc.parameters(), lr=1e-2, betas=(0.5, 0.999), eps=1e-8)
		optG = torch.optim.Adam(gen.parameters(), lr=1e-2, betas=(0.5, 0.999), eps=1e-8)
		bce = lambda logits, t: F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, t))
		dl, gl, scales = [], [], []
		no_disc_grad = True
		for it in range(4):
		    torch.manual_seed(100 + it)
		    z = torch.randn(8, L).double()
		    tot = 0.0
		    for k in range(2):
		        sl = slice(4 * k, 4 * k + 4)
		        with torch.no_grad():
		            fake = gen(z[sl], cond[sl], label[sl])
		        l = 0.5 * (bce(disc(real[sl], cond[sl], label[sl]), 1) + bce(disc(fake, cond[sl], label[sl]), 0))
		        tot += (l * 0.5).item()
		        s.scale(l * 0.5).backward()
		    dl.append(tot)
		    s.unscale_(optD)
		    torch.nn.utils.clip_grad_norm_(disc.parameters(), 1.0)
		    s.step(optD)
		    optD.zero_grad(set_to_none=True)
		    disc.requires_grad_(False)
		    tot = 0.0
		    for k in range(4):
		        sl = slice(2 * k, 2 * k + 2)
		        l = bce(disc(gen(z[sl], cond[sl], label[sl]), cond[sl], label[sl]), 1)
		        tot += (l * 0.25).item()
		        s.scale(l * 0.25).backward()
		    gl.append(tot)
		    disc.requires_grad_(True)
		    no_disc_grad = no_disc_grad and all(p.grad is None for p in disc.parameters())
		    s.unscale_(optG)
		    torch.nn.utils.clip_grad_norm_(gen.parameters(), 0.5)
		    s.step(optG)
		    s.update()
		    optG.zero_grad(set_to_none=True)
		    scales.append(s.get_scale())
		emit({"Gen": {k: v.flatten().tolist() for k, v in gen.state_dict().items()},
		      "Disc": {k: v.flatten().tolist() for k, v in disc.state_dict().items()},
		      "DLoss": dl, "GLoss": gl, "Scales": scales, "NoDiscGradInG": no_disc_grad})
	`), map[string]any{"g0": g0, "d0": d0, "real": real.Float64s(), "cond": cond.Float64s(), "label": label.Int64s()}, &want)

	require.True(t, want.NoDiscGradInG)
	require.Equal(t, want.Scales, scales, "scale trajectory")
	for i := range dLoss {
		require.InDelta(t, want.DLoss[i], dLoss[i], 1e-12, "D loss, iteration %d", i)
		require.InDelta(t, want.GLoss[i], gLoss[i], 1e-12, "G loss, iteration %d", i)
	}
	var worst float64
	for _, pair := range []struct {
		got, want map[string][]float64
	}{{weights(g), want.Gen}, {weights(d), want.Disc}} {
		require.Len(t, pair.got, len(pair.want))
		for k, v := range pair.got {
			require.Len(t, pair.want[k], len(v), k)
			for i := range v {
				worst = math.Max(worst, math.Abs(v[i]-pair.want[k][i]))
			}
		}
	}
	t.Logf("%d iterations, scales %v, D losses %.4f, G losses %.4f: max |Go − Python| over both networks' parameters %.1e", iters, scales, dLoss, gLoss, worst)
	require.LessOrEqual(t, worst, 1e-10)
}
