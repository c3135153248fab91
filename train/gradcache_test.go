package train_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// twoTowers is a CLIP in miniature: an image tower and a text tower with
// dropout, and a CLIP loss with a learnable temperature (logit_scale).
type twoTowers struct {
	nn.Base
	img, txt *nn.Sequential
	loss     *nn.CLIPLoss
}

func newTwoTowers(seed uint64, dropout float64, hidden int64, dt torch.DType) *twoTowers {
	torch.ManualSeed(seed)
	m := &twoTowers{}
	m.img = nn.RegisterModule(&m.Base, "img", nn.NewSequential(nn.NewLinear(12, hidden, true), nn.NewDropout(dropout), nn.NewReLU(), nn.NewLinear(hidden, 8, true)))
	m.txt = nn.RegisterModule(&m.Base, "txt", nn.NewSequential(nn.NewLinear(10, hidden, true), nn.NewDropout(dropout), nn.NewTanh(), nn.NewLinear(hidden, 8, true)))
	m.loss = nn.RegisterModule(&m.Base, "loss", nn.NewCLIPLoss())
	nn.To(m, torch.CPU, dt)
	return m
}

func (m *twoTowers) embed(b *data.Batch) []*torch.Tensor {
	return []*torch.Tensor{m.img.Forward(b.Fields["img"]), m.txt.Forward(b.Fields["txt"])}
}

func (m *twoTowers) batchLoss(embs []*torch.Tensor) *torch.Tensor {
	return m.loss.Forward(embs[0], embs[1])
}

func pairs(n int64, dt torch.DType) *data.Batch {
	torch.ManualSeed(11)
	return &data.Batch{Fields: map[string]*torch.Tensor{
		"img": torch.Randn([]int64{n, 12}).ToDType(dt).Keep(),
		"txt": torch.Randn([]int64{n, 10}).ToDType(dt).Keep(),
	}}
}

func grads(m nn.Module) map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range nn.Parameters(m) {
		g := p.T.Grad()
		if g != nil {
			out[p.Name] = g.ToDType(torch.Float64).Float64s()
			g.Free()
		}
		p.T.SetGrad(nil)
	}
	return out
}

func maxDiff(a, b map[string][]float64) float64 {
	var d float64
	for k, x := range a {
		for i := range x {
			d = math.Max(d, math.Abs(x[i]-b[k][i]))
		}
	}
	return d
}

// The grad-cache gradient of 4 micro-batches of 8 equals the gradient of
// the same 32 samples in one graph — forwarded micro-batch by micro-batch
// under the same random numbers, concatenated, one loss, one backward —
// for every parameter, the temperature included; with dropout off it also
// equals one plain batch of 32. Naive accumulation (the loss of each
// micro-batch on its own) gives another gradient.
func TestGradCacheIsExact(t *testing.T) {
	for _, dropout := range []float64{0.3, 0} {
		m := newTwoTowers(5, dropout, 16, torch.Float64)
		b := pairs(32, torch.Float64)
		start := torch.TakeRNG()

		// Reference: one graph over the micro-batches, same RNG sequence.
		start.Restore()
		torch.Tidy(func() {
			var imgs, txts []*torch.Tensor
			for k := int64(0); k < 4; k++ {
				mb := b.Slice(int(k*8), int((k+1)*8), torch.CPU)
				e := m.embed(mb)
				imgs, txts = append(imgs, e[0]), append(txts, e[1])
			}
			m.batchLoss([]*torch.Tensor{torch.Cat(imgs, 0), torch.Cat(txts, 0)}).Backward()
		})
		ref := grads(m)

		// Grad cache, recording both passes' embeddings.
		eng, err := train.NewEngine(train.EngineConfig{MicroBatch: 8, Device: torch.CPU})
		require.NoError(t, err)
		var first, second [][]float32
		calls := 0
		embed := func(mb *data.Batch) []*torch.Tensor {
			e := m.embed(mb)
			rec := append(e[0].Float32s(), e[1].Float32s()...)
			if calls < 4 {
				first = append(first, rec)
			} else {
				second = append(second, rec)
			}
			calls++
			return e
		}
		start.Restore()
		w, err := eng.GradCache(b, train.CachePass{Embed: embed, Loss: m.batchLoss})
		require.NoError(t, err)
		require.Equal(t, 4, w.Micro)
		require.Equal(t, first, second, "the re-forwarded embeddings equal the cached ones exactly")
		cached := grads(m)
		require.Contains(t, cached, "loss.logit_scale")
		d := maxDiff(ref, cached)
		t.Logf("dropout %.1f: grad-cache 4×8 vs one graph of 32: max |Δgrad| %.2e (logit_scale %.6f vs %.6f)",
			dropout, d, cached["loss.logit_scale"][0], ref["loss.logit_scale"][0])
		require.Less(t, d, 1e-5)

		if dropout == 0 {
			torch.Tidy(func() { m.batchLoss(m.embed(b)).Backward() })
			plain := grads(m)
			require.Less(t, maxDiff(plain, cached), 1e-5, "equals one plain batch of 32 too")
		}

		// The seed's accumulation: each micro-batch's own 8-way loss.
		naiveEng, err := train.NewEngine(train.EngineConfig{MicroBatch: 8, Device: torch.CPU})
		require.NoError(t, err)
		start.Restore()
		_, err = naiveEng.Backward(b, train.Pass{Loss: func(mb *data.Batch) *torch.Tensor { return m.batchLoss(m.embed(mb)) }})
		require.NoError(t, err)
		naive := grads(m)
		dn := maxDiff(ref, naive)
		t.Logf("dropout %.1f: naive accumulation vs the 32-way loss: max |Δgrad| %.2e (logit_scale gradient %.4f vs %.4f)",
			dropout, dn, naive["loss.logit_scale"][0], ref["loss.logit_scale"][0])
		require.Greater(t, dn, 1e-3, "naive accumulation is another loss")
		start.Free()
		b.Free()
		nn.Free(m)
	}
}

// The grad-cache step holds one micro-batch's activations and the window's
// embeddings, not the window's activations (counter-measured).
func TestGradCacheMemory(t *testing.T) {
	torch.CollectGarbage()
	m := newTwoTowers(5, 0.1, 1024, torch.Float32)
	defer nn.Free(m)
	b := pairs(256, torch.Float32)
	defer b.Free()
	peakOf := func(fn func()) int64 {
		for _, p := range nn.Parameters(m) {
			p.T.SetGrad(nil)
		}
		base := torch.MustMemoryStats(torch.CPU).Allocated
		require.NoError(t, torch.ResetPeakMemory(torch.CPU))
		fn()
		return torch.MustMemoryStats(torch.CPU).PeakAllocated - base
	}
	// One micro-batch of 64 forward and backward, gradients included.
	chunk := peakOf(func() {
		torch.Tidy(func() {
			mb := b.Slice(0, 64, torch.CPU)
			e := m.embed(mb)
			e[0].Sum().Add(e[1].Sum()).Backward()
		})
	})
	full := peakOf(func() { torch.Tidy(func() { m.batchLoss(m.embed(b)).Backward() }) })
	eng, err := train.NewEngine(train.EngineConfig{MicroBatch: 64, Device: torch.CPU})
	require.NoError(t, err)
	gc := peakOf(func() {
		_, err := eng.GradCache(b, train.CachePass{Embed: m.embed, Loss: m.batchLoss})
		require.NoError(t, err)
	})
	// The window's embeddings (2 towers × 256 × 8 float32), held as leaves
	// with their gradients, and the 256×256 logits of the loss.
	emb := int64(2 * 256 * 8 * 4)
	logits := int64(256 * 256 * 4)
	t.Logf("peak above the start: plain batch of 256 %s; grad-cache 4×64 %s; one micro-batch of 64 %s + embeddings %s + logits %s",
		torch.FormatBytes(full), torch.FormatBytes(gc), torch.FormatBytes(chunk), torch.FormatBytes(2*emb), torch.FormatBytes(logits))
	require.LessOrEqual(t, gc, chunk+4*emb+4*logits)
	require.Less(t, gc, full/2)
}

// A window of one micro-batch is embedded once (not twice) and gets the
// plain batch's gradient.
func TestGradCacheOneMicroBatch(t *testing.T) {
	m := newTwoTowers(5, 0, 16, torch.Float64)
	defer nn.Free(m)
	b := pairs(8, torch.Float64)
	defer b.Free()
	torch.Tidy(func() { m.batchLoss(m.embed(b)).Backward() })
	plain := grads(m)
	eng, err := train.NewEngine(train.EngineConfig{MicroBatch: 8, Device: torch.CPU})
	require.NoError(t, err)
	calls := 0
	embed := func(mb *data.Batch) []*torch.Tensor { calls++; return m.embed(mb) }
	w, err := eng.GradCache(b, train.CachePass{Embed: embed, Loss: m.batchLoss})
	require.NoError(t, err)
	require.Equal(t, 1, calls, "one forward")
	require.Equal(t, 1, w.Micro)
	require.Less(t, maxDiff(plain, grads(m)), 1e-12)
}

// A Trainer with Config.Contrastive trains at micro-batch 8 × 4 exactly
// as a plain batch of 32 does (float64, no dropout), step after step; a
// Trainer accumulating the per-micro-batch loss (the seed's way) does not.
func TestTrainerContrastive(t *testing.T) {
	run := func(micro, accum int, exact bool) map[string][]float64 {
		m := newTwoTowers(7, 0, 16, torch.Float64)
		defer nn.Free(m)
		opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-2))
		defer opt.Free()
		cfg := train.Config{MicroBatch: micro, Accum: accum, Device: torch.CPU, ClipNorm: 1}
		if exact {
			cfg.Contrastive = &train.Contrastive{Embed: m.embed, Loss: m.batchLoss}
		}
		tr, err := train.New(m, opt, func(mb *data.Batch) *torch.Tensor { return m.batchLoss(m.embed(mb)) }, cfg)
		require.NoError(t, err)
		for step := 0; step < 3; step++ {
			b := pairs(32, torch.Float64)
			_, err := tr.Step(b)
			b.Free()
			require.NoError(t, err)
		}
		out := map[string][]float64{}
		for _, p := range nn.Parameters(m) {
			out[p.Name] = p.T.Float64s()
		}
		return out
	}
	plain := run(32, 1, false)
	exact := run(8, 4, true)
	naive := run(8, 4, false)
	d, dn := maxDiff(plain, exact), maxDiff(plain, naive)
	t.Logf("after 3 AdamW steps: exact 8×4 vs batch 32: max |Δθ| %.2e; naive 8×4 vs batch 32: %.2e", d, dn)
	require.Less(t, d, 1e-9)
	require.Greater(t, dn, 1e-4)
}
