package mamba

import (
	"fmt"
	"math"
	"strings"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
)

// ModelConfig is the seed's "model" section plus Mamba's fixed choices.
type ModelConfig struct {
	DModel    int64   `json:"d_model"`
	NLayers   int     `json:"n_layers"`
	DState    int64   `json:"d_state"`
	Expand    int64   `json:"expand_factor"`
	Dropout   float64 `json:"dropout"`
	MaxSeqLen int     `json:"max_seq_len"`
	VocabSize int64   `json:"vocab_size"`
	// DConv is the causal convolution's kernel (mamba-ssm's d_conv, 4).
	DConv int64 `json:"d_conv"`
	// DtRank is Δ's rank (0: ⌈d_model/16⌉, mamba-ssm's "auto").
	DtRank int64 `json:"dt_rank"`
	// PadVocabMultiple pads the embedding's rows to a multiple of it
	// (mamba-ssm's pad_vocab_size_multiple, 8): 50257 → 50264.
	PadVocabMultiple int64 `json:"pad_vocab_size_multiple"`
	// NormEps is the RMSNorms' epsilon (mamba-ssm's norm_epsilon, 1e-5).
	NormEps float64 `json:"norm_epsilon"`
}

// withDefaults fills Mamba's fixed choices left at zero.
func (c ModelConfig) withDefaults() ModelConfig {
	if c.DConv == 0 {
		c.DConv = 4
	}
	if c.DtRank == 0 {
		c.DtRank = (c.DModel + 15) / 16
	}
	if c.PadVocabMultiple == 0 {
		c.PadVocabMultiple = 8
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	if c.Expand == 0 {
		c.Expand = 2
	}
	return c
}

// DInner is the mixer's width, expand_factor × d_model.
func (c ModelConfig) DInner() int64 { return c.Expand * c.DModel }

// PaddedVocab is the embedding's rows: vocab_size rounded up to a multiple
// of PadVocabMultiple.
func (c ModelConfig) PaddedVocab() int64 {
	m := max(c.PadVocabMultiple, 1)
	return (c.VocabSize + m - 1) / m * m
}

// Limits on a model's sizes (far above the presets and mamba-ssm's
// released models: d_model 2560, 64 layers, d_state 16), checked before
// anything is allocated: a config file, a flag or a checkpoint's
// description is untrusted.
const (
	MaxDModel   = 1 << 13 // d_model and dt_rank
	MaxLayers   = 1 << 8
	MaxDState   = 1 << 10
	MaxExpand   = 1 << 4
	MaxDInner   = 1 << 16 // expand_factor × d_model, the mixer's width
	MaxDConv    = 1 << 6
	MaxVocab    = 1 << 20
	MaxSeqLimit = 1 << 20 // max_seq_len, the longest sequence the model is meant for
	MaxPadding  = 1 << 12 // pad_vocab_size_multiple
)

// Validate checks the sizes (the caller names the flag or key): each in
// its range, so that nothing absurd is allocated.
func (c ModelConfig) Validate() error {
	for _, b := range []struct {
		name      string
		v, lo, hi int64
	}{
		{"d_model", c.DModel, 1, MaxDModel},
		{"n_layers", int64(c.NLayers), 1, MaxLayers},
		{"d_state", c.DState, 1, MaxDState},
		{"expand_factor", c.Expand, 1, MaxExpand},
		{"vocab_size", c.VocabSize, 2, MaxVocab},
		{"max_seq_len", int64(c.MaxSeqLen), 0, MaxSeqLimit},
		{"d_conv", c.DConv, 1, MaxDConv},
		{"dt_rank", c.DtRank, 1, MaxDModel},
		{"pad_vocab_size_multiple", c.PadVocabMultiple, 0, MaxPadding},
	} {
		if b.v < b.lo || b.v > b.hi {
			return fmt.Errorf("%s %d: must be in [%d, %d]", b.name, b.v, b.lo, b.hi)
		}
	}
	if e := c.DInner(); e > MaxDInner {
		return fmt.Errorf("expand_factor %d × d_model %d = %d: the mixer's width must be at most %d", c.Expand, c.DModel, e, MaxDInner)
	}
	if c.Dropout < 0 || c.Dropout >= 1 || math.IsNaN(c.Dropout) {
		return fmt.Errorf("dropout %v: must be in [0, 1)", c.Dropout)
	}
	if !(c.NormEps >= 0) || math.IsInf(c.NormEps, 0) {
		return fmt.Errorf("norm_epsilon %v: must be a finite number >= 0", c.NormEps)
	}
	return nil
}

// Mixer is mamba-ssm's Mamba block (mamba_simple.Mamba): in_proj to x and
// z, a causal depthwise conv1d on x, x_proj to (Δ's low rank, B, C),
// dt_proj with softplus, the selective scan with A = −exp(A_log) and D,
// gated by silu(z), out_proj. Parameters carry mamba-ssm's names.
type Mixer struct {
	nn.Base
	InProj  *nn.Linear
	Conv1d  *nn.Conv
	XProj   *nn.Linear
	DtProj  *nn.Linear
	ALog    *torch.Tensor
	D       *torch.Tensor
	OutProj *nn.Linear
	cfg     ModelConfig
}

// NewMixer builds a mixer initialised as mamba-ssm does: Δ's bias the
// inverse softplus of Δ drawn log-uniformly in [0.001, 0.1] (floored at
// 1e-4), dt_proj's weight U(±dt_rank^-½), A_log = log(1..d_state) per
// channel (S4D-real), D = 1; out_proj rescaled by 1/√n_layers.
func NewMixer(c ModelConfig) *Mixer {
	c = c.withDefaults()
	e := c.DInner()
	m := &Mixer{cfg: c}
	m.InProj = nn.RegisterModule(&m.Base, "in_proj", nn.NewLinear(c.DModel, 2*e, false))
	m.Conv1d = nn.RegisterModule(&m.Base, "conv1d", nn.NewConv1d(e, e, c.DConv, torch.ConvOpts{Padding: []int64{c.DConv - 1}, Groups: e}, true))
	m.XProj = nn.RegisterModule(&m.Base, "x_proj", nn.NewLinear(e, c.DtRank+2*c.DState, false))
	m.DtProj = nn.RegisterModule(&m.Base, "dt_proj", nn.NewLinear(c.DtRank, e, true))
	torch.NoGrad(func() {
		torch.Tidy(func() { // the temporaries freed here, not by a later GC
			std := 1 / math.Sqrt(float64(c.DtRank))
			nn.Uniform(m.DtProj.Weight, -std, std)
			const dtMin, dtMax, floor = 0.001, 0.1, 1e-4
			dt := torch.Rand([]int64{e}).MulScalar(math.Log(dtMax) - math.Log(dtMin)).AddScalar(math.Log(dtMin)).Exp().ClampMin(floor)
			// inverse softplus: dt + log(−expm1(−dt))
			inv := dt.Add(dt.Neg().Exp().RSubScalar(1).Log())
			m.DtProj.Bias.CopyFrom(inv)
		})
	})
	aLog := torch.TidyTensor(func() *torch.Tensor {
		return torch.Arange(1, float64(c.DState)+1, 1, torch.Float32).Log().Unsqueeze(0).Repeat(e, 1).Contiguous()
	})
	m.ALog = m.RegisterParam("A_log", aLog)
	m.D = m.RegisterParam("D", torch.Ones([]int64{e}))
	m.OutProj = nn.RegisterModule(&m.Base, "out_proj", nn.NewLinear(e, c.DModel, false))
	torch.NoGrad(func() { m.OutProj.Weight.MulScalarIn(1 / math.Sqrt(float64(c.NLayers))) })
	return m
}

// MixerState is one layer's recurrent state for generation: the last
// d_conv inputs of the convolution (batch, d_inner, d_conv) and the scan's
// state (batch, d_inner, d_state).
type MixerState struct {
	Conv, SSM *torch.Tensor
}

// Free releases the state.
func (s *MixerState) Free() {
	s.Conv.Free()
	s.SSM.Free()
}

// Forward maps (batch, length, d_model) to the same with the scan s. With
// state non-nil it also fills the state after the last position (for
// generation to go on from).
func (m *Mixer) Forward(h *torch.Tensor, s scan.Scan, state *MixerState) *torch.Tensor {
	c := m.cfg
	e, l := c.DInner(), h.Size(1)
	xz := m.InProj.Forward(h) // (b, l, 2e)
	xs := xz.Split([]int64{e, e}, -1)
	x, z := xs[0], xs[1]
	xt := x.Transpose(1, 2) // (b, e, l)
	if state != nil {
		// The convolution's inputs for the next step: the last d_conv
		// positions, zero-padded on the left when the prompt is shorter.
		state.Conv = xt.Pad([]int64{max(c.DConv-l, 0), 0}, 0).Narrow(2, max(l-c.DConv, 0), c.DConv).Detach().Contiguous()
	}
	conv := m.Conv1d.Forward(xt) // (b, e, l + d_conv − 1)
	xt.Free()
	cv := conv.Narrow(2, 0, l).Transpose(1, 2) // (b, l, e)
	conv.Free()
	xc := cv.Silu()
	cv.Free()
	dbl := m.XProj.Forward(xc) // (b, l, r + 2n)
	parts := dbl.Split([]int64{c.DtRank, c.DState, c.DState}, -1)
	dtl, B, C := parts[0], parts[1], parts[2]
	dt := m.DtProj.Forward(dtl)
	delta := dt.Softplus(1, 20)
	dt.Free()
	A := m.ALog.Exp().Neg()
	y, last := s.Apply(xc, delta, A, B, C, m.D)
	if state != nil {
		state.SSM = last
	} else {
		last.Free()
	}
	xc.Free()
	delta.Free()
	gz := z.Silu()
	g := y.Mul(gz)
	y.Free()
	gz.Free()
	out := m.OutProj.Forward(g)
	g.Free()
	return out
}

// Step advances one token: h (batch, d_model) with the layer's state,
// updated in place; O(1) in the length of what came before.
func (m *Mixer) Step(h *torch.Tensor, st *MixerState) *torch.Tensor {
	c := m.cfg
	e := c.DInner()
	return torch.TidyTensor(func() *torch.Tensor {
		xz := m.InProj.Forward(h) // (b, 2e)
		xs := xz.Split([]int64{e, e}, -1)
		x, z := xs[0], xs[1]
		conv := torch.Cat([]*torch.Tensor{st.Conv.Narrow(2, 1, c.DConv-1), x.Unsqueeze(-1)}, 2) // (b, e, d_conv)
		st.Conv.Assign(conv.Keep())
		w := m.Conv1d.Weight.SqueezeDim(1) // (e, d_conv)
		xc := st.Conv.Mul(w).SumDim([]int64{-1}, false).Add(m.Conv1d.Bias).Silu()
		dbl := m.XProj.Forward(xc)
		parts := dbl.Split([]int64{c.DtRank, c.DState, c.DState}, -1)
		delta := m.DtProj.Forward(parts[0]).Softplus(1, 20)
		A := m.ALog.Exp().Neg()
		y, next := scan.Step(st.SSM, xc, delta, A, parts[1], parts[2], m.D)
		st.SSM.Assign(next.Keep())
		return m.OutProj.Forward(y.Mul(z.Silu()))
	})
}

// Block is mamba-ssm's Block: an RMSNorm before the mixer, the residual
// stream added before the norm (residual_in_fp32: the stream stays float32
// under autocast).
type Block struct {
	nn.Base
	Mixer   *Mixer
	Norm    *nn.RMSNorm
	dropout float64
}

// NewBlock builds a block.
func NewBlock(c ModelConfig) *Block {
	c = c.withDefaults()
	b := &Block{dropout: c.Dropout}
	b.Mixer = nn.RegisterModule(&b.Base, "mixer", NewMixer(c))
	b.Norm = nn.RegisterModule(&b.Base, "norm", nn.NewRMSNorm(c.DModel))
	b.Norm.Eps = c.NormEps
	return b
}

// Forward takes the mixer's last output h and the residual stream (nil
// before the first block) and returns the block's output and the new
// stream.
func (b *Block) Forward(h, residual *torch.Tensor, s scan.Scan, state *MixerState) (out, res *torch.Tensor) {
	if residual == nil {
		res = h.ToDType(torch.Float32)
	} else {
		res = residual.Add(h)
	}
	n := b.Norm.Forward(res)
	out = b.Mixer.Forward(n, s, state)
	n.Free()
	if b.dropout > 0 && b.Training() {
		d := nn.ApplyDropout(out, b.dropout, true)
		out.Free()
		out = d
	}
	return out, res
}

// Backbone is MambaLMHeadModel's backbone: embedding, layers, norm_f.
type Backbone struct {
	nn.Base
	Embedding *nn.Embedding
	Layers    *nn.ModuleList[*Block]
	NormF     *nn.RMSNorm
}

// LM is mamba-ssm's MambaLMHeadModel: the backbone and an LM head tied to
// the embedding. State-dict names: backbone.embedding.weight,
// backbone.layers.N.mixer.{in_proj,conv1d,x_proj,dt_proj,out_proj}...,
// backbone.layers.N.mixer.A_log, .D, backbone.layers.N.norm.weight,
// backbone.norm_f.weight, lm_head.weight (the embedding's tensor).
type LM struct {
	nn.Base
	Backbone *Backbone
	LMHead   *lmHead
	Config   ModelConfig
	// Scan is the selective scan the mixers use (default: Fused).
	Scan scan.Scan
	// Checkpointing recomputes each block in backward (per-block
	// activation checkpointing).
	Checkpointing bool
}

type lmHead struct {
	nn.Base
	Weight *torch.Tensor
}

// NewLM builds a model initialised as MambaLMHeadModel: embedding N(0,
// 0.02²), Linear biases zero except dt_proj's, out_proj rescaled.
func NewLM(c ModelConfig) (*LM, error) {
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &LM{Config: c, Scan: scan.Fused(scan.DefaultChunk)}
	bb := &Backbone{}
	bb.Embedding = nn.RegisterModule(&bb.Base, "embedding", nn.NewEmbedding(c.PaddedVocab(), c.DModel))
	torch.NoGrad(func() { nn.Normal(bb.Embedding.Weight, 0, 0.02) })
	blocks := make([]*Block, c.NLayers)
	for i := range blocks {
		blocks[i] = NewBlock(c)
	}
	bb.Layers = nn.RegisterModule(&bb.Base, "layers", nn.NewModuleList(blocks...))
	bb.NormF = nn.RegisterModule(&bb.Base, "norm_f", nn.NewRMSNorm(c.DModel))
	bb.NormF.Eps = c.NormEps
	m.Backbone = nn.RegisterModule(&m.Base, "backbone", bb)
	head := &lmHead{}
	head.Weight = head.RegisterParam("weight", bb.Embedding.Weight) // tied: the same tensor
	m.LMHead = nn.RegisterModule(&m.Base, "lm_head", head)
	return m, nil
}

// FromHF renames a state dict of Hugging Face transformers'
// MambaForCausalLM (MambaModel under backbone.) to this model's names,
// mamba-ssm's: transformers calls the embedding backbone.embeddings, every
// other name (backbone.layers.N.norm, .mixer.in_proj, conv1d, x_proj,
// dt_proj, A_log, D, out_proj, backbone.norm_f, the tied lm_head) is the
// same. The tensors are not copied. transformers' MambaConfig maps as
// hidden_size → d_model, state_size → d_state, expand → expand_factor,
// conv_kernel → d_conv, time_step_rank → dt_rank ("auto" is ⌈d_model/16⌉
// in both), layer_norm_epsilon → norm_epsilon; its vocab_size is the
// embedding's rows (a multiple of pad_vocab_size_multiple loads here
// unchanged). use_bias (in_proj and out_proj biases) has no counterpart
// here: such a state dict has keys this model lacks and a strict load
// refuses it.
func FromHF(sd torch.StateDict) torch.StateDict {
	out := make(torch.StateDict, len(sd))
	for k, p := range sd {
		if rest, ok := strings.CutPrefix(p.Name, "backbone.embeddings."); ok {
			p.Name = "backbone.embedding." + rest
		}
		out[k] = p
	}
	return out
}

// Hidden returns the final normalised hidden states (batch, length,
// d_model) of token ids (batch, length); states, when not nil, receives
// each layer's recurrent state after the last position.
func (m *LM) Hidden(ids *torch.Tensor, states []*MixerState) *torch.Tensor {
	bb := m.Backbone
	h := bb.Embedding.Forward(ids)
	var res *torch.Tensor
	for i, blk := range bb.Layers.Items {
		var st *MixerState
		if states != nil {
			st = states[i]
		}
		var out, nres *torch.Tensor
		if m.Checkpointing && st == nil && torch.GradEnabled() {
			in := []*torch.Tensor{h}
			if res != nil {
				in = append(in, res)
			}
			outs := torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
				var r *torch.Tensor
				if len(in) > 1 {
					r = in[1]
				}
				o, nr := blk.Forward(in[0], r, m.Scan, nil)
				return []*torch.Tensor{o, nr}
			}, in...)
			out, nres = outs[0], outs[1]
		} else {
			out, nres = blk.Forward(h, res, m.Scan, st)
		}
		h.Free()
		res.Free()
		h, res = out, nres
	}
	final := res.Add(h)
	h.Free()
	res.Free()
	out := bb.NormF.Forward(final)
	final.Free()
	return out
}

// Forward returns logits (batch, length, padded vocab).
func (m *LM) Forward(ids *torch.Tensor) *torch.Tensor {
	h := m.Hidden(ids, nil)
	logits := torch.Linear(h, m.LMHead.Weight, nil)
	h.Free()
	return logits
}

// Loss is the mean cross-entropy (label smoothing ls) of next-token
// targets (batch, length) given inputs ids (batch, length), through
// HeadLoss: the logits (batch·length × vocab, 200 MB for 1024 tokens of
// GPT-2's vocabulary in float32) never exist whole.
func (m *LM) Loss(ids, targets *torch.Tensor, ls float64) *torch.Tensor {
	h := m.Hidden(ids, nil)
	flat := h.View(-1, h.Size(-1))
	h.Free()
	t := targets.View(-1)
	loss := HeadLoss(flat, m.LMHead.Weight, t, ls, 0)
	flat.Free()
	t.Free()
	return loss
}

// headChunkElems bounds one chunk's logits in HeadLoss (4 Mi values: 16
// MiB in float32, under glibc's largest mmap threshold, so chunks reuse
// heap memory instead of faulting in fresh pages each step).
const headChunkElems = 4 << 20

// HeadLoss is the mean cross-entropy, with label smoothing ls, of logits
// h·Wᵀ (h: tokens × d, W: classes × d) against targets (tokens), computed
// chunk by chunk (chunk tokens at a time; 0: HeadChunkElems / classes).
// Under grad the gradients are made in the same pass, per chunk, from
// the softmax (∂loss/∂logits = softmax − (1−ls)·onehot − ls/classes, over
// tokens), as ∂/∂h = G·W and ∂/∂W = Gᵀ·h, and handed to autograd through a
// surrogate whose gradient they are: backward does no work here, and the
// largest tensor alive is one chunk's logits (a fused linear
// cross-entropy, as Liger's kernel).
func HeadLoss(h, W, targets *torch.Tensor, ls float64, chunk int64) *torch.Tensor {
	tokens, classes := h.Size(0), W.Size(0)
	if chunk <= 0 {
		chunk = max(1, headChunkElems/classes)
	}
	grad := torch.GradEnabled() && (h.RequiresGrad() || W.RequiresGrad())
	var gh, gW *torch.Tensor
	sum := torch.Zeros([]int64{}, torch.Float64, h.Device())
	torch.NoGrad(func() {
		if grad {
			gh = torch.ZerosLike(h, torch.Float32)
			if h.DType() == torch.Float64 {
				gh = torch.ZerosLike(h)
			}
			gW = torch.ZerosLike(W)
		}
		for c := int64(0); c < tokens; c += chunk {
			n := min(chunk, tokens-c)
			torch.Tidy(func() {
				hc, tc := h.Narrow(0, c, n), targets.Narrow(0, c, n).Unsqueeze(1)
				logits := torch.Linear(hc, W, nil)
				if logits.DType() != torch.Float64 && logits.DType() != torch.Float32 {
					logits = logits.ToDType(torch.Float32)
				}
				lse := logits.Logsumexp([]int64{-1}, true)
				nll := lse.Sub(logits.Gather(1, tc)).Sum()
				loss := nll.MulScalar(1 - ls)
				if ls > 0 {
					// smoothing: the mean over classes of −log p
					loss = loss.Add(lse.SumDim([]int64{0, 1}, false).MulScalar(ls).Sub(logits.Sum().MulScalar(ls / float64(classes))))
				}
				sum.AddIn(loss.ToDType(torch.Float64), 1)
				if !grad {
					return
				}
				G := logits.Sub(lse).Exp() // softmax
				torch.CallOp("aten::scatter_add_", "", G, int64(1), tc, torch.FullLike(tc, -(1-ls), G.DType()))
				if ls > 0 {
					G.AddScalarIn(-ls / float64(classes))
				}
				G.DivScalarIn(float64(tokens))
				Gw := G.ToDType(W.DType())
				gh.Narrow(0, c, n).CopyFrom(Gw.Mm(W))
				torch.CallOp("aten::addmm_", "", gW, Gw.T(), hc.ToDType(W.DType()))
			})
		}
	})
	loss := sum.DivScalar(float64(tokens)).ToDType(lossDType(h))
	sum.Free()
	if !grad {
		return loss
	}
	// loss + s − s.detach(): the value is the loss, the gradient s's.
	s := h.Mul(gh.ToDType(h.DType())).Sum().Add(W.Mul(gW).Sum())
	gh.Free()
	gW.Free()
	sd := s.Detach()
	out := loss.Add(s).Sub(sd)
	loss.Free()
	s.Free()
	sd.Free()
	return out
}

// lossDType is float64 for float64 inputs, else float32.
func lossDType(h *torch.Tensor) torch.DType {
	if h.DType() == torch.Float64 {
		return torch.Float64
	}
	return torch.Float32
}

// NewStates returns zero recurrent states for batch sequences.
func (m *LM) NewStates() []*MixerState {
	out := make([]*MixerState, m.Config.NLayers)
	for i := range out {
		out[i] = &MixerState{}
	}
	return out
}

// StepLogits advances every layer by one token (ids: batch) and returns
// the next token's logits (batch, padded vocab).
func (m *LM) StepLogits(ids *torch.Tensor, states []*MixerState) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		bb := m.Backbone
		h := bb.Embedding.Forward(ids) // (b, d)
		var res *torch.Tensor
		for i, blk := range bb.Layers.Items {
			if res == nil {
				res = h.ToDType(torch.Float32)
			} else {
				res = res.Add(h)
			}
			h = blk.Mixer.Step(blk.Norm.Forward(res), states[i])
		}
		return torch.Linear(bb.NormF.Forward(res.Add(h)), m.LMHead.Weight, nil)
	})
}
