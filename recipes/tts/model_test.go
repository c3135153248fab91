package tts

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// randomSamples returns n samples of random normalised mels, reference
// clips and phonemes of lengths that differ.
func randomSamples(n int, vocab int64, seed uint64) []data.Sample {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []data.Sample
	for k := range n {
		t, tc, l := 9+7*k, 12+5*k, 3+2*k
		mel := make([]float32, t*NMels)
		ref := make([]float32, tc*NMels)
		for i := range mel {
			mel[i] = float32(r.NormFloat64())
		}
		for i := range ref {
			ref[i] = float32(r.NormFloat64())
		}
		text := make([]int64, l)
		for i := range text {
			text[i] = 2 + r.Int64N(vocab-2)
		}
		out = append(out, data.Sample{
			"mel":  torch.FromSlice(mel, []int64{int64(t), NMels}),
			"cond": torch.FromSlice(ref, []int64{int64(tc), NMels}),
			"text": torch.FromSlice(text, nil),
		})
	}
	return out
}

func newTinyModel(t *testing.T, vocab int64) *Model {
	t.Helper()
	torch.ManualSeed(11)
	g := tinyGPTConfig(vocab)
	g.Dropout = 0
	m, err := NewModel(tinyCodecConfig(), g)
	require.NoError(t, err)
	return m
}

// TestCollateLayout: each sample's sequence is [text start, phonemes,
// text stop, audio start, codes, audio stop] with its kinds, stream
// positions, code indices and targets; padding is kindPad; a micro-batch
// keeps the layout, trimmed to its longest sample.
func TestCollateLayout(t *testing.T) {
	g := tinyGPTConfig(10)
	samples := randomSamples(3, 10, 1)
	b, err := Collate(g)(samples)
	require.NoError(t, err)
	defer b.Free()
	melLens := b.Lengths["mel"].Int64s()
	require.Equal(t, []int64{9, 16, 23}, melLens)
	require.Equal(t, int64(24), b.Fields["mel"].Size(1), "frames padded to a multiple of 8")
	l := b.Fields["ids"].Size(1)
	require.Zero(t, l%seqPad)
	ids, kind, pos := b.Fields["ids"].Int64s(), b.Fields["kind"].Int64s(), b.Fields["pos"].Int64s()
	cidx, tk := b.Fields["code_idx"].Int64s(), b.Fields["tk"].Int64s()
	for k, s := range samples {
		text := s["text"].Int64s()
		n, m := int64(len(text)), CodeLen(melLens[k])
		row := int64(k) * l
		at := func(j int64) (int64, int64, int64, int64, int64) {
			return ids[row+j], kind[row+j], pos[row+j], cidx[row+j], tk[row+j]
		}
		type tok struct{ id, kind, pos, cidx, tk int64 }
		var want []tok
		want = append(want, tok{g.textStart(), kindText, 0, -1, 0})
		for j, id := range text {
			want = append(want, tok{id, kindText, int64(j) + 1, -1, kindText})
		}
		want = append(want, tok{g.textStop(), kindText, n + 1, -1, kindText}, tok{g.audioStart(), kindAudio, 0, -1, 0})
		for j := range m {
			want = append(want, tok{0, kindAudio, j + 1, j, kindAudio})
		}
		want = append(want, tok{g.audioStop(), kindAudio, m + 1, -1, kindAudio})
		for j, w := range want {
			id, kd, ps, ci, tg := at(int64(j))
			require.Equal(t, w, tok{id, kd, ps, ci, tg}, "sample %d token %d", k, j)
		}
		for j := int64(len(want)); j < l; j++ {
			_, kd, _, ci, tg := at(j)
			require.Equal(t, []int64{kindPad, -1, 0}, []int64{kd, ci, tg}, "padding")
		}
		require.Equal(t, int64(len(want)), b.Lengths["ids"].Int64s()[k])
	}
	mb := b.Slice(0, 1, torch.CPU)
	defer mb.Free()
	require.Equal(t, int64(16), mb.Fields["mel"].Size(1), "the first sample's 9 frames, padded to 16")
	require.Equal(t, roundUp(int64(len(samples[0]["text"].Int64s()))+2+CodeLen(9)+2, seqPad), mb.Fields["ids"].Size(1))
	require.Equal(t, b.Fields["ids"].Narrow(0, 0, 1).Narrow(1, 0, mb.Fields["ids"].Size(1)).Int64s(), mb.Fields["ids"].Int64s())
	for _, s := range samples {
		for _, x := range s {
			x.Free()
		}
	}
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// TestKVCacheMatchesFullForward: decoding one token at a time with the
// cached keys and values gives the logits of a forward pass over the
// whole sequence.
func TestKVCacheMatchesFullForward(t *testing.T) {
	m := newTinyModel(t, 12)
	defer nn.Free(m)
	nn.SetTraining(m, false)
	g := m.GPT.Cfg
	torch.NoGrad(func() {
		torch.Tidy(func() {
			lat := m.GPT.Cond.Forward(torch.Randn([]int64{1, 20, NMels}), nil)
			text := []int64{3, 5, 7, 2}
			codes := []int64{4, 9, 9, 1, 30}
			ids := append(append(append([]int64{g.textStart()}, text...), g.textStop(), g.audioStart()), codes...)
			kind := make([]int64, len(ids))
			pos := make([]int64, len(ids))
			for j := range ids {
				if j <= len(text)+1 {
					kind[j], pos[j] = kindText, int64(j)
				} else {
					kind[j], pos[j] = kindAudio, int64(j-len(text)-2)
				}
			}
			row := func(v []int64) *torch.Tensor { return torch.FromSlice(v, []int64{1, int64(len(v))}) }
			full := m.GPT.AudioHead.Forward(m.GPT.Forward(lat, m.GPT.Embed(row(ids), row(kind), row(pos)), nil))
			caches := make([]kvCache, g.Layers)
			defer func() {
				for i := range caches {
					caches[i].free()
				}
			}()
			p := len(text) + 3 // the prompt: text start … audio start
			h := m.GPT.Forward(lat, m.GPT.Embed(row(ids[:p]), row(kind[:p]), row(pos[:p])), caches)
			got := []*torch.Tensor{m.GPT.AudioHead.Forward(h)}
			for j := p; j < len(ids); j++ {
				h := m.GPT.Forward(nil, m.GPT.Embed(row(ids[j:j+1]), row(kind[j:j+1]), row(pos[j:j+1])), caches)
				got = append(got, m.GPT.AudioHead.Forward(h))
			}
			inc := torch.Cat(got, 1)
			require.Equal(t, full.Shape(), inc.Shape())
			diff := full.Sub(inc).Abs().Max().Item()
			t.Logf("largest difference between cached and full logits: %.3g", diff)
			require.Less(t, diff, 1e-5)
			require.Equal(t, int64(len(ids))+g.CondLatents, caches[0].k.Size(2), "the cache holds every position")
		})
	})
}

// gptPyScript recomputes Model.Losses in PyTorch from the state dict and
// batch Go saved, and returns the losses and the gradients.
const gptPyScript = `
import torch.nn.functional as F
d = torch.load(inp['file'])
sd, b, cfg = d['state'], d['batch'], json.loads(d['cfg'])
P = {k: v.detach().clone().requires_grad_(not k.startswith('codec.')) for k, v in sd.items()}
def conv(x, p, stride=1, pad=0):
    return F.conv1d(x, P[p + '.weight'], P[p + '.bias'], stride=stride, padding=pad)
def res(x, p):
    return x + conv(F.relu(conv(F.relu(x), p + '.conv1', pad=1)), p + '.conv2')
def l2n(x):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)
mel, cond, ids, kind, pos, cidx, tk = (b[k] for k in ['mel', 'cond', 'ids', 'kind', 'pos', 'code_idx', 'tk'])
cc, g = cfg['codec'], cfg['gpt']
with torch.no_grad():
    x = conv(mel.transpose(1, 2), 'codec.enc_in', pad=1)
    for i in range(cc['res_depth']):
        x = res(x, 'codec.enc_pre.%d' % i)
    x = conv(F.relu(x), 'codec.enc_down', stride=2, pad=1)
    for i in range(cc['res_depth']):
        x = res(x, 'codec.enc_post.%d' % i)
    z = l2n(conv(F.relu(x), 'codec.enc_out').transpose(1, 2))
    codes = (z @ l2n(P['codec.codebook']).T).argmax(-1)
filled = torch.where(cidx >= 0, codes.gather(1, cidx.clamp_min(0)), ids)
D, H = g['decoder_dim'], g['heads']
x = F.gelu(conv(cond.transpose(1, 2), 'gpt.cond.conv1', pad=1))
x = F.gelu(conv(x, 'gpt.cond.conv2', stride=2, pad=1).transpose(1, 2))  # GELU after the transpose: see CondEncoder.Forward
T2 = x.shape[1]
valid = [min((min(l, cond.shape[1]) + 1) // 2, T2) for l in b['cond_lens'].tolist()]
mask = torch.arange(T2).unsqueeze(0) >= torch.tensor(valid).unsqueeze(1)
layer = torch.nn.TransformerEncoderLayer(D, H, g['ff'], dropout=0.0, activation='gelu', batch_first=True, norm_first=True)
mha = torch.nn.MultiheadAttention(D, H, batch_first=True)
for mod, prefix in [(layer, 'gpt.cond.layer.'), (mha, 'gpt.cond.attn.')]:
    for name, prm in mod.named_parameters():
        setattr_path = name.split('.')
        owner = mod
        for part in setattr_path[:-1]:
            owner = getattr(owner, part)
        owner._parameters[setattr_path[-1]] = P[prefix + name]
x = layer(x, src_key_padding_mask=mask)
q = P['gpt.cond.latents'].unsqueeze(0).expand(x.shape[0], -1, -1)
out = mha(q, x, x, key_padding_mask=mask, need_weights=False)[0]
lat = F.layer_norm(out + q, (D,), P['gpt.cond.norm.weight'], P['gpt.cond.norm.bias'])
audio = kind == 2
zero = torch.zeros_like(ids)
te = F.embedding(torch.where(audio, zero, filled), P['gpt.text_embed.weight'])
if 'gpt.text_proj.weight' in P:
    te = te @ P['gpt.text_proj.weight'].T
te = te + F.embedding(torch.where(audio, zero, pos), P['gpt.text_pos.weight'])
ae = F.embedding(torch.where(audio, filled, zero), P['gpt.audio_embed.weight']) + F.embedding(torch.where(audio, pos, zero), P['gpt.audio_pos.weight'])
x = torch.cat([lat, torch.where(audio.unsqueeze(-1), ae, te)], 1)
B, L = x.shape[0], x.shape[1]
dh = D // H
for i in range(g['layers']):
    p = 'gpt.blocks.%d.' % i
    h = F.layer_norm(x, (D,), P[p + 'ln1.weight'], P[p + 'ln1.bias'])
    qkv = F.linear(h, P[p + 'qkv.weight'], P[p + 'qkv.bias']).view(B, L, 3, H, dh).permute(2, 0, 3, 1, 4)
    s = qkv[0] @ qkv[1].transpose(-2, -1) / math.sqrt(dh)
    s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float('-inf'))
    y = (s.softmax(-1) @ qkv[2]).transpose(1, 2).reshape(B, L, D)
    x = x + F.linear(y, P[p + 'proj.weight'], P[p + 'proj.bias'])
    h = F.layer_norm(x, (D,), P[p + 'ln2.weight'], P[p + 'ln2.bias'])
    x = x + F.linear(F.gelu(F.linear(h, P[p + 'fc1.weight'], P[p + 'fc1.bias'])), P[p + 'fc2.weight'], P[p + 'fc2.bias'])
x = F.layer_norm(x, (D,), P['gpt.ln_f.weight'], P['gpt.ln_f.bias'])
N, Lt = g['cond_latents'], ids.shape[1]
hp = x[:, N:N + Lt - 1]
tgt, t1 = filled[:, 1:], tk[:, 1:]
ign = torch.full_like(tgt, -100)
textT = torch.where(t1 == 1, tgt, ign).reshape(-1)
codeT = torch.where(t1 == 2, tgt, ign).reshape(-1)
tl = F.cross_entropy(F.linear(hp, P['gpt.text_head.weight'], P['gpt.text_head.bias']).reshape(-1, g['vocab'] + 2), textT, reduction='sum')
cl = F.cross_entropy(F.linear(hp, P['gpt.audio_head.weight'], P['gpt.audio_head.bias']).reshape(-1, g['codes'] + 2), codeT, reduction='sum')
total = (tl * g['text_weight'] * g['text_ratio'] + cl * g['code_weight']) / (t1 == 2).sum().clamp_min(1)
total.backward()
grads = {k: v.grad.flatten().tolist() for k, v in P.items() if v.grad is not None}
emit({'total': total.item(), 'text': tl.item(), 'code': cl.item(), 'codes': codes.flatten().tolist(), 'grads': grads})
`

// TestLossesMatchPython: the frozen codec's codes, the speaker latents,
// the sequence embedding, the causal blocks, both heads and XTTS's loss
// weighting equal a PyTorch re-implementation from the same weights and
// batch, as do the gradients of every GPT parameter (and the codec gets
// none).
func TestLossesMatchPython(t *testing.T) {
	m := newTinyModel(t, 12)
	defer nn.Free(m)
	m.GPT.Cfg.TextRatio = 2.5
	samples := randomSamples(3, 12, 2)
	b, err := Collate(m.GPT.Cfg)(samples)
	require.NoError(t, err)
	defer b.Free()
	nn.SetTraining(m, true)
	var total, text, code float64
	var codes []int64
	torch.Tidy(func() {
		l := m.Losses(b)
		total, text, code = l.Total.Item(), l.TextSum.Item(), l.CodeSum.Item()
		torch.NoGrad(func() { codes = m.Codec.Encode(b.Fields["mel"]).Int64s() })
		l.Total.Backward()
	})
	file := filepath.Join(t.TempDir(), "state.pt")
	state := ptfile.NewDict()
	state.Ordered = true
	for _, p := range nn.StateDict(m) {
		state.Set(p.Name, p.T)
	}
	batch := ptfile.NewDict("cond_lens", b.Lengths["cond"])
	for k, v := range b.Fields {
		batch.Set(k, v)
	}
	cfg, _ := json.Marshal(map[string]any{"codec": m.Codec.Cfg, "gpt": m.GPT.Cfg})
	require.NoError(t, ptfile.Save(file, ptfile.NewDict("state", state, "batch", batch, "cfg", string(cfg))))
	var want struct {
		Total, Text, Code float64
		Codes             []int64
		Grads             map[string][]float32
	}
	pyref.Run(t, gptPyScript, map[string]any{"file": file}, &want)
	require.Equal(t, want.Codes, codes, "the codec's codes")
	require.InEpsilon(t, want.Text, text, 1e-5)
	require.InEpsilon(t, want.Code, code, 1e-5)
	require.InEpsilon(t, want.Total, total, 1e-5)
	t.Logf("loss %.6f (Python %.6f): text CE sum %.4f, code CE sum %.4f", total, want.Total, text, code)
	n := 0
	for _, p := range nn.Parameters(m) {
		g := p.T.Grad()
		w, ok := want.Grads[p.Name]
		if !p.T.RequiresGrad() {
			require.False(t, ok, "%s: the frozen codec gets no gradient in Python either", p.Name)
			require.Nil(t, g, "%s: frozen", p.Name)
			continue
		}
		require.True(t, ok, p.Name)
		require.NotNil(t, g, p.Name)
		got := g.Float32s()
		var worst, scale float64
		for i := range got {
			worst = math.Max(worst, math.Abs(float64(got[i]-w[i])))
			scale = math.Max(scale, math.Abs(float64(w[i])))
		}
		require.LessOrEqual(t, worst, 1e-4*math.Max(scale, 1e-3), "%s: gradient differs by %.3g (scale %.3g)", p.Name, worst, scale)
		n++
	}
	require.Greater(t, n, 30)
	for _, s := range samples {
		for _, x := range s {
			x.Free()
		}
	}
}

// TestCheckpointingSameGradientsLessMemory: per-block checkpointing
// gives the same loss and gradients (dropout included: the recomputation
// replays the forward's random state) and holds less memory between
// forward and backward.
func TestCheckpointingSameGradientsLessMemory(t *testing.T) {
	g := tinyGPTConfig(12)
	g.Layers, g.DecoderDim, g.FF, g.Dropout = 4, 64, 256, 0.1
	samples := randomSamples(4, 12, 3)
	defer func() {
		for _, s := range samples {
			for _, x := range s {
				x.Free()
			}
		}
	}()
	b, err := Collate(g)(samples)
	require.NoError(t, err)
	defer b.Free()
	run := func(ckpt bool) (loss float64, grads map[string][]float32, held int64) {
		torch.ManualSeed(5)
		gc := g
		gc.GradCheckpointing = ckpt
		m, err := NewModel(tinyCodecConfig(), gc)
		require.NoError(t, err)
		defer nn.Free(m)
		nn.SetTraining(m, true)
		torch.ManualSeed(9)
		base := torch.MustMemoryStats(torch.CPU).Allocated
		torch.Tidy(func() {
			l := m.Loss(b)
			held = torch.MustMemoryStats(torch.CPU).Allocated - base
			loss = l.Item()
			l.Backward()
		})
		grads = map[string][]float32{}
		for _, p := range nn.Parameters(m.GPT) {
			grads[p.Name] = p.T.Grad().Float32s()
		}
		return loss, grads, held
	}
	l0, g0, h0 := run(false)
	l1, g1, h1 := run(true)
	t.Logf("memory held between forward and backward: %s plain, %s checkpointed", torch.FormatBytes(h0), torch.FormatBytes(h1))
	require.Equal(t, l0, l1)
	for k, v := range g0 {
		require.InDeltaSlice(t, v, g1[k], 1e-5, k)
	}
	require.Less(t, h1, h0*3/4)
}

// TestCodeRestartMovesUnusedCodes: unused codebook entries are moved onto
// recent encoder outputs, in the codebook itself (an out-of-place
// index_put left the codebook unchanged: the fault this test was written
// for), and used ones stay.
func TestCodeRestartMovesUnusedCodes(t *testing.T) {
	torch.ManualSeed(1)
	c, err := NewCodec(tinyCodecConfig())
	require.NoError(t, err)
	defer nn.Free(c)
	u := newCodeUsage(c.Cfg.Codes)
	defer u.free()
	before := c.Codebook.Float32s()
	torch.Tidy(func() {
		l := c.Loss(torch.Randn([]int64{2, 16, NMels}))
		u.observe(l.Codes, l.Z)
	})
	used := map[int]bool{}
	for k, n := range u.counts {
		used[k] = n > 0
	}
	moved := u.restart(c)
	require.Equal(t, int(c.Cfg.Codes)-len(filter(used)), moved)
	require.Greater(t, moved, 0)
	after := c.Codebook.Float32s()
	d := int(c.Cfg.CodeDim)
	for k := range int(c.Cfg.Codes) {
		if used[k] {
			require.Equal(t, before[k*d:(k+1)*d], after[k*d:(k+1)*d], "code %d was used: it stays", k)
		} else {
			require.NotEqual(t, before[k*d:(k+1)*d], after[k*d:(k+1)*d], "code %d was unused: it moves", k)
		}
	}
	require.Equal(t, int(c.Cfg.Codes), u.restart(c), "counts were reset: every code is unused again")
}

func filter(m map[int]bool) []int {
	var out []int
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	return out
}

// With aligned positions, code j starts as phoneme j/TextRatio: at a
// ratio of 3, code 3k's position embedding is phoneme k's, and without
// them both streams start as N(0, 0.02).
func TestAlignedPositions(t *testing.T) {
	for _, aligned := range []bool{true, false} {
		cfg := DefaultGPTConfig()
		cfg.DecoderDim, cfg.TextEncoderDim, cfg.Layers, cfg.Heads, cfg.FF, cfg.CondLatents = 16, 8, 1, 2, 32, 2
		cfg.Vocab, cfg.Codes, cfg.MaxText, cfg.MaxCodes, cfg.TextRatio, cfg.AlignedPositions = 10, 8, 20, 60, 3, aligned
		g, err := NewGPT(cfg)
		require.NoError(t, err)
		tp, ap := g.TextPos.Weight.Float32s(), g.AudioPos.Weight.Float32s()
		d := int(cfg.DecoderDim)
		for k := range 20 {
			text, audio := tp[k*d:(k+1)*d], ap[3*k*d:(3*k+1)*d]
			if aligned {
				require.InDeltaSlice(t, text, audio, 1e-6, "phoneme %d", k)
				require.InDelta(t, 0.02*math.Sqrt2*math.Cos(float64(k)), float64(text[1]), 1e-6, "the slowest… fastest wavelength 2π: cos k")
			} else if k > 0 {
				require.NotEqual(t, text, audio)
			}
		}
		nn.Free(g)
	}
}
