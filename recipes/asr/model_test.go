package asr

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

const testVocab = 60 // about the size of the Konkani character vocabulary

func newTestModel(t *testing.T, preset string, edit func(*ModelConfig)) *Conformer {
	t.Helper()
	cfg, err := Preset(preset, testVocab)
	require.NoError(t, err)
	if edit != nil {
		edit(&cfg)
	}
	torch.ManualSeed(1)
	m, err := NewConformer(cfg)
	require.NoError(t, err)
	return m
}

func TestConformerPresetParams(t *testing.T) {
	// The KonkaniVani guide's table: original ≈ 24.7M, optimized ≈ 10–12M,
	// minimal ≈ 4–6M.
	cases := []struct {
		name   string
		d      int64
		enc    int
		dec    int
		lo, hi float64
	}{
		{"original", 256, 12, 6, 23.5e6, 26e6},
		{"optimized", 192, 8, 4, 10e6, 12e6},
		{"minimal", 128, 6, 3, 4e6, 6e6},
		{"tiny", 96, 3, 1, 0.3e6, 2e6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Preset(c.name, testVocab)
			require.NoError(t, err)
			require.Equal(t, c.d, cfg.DModel)
			require.Equal(t, c.enc, cfg.EncoderLayers)
			require.Equal(t, c.dec, cfg.DecoderLayers)
			m, err := NewConformer(cfg)
			require.NoError(t, err)
			n := nn.NumParams(m)
			t.Logf("preset %-9s d=%d heads=%d enc=%d dec=%d ff=%d/%d kernel=%d vocab=%d: %d parameters (%.2fM)",
				c.name, cfg.DModel, cfg.Heads, cfg.EncoderLayers, cfg.DecoderLayers, cfg.FFDim, cfg.decFF(),
				cfg.ConvKernel, cfg.Vocab, n, float64(n)/1e6)
			t.Log(m.ParamSummary())
			require.GreaterOrEqual(t, float64(n), c.lo)
			require.LessOrEqual(t, float64(n), c.hi)
		})
	}
	_, err := Preset("huge", testVocab)
	require.ErrorContains(t, err, "unknown model preset")
}

func TestConformerStateDictNames(t *testing.T) {
	m := newTestModel(t, "tiny", nil)
	have := map[string][]int64{}
	for _, p := range nn.StateDict(m) {
		have[p.Name] = p.T.Shape()
	}
	d, v := m.Cfg.DModel, m.Cfg.Vocab
	want := map[string][]int64{
		"encoder.subsample.conv.0.weight":                      {d, 1, 3, 3},
		"encoder.subsample.conv.2.weight":                      {d, d, 3, 3},
		"encoder.subsample.out.weight":                         {d, d * 19},
		"encoder.layers.0.ff1.linear1.weight":                  {m.Cfg.FFDim, d},
		"encoder.layers.0.self_attn.in_proj_weight":            {3 * d, d},
		"encoder.layers.0.conv_module.pointwise_conv1.weight":  {2 * d, d, 1},
		"encoder.layers.0.conv_module.depthwise_conv.weight":   {d, 1, m.Cfg.ConvKernel},
		"encoder.layers.0.conv_module.batch_norm.running_mean": {d},
		"encoder.layers.2.ff2.linear2.bias":                    {d},
		"encoder.layers.2.final_norm.weight":                   {d},
		"ctc_head.weight":                                      {v, d},
		"decoder.embed.weight":                                 {v, d},
		"decoder.layers.0.self_attn.in_proj_weight":            {3 * d, d},
		"decoder.layers.0.multihead_attn.out_proj.weight":      {d, d},
		"decoder.layers.0.norm3.bias":                          {d},
		"decoder.norm.weight":                                  {d},
		"decoder.out.weight":                                   {v, d},
	}
	for k, s := range want {
		require.Contains(t, have, k)
		require.Equal(t, s, have[k], k)
	}
	for k := range have {
		require.NotContains(t, k, "pos_enc", "sinusoidal tables stay out of the state dict")
	}
}

func TestConformerSubsampledLength(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{0, 0}, {6, 0}, {7, 1}, {8, 1}, {9, 1}, {11, 2}, {13, 2}, {15, 3}, {100, 24}, {101, 24}, {103, 25}, {400, 99},
	} {
		require.Equal(t, c.want, SubsampledLength(c.n), "n=%d", c.n)
		if c.n >= 3 {
			// the formula of two Conv2d(k=3, s=2): ⌊(n−3)/2⌋+1 twice
			l1 := (c.n-3)/2 + 1
			want := int64(0)
			if l1 >= 3 {
				want = (l1-3)/2 + 1
			}
			require.Equal(t, want, SubsampledLength(c.n))
		}
	}
}

// randFeats returns (B, T, 80) normal features, zero past each length.
func randFeats(lens []int64, t int64) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		x := torch.Randn([]int64{int64(len(lens)), t, 80})
		valid := PaddingMask(lens, t, torch.CPU).LogicalNot().ToDType(torch.Float32).Unsqueeze(-1)
		return x.Mul(valid)
	})
}

func TestConformerForwardShapes(t *testing.T) {
	m := newTestModel(t, "tiny", nil)
	nn.SetTraining(m, false)
	lens := []int64{101, 77, 13}
	torch.Tidy(func() {
		feats := randFeats(lens, 101)
		enc, outLens := m.Encode(feats, lens)
		require.Equal(t, []int64{3, 24, m.Cfg.DModel}, enc.Shape())
		require.Equal(t, []int64{24, 18, 2}, outLens)
		for k, n := range lens {
			require.Equal(t, SubsampledLength(n), outLens[k])
		}
		lp, _ := m.CTCLogProbs(feats, lens)
		require.Equal(t, []int64{3, 24, m.Cfg.Vocab}, lp.Shape())

		// In eval mode the valid frames do not depend on the padding: the
		// second sequence alone gives the same encoder output.
		alone, l := m.Encode(feats.Narrow(0, 1, 1).Narrow(1, 0, 77), []int64{77})
		require.Equal(t, []int64{18}, l)
		require.True(t, enc.Narrow(0, 1, 1).Narrow(1, 0, 18).AllClose(alone, 1e-4, 1e-4),
			"padding leaks into valid frames")

		ys := torch.FromSlice([]int64{SOSID, 7, 8, 9, SOSID, 10, PadID, PadID}, []int64{2, 4})
		logits := m.Decoder.Forward(ys, enc.Narrow(0, 0, 2), nil, PaddingMask(outLens[:2], 24, torch.CPU))
		require.Equal(t, []int64{2, 4, m.Cfg.Vocab}, logits.Shape())
	})
	require.Panics(t, func() { m.Encode(torch.Randn([]int64{1, 6, 80}), nil) }, "6 frames subsample to nothing")
}

// batch is a synthetic batch: features, lengths, tokens, token lengths.
type batch struct{ feats, featLens, tokens, tokenLens *torch.Tensor }

// dataBatch is b's features and tokens as a data.Batch whose lengths (on
// the host, as Collate keeps them) are featLens and tokenLens.
func (b batch) dataBatch(featLens, tokenLens []int64) *data.Batch {
	d := &data.Batch{Fields: map[string]*torch.Tensor{"feats": b.feats.Ref(), "tokens": b.tokens.Ref()}}
	d.SetLengths("feats", featLens)
	d.SetLengths("tokens", tokenLens)
	return d
}

func (b batch) free() {
	for _, t := range []*torch.Tensor{b.feats, b.featLens, b.tokens, b.tokenLens} {
		t.Free()
	}
}

// synthBatch makes token sequences and features that hold, for each token,
// a fixed random 80-d template for a few frames plus noise. The first
// utterance is stretched to minFrames with trailing noise frames.
func synthBatch(seed uint64, b int, maxTok int, framesPerTok int, vocab int64, minFrames int64) batch {
	r := rand.New(rand.NewPCG(seed, 7))
	templates := make([][]float32, vocab)
	for k := range templates {
		templates[k] = make([]float32, 80)
		for j := range templates[k] {
			templates[k][j] = float32(r.NormFloat64())
		}
	}
	var toks [][]int64
	var tlens, flens []int64
	var maxT int64
	for i := 0; i < b; i++ {
		n := maxTok - i
		seq := make([]int64, n)
		for j := range seq {
			seq[j] = UNKID + 1 + r.Int64N(vocab-UNKID-1)
		}
		toks = append(toks, seq)
		tlens = append(tlens, int64(n))
		fl := int64(n*framesPerTok + 6)
		if i == 0 {
			fl = max(fl, minFrames)
		}
		flens = append(flens, fl)
		maxT = max(maxT, fl)
	}
	feats := make([]float32, int64(b)*maxT*80)
	tokens := make([]int64, b*maxTok)
	for i := range toks {
		for j := range tokens[i*maxTok : (i+1)*maxTok] {
			tokens[i*maxTok+j] = PadID
		}
		copy(tokens[i*maxTok:], toks[i])
		for f := int64(0); f < flens[i]; f++ {
			tok := int64(-1)
			if k := (f - 3) / int64(framesPerTok); f >= 3 && k < int64(len(toks[i])) {
				tok = toks[i][k]
			}
			for j := 0; j < 80; j++ {
				v := float32(0.3 * r.NormFloat64())
				if tok >= 0 {
					v += templates[tok][j]
				}
				feats[(int64(i)*maxT+f)*80+int64(j)] = v
			}
		}
	}
	return batch{
		feats:     torch.FromSlice(feats, []int64{int64(b), maxT, 80}).Keep(),
		featLens:  torch.FromSlice(flens, []int64{int64(b)}).Keep(),
		tokens:    torch.FromSlice(tokens, []int64{int64(b), int64(maxTok)}).Keep(),
		tokenLens: torch.FromSlice(tlens, []int64{int64(b)}).Keep(),
	}
}

// CapturableBatchLoss (torch.CTCLossOnDevice for the CTC) gives BatchLoss's
// loss and gradients to the bit on the CPU and reads nothing;
// CapturableCTC takes the lengths cuDNN's CTC takes.
func TestCapturableBatchLoss(t *testing.T) {
	m := newTestModel(t, "tiny", nil)
	bt := synthBatch(2, 3, 12, 8, m.Cfg.Vocab, 0)
	defer bt.free()
	b := bt.dataBatch(bt.featLens.Int64s(), bt.tokenLens.Int64s())
	defer b.Free()
	require.NoError(t, CapturableCTC(b))
	params := nn.Tensors(nn.Parameters(m))
	run := func(loss func(*data.Batch) *torch.Tensor) (float64, [][]float32, []torch.CallStat) {
		torch.ZeroGrad(params)
		var l float64
		stats := torch.CountCalls(func() {
			torch.Tidy(func() {
				torch.ManualSeed(3) // dropout draws the same masks in both
				x := loss(b)
				x.Backward()
				l = x.Item()
			})
		})
		grads := make([][]float32, len(params))
		for i, p := range params {
			torch.Tidy(func() { grads[i] = torch.ToSlice[float32](p.Grad()) })
		}
		return l, grads, stats
	}
	wantL, wantG, _ := run(m.BatchLoss)
	gotL, gotG, stats := run(m.CapturableBatchLoss)
	require.Equal(t, wantL, gotL)
	require.Equal(t, wantG, gotG)
	reads := torch.HostTransfers(stats)
	require.Len(t, reads, 1, "%v", reads)
	require.EqualValues(t, 1, reads[0].Calls, "the test's read of the loss only: %v", reads)

	// The switch makes the recipe's loss the same.
	prev := CTCOnDevice
	t.Cleanup(func() { CTCOnDevice = prev })
	CTCOnDevice = true
	switchedL, switchedG, _ := run(m.BatchLoss)
	CTCOnDevice = prev
	require.Equal(t, wantL, switchedL)
	require.Equal(t, wantG, switchedG)

	for _, tc := range []struct {
		name         string
		feats, token []int64
		ok           bool
	}{
		{"1024 frames: 255 after subsampling", []int64{1024, 40}, []int64{200, 5}, true},
		{"1028 frames: 256", []int64{1028, 40}, []int64{200, 5}, false},
		{"more tokens than encoder frames (40 frames: 9)", []int64{400, 40}, []int64{10, 10}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			long := bt.dataBatch(tc.feats, tc.token)
			defer long.Free()
			if tc.ok {
				require.NoError(t, CapturableCTC(long))
			} else {
				require.Error(t, CapturableCTC(long))
			}
		})
	}
}

// The CTC on the device takes any lengths off CUDA, and on CUDA only those
// cuDNN's CTC takes.
func TestCTCFitsDevice(t *testing.T) {
	fit, long := []int64{255, 30}, []int64{256, 30}
	tl := []int64{40, 30}
	for _, tc := range []struct {
		name string
		dev  torch.Device
		enc  []int64
		fits bool
	}{
		{"CUDA, within the limits", torch.CUDA(0), fit, true},
		{"CUDA, 256 frames", torch.CUDA(0), long, false},
		{"CPU, 256 frames", torch.CPU, long, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.fits, ctcFitsDevice(tc.dev, tc.enc, tl))
		})
	}
}

// BatchLossParts checks the lengths on the batch's host copy: a step
// reads nothing from the device and copies nothing in, and computes what
// LossParts does, to the bit.
func TestConformerBatchLossReadsNothing(t *testing.T) {
	m := newTestModel(t, "tiny", nil)
	bt := synthBatch(2, 3, 12, 8, m.Cfg.Vocab, 0)
	defer bt.free()
	b := bt.dataBatch(bt.featLens.Int64s(), bt.tokenLens.Int64s())
	defer b.Free()
	torch.Tidy(func() {
		var got []*torch.Tensor
		torch.ManualSeed(3) // dropout draws the same masks in both
		stats := torch.CountCalls(func() {
			total, ctc, attn := m.BatchLossParts(b)
			got = []*torch.Tensor{total, ctc, attn}
		})
		require.Empty(t, torch.HostTransfers(stats), "nothing read or copied in")
		torch.ManualSeed(3)
		total, ctc, attn := m.LossParts(bt.feats, bt.featLens, bt.tokens, bt.tokenLens)
		for k, want := range []*torch.Tensor{total, ctc, attn} {
			require.Equal(t, want.Item(), got[k].Item(), "part %d", k)
		}
	})
	// The lengths are still checked.
	bad := bt.dataBatch(bt.featLens.Int64s(), []int64{1, 13, 2})
	defer bad.Free()
	err := torch.Try(func() { m.BatchLoss(bad) })
	var te *torch.Error
	require.ErrorAs(t, err, &te)
	require.Contains(t, te.Msg, "token length 13 of sequence 1 outside [0, 12]")
}

func TestConformerLossBackward(t *testing.T) {
	m := newTestModel(t, "tiny", nil)
	bt := synthBatch(1, 3, 12, 8, m.Cfg.Vocab, 0)
	defer bt.free()
	torch.Tidy(func() {
		var total *torch.Tensor
		var ctc, attn float64
		// The lengths are read first (2 copies out, to check them), the
		// parts stay on the device, and nothing is copied in: the
		// encoder's lengths and mask and the decoder's input and target
		// are made on the device.
		stats := torch.CountCalls(func() {
			var c, a *torch.Tensor
			total, c, a = m.LossParts(bt.feats, bt.featLens, bt.tokens, bt.tokenLens)
			require.False(t, c.RequiresGrad() || a.RequiresGrad(), "the parts are detached")
			ctc, attn = c.Item(), a.Item()
		})
		var reads int64
		for _, s := range torch.HostTransfers(stats) {
			require.NotEqual(t, "(from data)", s.Name, "nothing copied in")
			reads += s.Calls
		}
		require.Equal(t, int64(2+2), reads, "two reads before the encoder, the test's two of the parts: %v", torch.HostTransfers(stats))
		v := total.Item()
		t.Logf("tiny: loss %.4f = 0.3·ctc %.4f + 0.7·attn %.4f", v, ctc, attn)
		require.False(t, math.IsNaN(v) || math.IsInf(v, 0))
		require.Greater(t, ctc, 0.0)
		require.Greater(t, attn, 0.0)
		require.InDelta(t, m.Cfg.CTCWeight*ctc+(1-m.Cfg.CTCWeight)*attn, v, 1e-4)
		total.Backward()
	})
	for _, p := range nn.Parameters(m) {
		g := p.T.Grad()
		require.NotNil(t, g, "%s has no gradient", p.Name)
		require.True(t, g.IsFinite().All().Item() != 0, "%s: non-finite gradient", p.Name)
		g.Free()
	}

	// CTC weight 1 skips the decoder; 0 skips CTC.
	for _, w := range []float64{0, 1} {
		m.Cfg.CTCWeight = w
		torch.Tidy(func() {
			total, ctc, attn := m.LossParts(bt.feats, bt.featLens, bt.tokens, bt.tokenLens)
			if w == 1 {
				require.Nil(t, attn)
				require.InDelta(t, ctc.Item(), total.Item(), 1e-5)
			} else {
				require.Nil(t, ctc)
				require.InDelta(t, attn.Item(), total.Item(), 1e-5)
			}
		})
	}
}

type runResult struct {
	grads   [][]float32
	buffers [][]float32
	peak    int64 // peak during forward and backward
	held    int64 // held between forward and backward (saved activations)
	loss    float64
}

// runOnce does one forward/backward of m and collects gradients, batch
// norm buffers and the peak CPU memory above the starting point.
func runOnce(t *testing.T, m *Conformer, bt batch, ckpt bool) runResult {
	t.Helper()
	m.Cfg.GradCheckpointing = ckpt
	for _, p := range nn.Parameters(m) {
		p.T.SetGrad(nil)
	}
	var res runResult
	// Finalizers of tensors earlier tests dropped would free memory in the
	// middle of the measurement: settle them first.
	torch.CollectGarbage()
	base := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	torch.Tidy(func() {
		total := m.Loss(bt.feats, bt.featLens, bt.tokens, bt.tokenLens)
		res.loss = total.Item()
		res.held = torch.MustMemoryStats(torch.CPU).Allocated - base
		total.Backward()
	})
	res.peak = torch.MustMemoryStats(torch.CPU).PeakAllocated - base
	for _, p := range nn.Parameters(m) {
		g := p.T.Grad()
		require.NotNil(t, g, p.Name)
		res.grads = append(res.grads, g.Float32s())
		g.Free()
	}
	for _, b := range nn.Buffers(m) {
		if b.T.DType() == torch.Float32 {
			res.buffers = append(res.buffers, b.T.Float32s())
		} else {
			res.buffers = append(res.buffers, []float32{float32(b.T.Item())})
		}
	}
	return res
}

func TestConformerGradCheckpointing(t *testing.T) {
	threads := torch.NumThreads()
	torch.SetNumThreads(1)
	defer torch.SetNumThreads(threads)

	// 12 encoder layers: at the preset's 6, libtorch 2.11's backward peak
	// is set outside the blocks (81.2 MiB with checkpointing or without:
	// scaled_dot_product_attention already keeps no attention matrices,
	// which were 1.13's biggest saved tensors); more blocks make theirs the
	// peak again (12 layers: 2.11 130.0 → 93.0 MiB, 1.13 130.0 → 82.0 on
	// 2026-11-28, 138.1 → 82.0 before).
	m := newTestModel(t, "minimal", func(c *ModelConfig) { c.Dropout = 0; c.EncoderLayers = 12 })
	// 4 utterances of up to 400 frames (~4 s), ~40 characters each.
	bt := synthBatch(2, 4, 40, 9, m.Cfg.Vocab, 400)
	defer bt.free()
	require.Equal(t, int64(400), bt.feats.Size(1))

	// Same starting batch-norm statistics for both runs.
	var saved []*torch.Tensor
	for _, b := range nn.Buffers(m) {
		saved = append(saved, b.T.Clone().Keep())
	}
	restore := func() {
		torch.NoGrad(func() {
			for k, b := range nn.Buffers(m) {
				b.T.CopyFrom(saved[k])
			}
		})
	}
	defer func() {
		for _, s := range saved {
			s.Free()
		}
	}()

	plain := runOnce(t, m, bt, false)
	restore()
	ckpt := runOnce(t, m, bt, true)
	require.InDelta(t, plain.loss, ckpt.loss, 1e-6)
	params := nn.Parameters(m)
	for k := range plain.grads {
		require.InDeltaSlice(t, plain.grads[k], ckpt.grads[k], 1e-5, "gradient of %s", params[k].Name)
	}
	// Batch norm's running statistics (and num_batches_tracked) are updated
	// once per forward, checkpointed or not.
	bufs := nn.Buffers(m)
	for k := range plain.buffers {
		require.InDeltaSlice(t, plain.buffers[k], ckpt.buffers[k], 1e-6, "buffer %s", bufs[k].Name)
	}
	pct := func(a, b int64) float64 { return 100 * (1 - float64(b)/float64(a)) }
	t.Logf("minimal preset with 12 encoder layers, batch 4×%d frames, CPU memory above baseline (gradients of %.2fM parameters included in the peak):",
		bt.feats.Size(1), float64(nn.NumParams(m))/1e6)
	t.Logf("  peak:                     %s without checkpointing, %s with (%.0f%% lower)",
		torch.FormatBytes(plain.peak), torch.FormatBytes(ckpt.peak), pct(plain.peak, ckpt.peak))
	t.Logf("  held after forward (graph): %s without checkpointing, %s with (%.0f%% lower)",
		torch.FormatBytes(plain.held), torch.FormatBytes(ckpt.held), pct(plain.held, ckpt.held))
	require.Less(t, ckpt.peak, plain.peak)
	require.Less(t, ckpt.held, plain.held)
	require.Zero(t, torch.RecomputesLive())
}

func TestConformerOverfit(t *testing.T) {
	m := newTestModel(t, "tiny", func(c *ModelConfig) { c.Dropout = 0 })
	v, err := NewVocab(append(append([]string(nil), specials...), []string{
		"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", " ",
	}...))
	require.NoError(t, err)
	m.Vocab = v // the model's 60 outputs cover these 26 tokens
	bt := synthBatch(3, 2, 10, 8, int64(v.Size()), 0)
	defer bt.free()

	opt := nn.NewAdam(nn.Parameters(m), nn.AdamDefaults(1e-3))
	defer opt.Free()
	var losses []float64
	var live []int64
	for step := 0; step < 30; step++ {
		torch.Tidy(func() {
			opt.ZeroGrad()
			total := m.Loss(bt.feats, bt.featLens, bt.tokens, bt.tokenLens)
			losses = append(losses, total.Item())
			total.Backward()
			opt.Step()
		})
		opt.ZeroGrad()
		live = append(live, torch.LiveTensors())
	}
	t.Logf("tiny overfit: loss %.3f → %.3f; live tensors after steps 2 and 30: %d, %d", losses[0], losses[len(losses)-1], live[1], live[len(live)-1])
	require.Less(t, losses[len(losses)-1], 0.5*losses[0], "loss drops by more than half")
	for k := 2; k < len(live); k++ {
		require.Equal(t, live[1], live[k], "live tensors after step %d", k+1)
	}

	nn.SetTraining(m, true)
	out := m.Transcribe(bt.feats, bt.featLens)
	require.Len(t, out, 2)
	require.True(t, m.Training(), "Transcribe restores training mode")
	ids := m.TranscribeIDs(bt.feats, bt.featLens)
	for k, s := range out {
		require.Equal(t, v.Decode(ids[k]), s)
	}
	tl := bt.tokenLens.Int64s()
	var er speech.ErrorRate
	torch.Tidy(func() {
		for k, s := range out {
			ref := v.Decode(bt.tokens.Select(0, int64(k)).Narrow(0, 0, tl[k]).Int64s())
			er.Add(ref, s)
			t.Logf("greedy CTC after 30 steps: ref %q hyp %q", ref, s)
		}
	})
	t.Logf("CER %.3f", er.CER())
	require.Less(t, er.CER(), 0.5, "the memorised batch transcribes")
}

// BenchmarkConformerTinyStep times a training step of the tiny preset on 8
// utterances of ~300 frames (~3 s), the demo corpus's shape.
func BenchmarkConformerTinyStep(b *testing.B) {
	cfg, err := Preset("tiny", testVocab)
	require.NoError(b, err)
	m, err := NewConformer(cfg)
	require.NoError(b, err)
	bt := synthBatch(4, 8, 30, 10, cfg.Vocab, 0)
	defer bt.free()
	opt := nn.NewAdam(nn.Parameters(m), nn.AdamDefaults(1e-3))
	defer opt.Free()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		torch.Tidy(func() {
			opt.ZeroGrad()
			total := m.Loss(bt.feats, bt.featLens, bt.tokens, bt.tokenLens)
			total.Backward()
			opt.Step()
		})
		opt.ZeroGrad()
	}
}
