package asr

import (
	"fmt"
	"math"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// ModelConfig sizes a Conformer encoder–decoder (see Preset).
type ModelConfig struct {
	DModel        int64
	Heads         int64
	EncoderLayers int
	DecoderLayers int
	// FFDim is the hidden size of the conformer blocks' (macaron)
	// feed-forward modules; DecoderFFDim that of the transformer decoder
	// layers (0: FFDim).
	FFDim, DecoderFFDim int64
	// ConvKernel is the depthwise convolution's kernel (odd: 15 or 31).
	ConvKernel     int64
	Dropout        float64
	Vocab          int64 // output classes, specials included (Vocab.Size())
	NumMels        int64 // feature bins (80)
	CTCWeight      float64
	LabelSmoothing float64
	// GradCheckpointing runs each conformer block under torch.Recompute in
	// training: its activations are recomputed in backward instead of kept.
	// The block's batch norm would update its running statistics (and
	// num_batches_tracked) a second time during the recomputation; the
	// re-run instead normalises with the batch statistics without touching
	// the running ones, so checkpointed and plain training leave identical
	// statistics and gradients (the tests check both).
	GradCheckpointing bool
	// MaxLen bounds the sinusoidal tables: subsampled frames for the
	// encoder, tokens + 1 for the decoder (0: 5000).
	MaxLen int64
}

// Validate checks the configuration.
func (c ModelConfig) Validate() error {
	switch {
	case c.DModel <= 0 || c.DModel%2 != 0:
		return fmt.Errorf("asr: d_model %d must be positive and even", c.DModel)
	case c.Heads <= 0 || c.DModel%c.Heads != 0:
		return fmt.Errorf("asr: d_model %d is not divisible by %d heads", c.DModel, c.Heads)
	case c.EncoderLayers < 1 || c.DecoderLayers < 0:
		return fmt.Errorf("asr: %d encoder / %d decoder layers", c.EncoderLayers, c.DecoderLayers)
	case c.FFDim <= 0 || c.DecoderFFDim < 0:
		return fmt.Errorf("asr: feed-forward sizes %d / %d", c.FFDim, c.DecoderFFDim)
	case c.ConvKernel <= 0 || c.ConvKernel%2 == 0:
		return fmt.Errorf("asr: convolution kernel %d must be odd", c.ConvKernel)
	case c.Vocab <= UNKID:
		return fmt.Errorf("asr: vocabulary of %d tokens", c.Vocab)
	case c.NumMels < 7:
		return fmt.Errorf("asr: %d mel bins (need at least 7 for ×4 subsampling)", c.NumMels)
	case c.CTCWeight < 0 || c.CTCWeight > 1:
		return fmt.Errorf("asr: CTC weight %v outside [0, 1]", c.CTCWeight)
	case c.DecoderLayers == 0 && c.CTCWeight != 1:
		return fmt.Errorf("asr: no decoder layers needs CTC weight 1, have %v", c.CTCWeight)
	case c.Dropout < 0 || c.Dropout >= 1 || c.LabelSmoothing < 0 || c.LabelSmoothing >= 1:
		return fmt.Errorf("asr: dropout %v / label smoothing %v outside [0, 1)", c.Dropout, c.LabelSmoothing)
	}
	return nil
}

func (c ModelConfig) decFF() int64 {
	if c.DecoderFFDim > 0 {
		return c.DecoderFFDim
	}
	return c.FFDim
}

func (c ModelConfig) maxLen() int64 {
	if c.MaxLen > 0 {
		return c.MaxLen
	}
	return 5000
}

// convOut is the output length of a kernel-3, stride-2, unpadded convolution.
func convOut(n int64) int64 {
	if n < 3 {
		return 0
	}
	return (n-3)/2 + 1
}

// SubsampledLength is the number of encoder frames for n input frames:
// two kernel-3 stride-2 convolutions, ⌊(⌊(n−1)/2⌋−1)/2⌋ for n ≥ 7 (0 below).
func SubsampledLength(n int64) int64 { return convOut(convOut(n)) }

// ---- encoder ---------------------------------------------------------------

// ConvSubsampling is the ×4 front end: conv (Conv2d(1, d, 3, 2), ReLU,
// Conv2d(d, d, 3, 2), ReLU) over (time, mel), then out, a Linear from d ×
// the reduced mel axis to d.
type ConvSubsampling struct {
	nn.Base
	Conv *nn.Sequential
	Out  *nn.Linear
}

func newConvSubsampling(mels, d int64) *ConvSubsampling {
	s := &ConvSubsampling{}
	stride := torch.ConvOpts{Stride: []int64{2}}
	s.Conv = nn.RegisterModule(&s.Base, "conv", nn.NewSequential(
		nn.NewConv2d(1, d, []int64{3}, stride, true), nn.NewReLU(),
		nn.NewConv2d(d, d, []int64{3}, stride, true), nn.NewReLU()))
	s.Out = nn.RegisterModule(&s.Base, "out", nn.NewLinear(d*convOut(convOut(mels)), d, true))
	return s
}

// Forward maps (B, T, mels) to (B, SubsampledLength(T), d).
func (s *ConvSubsampling) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		y := s.Conv.Forward(x.Unsqueeze(1)) // (B, d, T', F')
		b, c, t, f := y.Size(0), y.Size(1), y.Size(2), y.Size(3)
		return s.Out.Forward(y.Transpose(1, 2).Reshape(b, t, c*f))
	})
}

// FeedForward is a conformer feed-forward module: norm, linear1, Swish,
// dropout, linear2, dropout.
type FeedForward struct {
	nn.Base
	Norm             *nn.LayerNorm
	Linear1, Linear2 *nn.Linear
	Dropout          *nn.Dropout
}

func newFeedForward(d, ff int64, p float64) *FeedForward {
	f := &FeedForward{}
	f.Norm = nn.RegisterModule(&f.Base, "norm", nn.NewLayerNorm(d))
	f.Linear1 = nn.RegisterModule(&f.Base, "linear1", nn.NewLinear(d, ff, true))
	f.Linear2 = nn.RegisterModule(&f.Base, "linear2", nn.NewLinear(ff, d, true))
	f.Dropout = nn.RegisterModule(&f.Base, "dropout", nn.NewDropout(p))
	return f
}

// Forward returns the module's output (the caller adds the half-step residual).
func (f *FeedForward) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		h := f.Dropout.Forward(f.Linear1.Forward(f.Norm.Forward(x)).Silu())
		return f.Dropout.Forward(f.Linear2.Forward(h))
	})
}

// ConvModule is the conformer convolution module: norm, pointwise_conv1
// (d → 2d), GLU, depthwise_conv (kernel K, same padding), batch_norm, SiLU,
// pointwise_conv2, dropout. Padded frames are zeroed before the depthwise
// convolution so they do not leak into valid ones.
type ConvModule struct {
	nn.Base
	Norm           *nn.LayerNorm
	PointwiseConv1 *nn.Conv
	DepthwiseConv  *nn.Conv
	BatchNorm      *nn.BatchNorm
	PointwiseConv2 *nn.Conv
	Dropout        *nn.Dropout
}

func newConvModule(d, kernel int64, p float64) *ConvModule {
	c := &ConvModule{}
	c.Norm = nn.RegisterModule(&c.Base, "norm", nn.NewLayerNorm(d))
	c.PointwiseConv1 = nn.RegisterModule(&c.Base, "pointwise_conv1", nn.NewConv1d(d, 2*d, 1, torch.ConvOpts{}, true))
	c.DepthwiseConv = nn.RegisterModule(&c.Base, "depthwise_conv",
		nn.NewConv1d(d, d, kernel, torch.ConvOpts{Padding: []int64{(kernel - 1) / 2}, Groups: d}, true))
	c.BatchNorm = nn.RegisterModule(&c.Base, "batch_norm", nn.NewBatchNorm1d(d))
	c.PointwiseConv2 = nn.RegisterModule(&c.Base, "pointwise_conv2", nn.NewConv1d(d, d, 1, torch.ConvOpts{}, true))
	c.Dropout = nn.RegisterModule(&c.Base, "dropout", nn.NewDropout(p))
	return c
}

// Forward maps x (B, T, d) to (B, T, d). valid is (B, T, 1) float, 1 on
// real frames (nil: all real). recompute marks a checkpoint's backward
// re-run: batch norm then normalises with the batch statistics, as the
// forward did, without updating the running statistics a second time.
func (c *ConvModule) Forward(x, valid *torch.Tensor, recompute bool) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		h := c.PointwiseConv1.Forward(c.Norm.Forward(x).Transpose(1, 2)).Glu(1) // (B, d, T)
		if valid != nil {
			h = h.Mul(valid.Transpose(1, 2))
		}
		h = c.DepthwiseConv.Forward(h)
		bn := c.BatchNorm
		if recompute && bn.Training() {
			h = torch.BatchNorm(h, bn.Weight, bn.Bias, nil, nil, true, 0, bn.Eps)
		} else {
			h = bn.Forward(h)
		}
		h = c.PointwiseConv2.Forward(h.Silu())
		return c.Dropout.Forward(h).Transpose(1, 2)
	})
}

// ConformerBlock is one macaron conformer block:
//
//	x = x + ½·ff1(x)
//	x = x + dropout(self_attn(attn_norm(x)))
//	x = x + conv_module(x)
//	x = x + ½·ff2(x)
//	y = final_norm(x)
type ConformerBlock struct {
	nn.Base
	FF1         *FeedForward
	AttnNorm    *nn.LayerNorm
	SelfAttn    *nn.MultiheadAttention
	AttnDropout *nn.Dropout
	ConvModule  *ConvModule
	FF2         *FeedForward
	FinalNorm   *nn.LayerNorm
}

func newConformerBlock(c ModelConfig) *ConformerBlock {
	b := &ConformerBlock{}
	d := c.DModel
	b.FF1 = nn.RegisterModule(&b.Base, "ff1", newFeedForward(d, c.FFDim, c.Dropout))
	b.AttnNorm = nn.RegisterModule(&b.Base, "attn_norm", nn.NewLayerNorm(d))
	b.SelfAttn = nn.RegisterModule(&b.Base, "self_attn", nn.NewMultiheadAttention(d, c.Heads, c.Dropout, true))
	b.AttnDropout = nn.RegisterModule(&b.Base, "attn_dropout", nn.NewDropout(c.Dropout))
	b.ConvModule = nn.RegisterModule(&b.Base, "conv_module", newConvModule(d, c.ConvKernel, c.Dropout))
	b.FF2 = nn.RegisterModule(&b.Base, "ff2", newFeedForward(d, c.FFDim, c.Dropout))
	b.FinalNorm = nn.RegisterModule(&b.Base, "final_norm", nn.NewLayerNorm(d))
	return b
}

// Forward runs the block on x (B, T, d); padMask (B, T) bool is true on
// padded frames (nil: none). See ConvModule.Forward for recompute.
func (b *ConformerBlock) Forward(x, padMask *torch.Tensor, recompute bool) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		var valid *torch.Tensor
		if padMask != nil {
			valid = padMask.LogicalNot().ToDType(x.DType()).Unsqueeze(-1)
		}
		x = x.Add(b.FF1.Forward(x).MulScalar(0.5))
		h := b.AttnNorm.Forward(x)
		a, _ := b.SelfAttn.Forward(h, h, h, nn.AttnOpts{KeyPaddingMask: padMask})
		x = x.Add(b.AttnDropout.Forward(a))
		x = x.Add(b.ConvModule.Forward(x, valid, recompute))
		x = x.Add(b.FF2.Forward(x).MulScalar(0.5))
		return b.FinalNorm.Forward(x)
	})
}

// ConformerEncoder is subsample, then x·√d + absolute sinusoidal positions
// (pos_enc; the table is a non-persistent buffer, as ESPnet's
// PositionalEncoding scales its input), dropout, and the conformer layers.
// Absolute positions are used rather than Transformer-XL relative ones: it
// is simpler and the attention here is the stock nn.MultiheadAttention.
type ConformerEncoder struct {
	nn.Base
	Subsample *ConvSubsampling
	PosEnc    *nn.SinusoidalPositionalEncoding
	Dropout   *nn.Dropout
	Layers    *nn.ModuleList[*ConformerBlock]
	cfg       *ModelConfig
}

// ---- decoder ---------------------------------------------------------------

// TransformerDecoder is embed (padding row <pad>), sinusoidal positions,
// dropout, pre-norm nn.TransformerDecoderLayers (causal self-attention,
// cross-attention to the encoder), a final norm and out (Linear to the
// vocabulary).
type TransformerDecoder struct {
	nn.Base
	Embed   *nn.Embedding
	PosEnc  *nn.SinusoidalPositionalEncoding
	Dropout *nn.Dropout
	Layers  *nn.ModuleList[*nn.TransformerDecoderLayer]
	Norm    *nn.LayerNorm
	Out     *nn.Linear
}

// Forward maps token ids ys (B, S) int64 to logits (B, S, V) attending to
// memory (B, T, d); tgtPad (B, S) and memPad (B, T) bool are true on
// padding (nil: none).
func (dec *TransformerDecoder) Forward(ys, memory, tgtPad, memPad *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		x := dec.Dropout.Forward(dec.PosEnc.Forward(dec.Embed.Forward(ys)))
		self := nn.AttnOpts{KeyPaddingMask: tgtPad, Causal: true}
		cross := nn.AttnOpts{KeyPaddingMask: memPad}
		for _, l := range dec.Layers.Items {
			x = l.Forward(x, memory, self, cross)
		}
		return dec.Out.Forward(dec.Norm.Forward(x))
	})
}

// ---- model -----------------------------------------------------------------

// Conformer is the joint CTC–attention model: encoder (ConformerEncoder),
// ctc_head (Linear d → V) and decoder (TransformerDecoder). State-dict
// names follow a PyTorch implementation: encoder.subsample.conv.0.weight,
// encoder.layers.0.ff1.linear1.weight, encoder.layers.0.self_attn.in_proj_weight,
// encoder.layers.0.conv_module.depthwise_conv.weight,
// encoder.layers.0.conv_module.batch_norm.running_mean, ctc_head.weight,
// decoder.embed.weight, decoder.layers.0.multihead_attn.out_proj.weight,
// decoder.norm.weight, decoder.out.weight, ...
type Conformer struct {
	nn.Base
	Cfg     ModelConfig
	Encoder *ConformerEncoder
	CTCHead *nn.Linear
	Decoder *TransformerDecoder // nil without decoder layers
	// Vocab decodes Transcribe's output (set it before calling Transcribe).
	Vocab *Vocab
}

// NewConformer builds the model (float32, CPU; move it with nn.To).
func NewConformer(cfg ModelConfig) (*Conformer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Conformer{Cfg: cfg}
	d := cfg.DModel
	e := &ConformerEncoder{cfg: &m.Cfg}
	e.Subsample = nn.RegisterModule(&e.Base, "subsample", newConvSubsampling(cfg.NumMels, d))
	e.PosEnc = nn.RegisterModule(&e.Base, "pos_enc", nn.NewSinusoidalPositionalEncoding(d, cfg.maxLen(), false))
	e.Dropout = nn.RegisterModule(&e.Base, "dropout", nn.NewDropout(cfg.Dropout))
	e.Layers = nn.RegisterModule(&e.Base, "layers", nn.NewModuleList[*ConformerBlock]())
	for k := 0; k < cfg.EncoderLayers; k++ {
		e.Layers.Append(newConformerBlock(cfg))
	}
	m.Encoder = nn.RegisterModule(&m.Base, "encoder", e)
	m.CTCHead = nn.RegisterModule(&m.Base, "ctc_head", nn.NewLinear(d, cfg.Vocab, true))
	if cfg.DecoderLayers > 0 {
		dec := &TransformerDecoder{}
		dec.Embed = nn.RegisterModule(&dec.Base, "embed", nn.NewEmbedding(cfg.Vocab, d, PadID))
		dec.PosEnc = nn.RegisterModule(&dec.Base, "pos_enc", nn.NewSinusoidalPositionalEncoding(d, cfg.maxLen(), false))
		dec.Dropout = nn.RegisterModule(&dec.Base, "dropout", nn.NewDropout(cfg.Dropout))
		dec.Layers = nn.RegisterModule(&dec.Base, "layers", nn.NewModuleList[*nn.TransformerDecoderLayer]())
		tc := nn.TransformerConfig{DModel: d, NHead: cfg.Heads, DimFeedforward: cfg.decFF(), Dropout: cfg.Dropout,
			Activation: "relu", LayerNormEps: 1e-5, BatchFirst: true, NormFirst: true}
		for k := 0; k < cfg.DecoderLayers; k++ {
			dec.Layers.Append(nn.NewTransformerDecoderLayer(tc))
		}
		dec.Norm = nn.RegisterModule(&dec.Base, "norm", nn.NewLayerNorm(d))
		dec.Out = nn.RegisterModule(&dec.Base, "out", nn.NewLinear(d, cfg.Vocab, true))
		m.Decoder = nn.RegisterModule(&m.Base, "decoder", dec)
	}
	return m, nil
}

// PaddingMask returns (B, T) bool, true at positions t ≥ lens[b].
func PaddingMask(lens []int64, t int64, dev torch.Device) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		return lengthMask(torch.FromSlice(lens, []int64{int64(len(lens))}, dev), t)
	})
}

// lengthMask is PaddingMask of lengths lens (int64 (B)) on their device.
func lengthMask(lens *torch.Tensor, t int64) *torch.Tensor {
	return torch.Arange(0, float64(t), 1, torch.Int64, lens.Device()).Unsqueeze(0).Ge(lens.Unsqueeze(1))
}

// Forward encodes feats (B, T, mels) with valid frame counts lens (nil:
// all T). It returns the encoder output (B, T', d) and each sequence's
// T'-length, SubsampledLength(lens[b]).
func (e *ConformerEncoder) Forward(feats *torch.Tensor, lens []int64) (*torch.Tensor, []int64) {
	return e.forward(feats, lens, nil)
}

// forward is Forward; with outLens (int64 (B): SubsampledLength of lens,
// on feats' device) the padding mask is made from it on the device, where
// Forward copies one made on the host in.
func (e *ConformerEncoder) forward(feats *torch.Tensor, lens []int64, outLensT *torch.Tensor) (*torch.Tensor, []int64) {
	shape := feats.Shape()
	if len(shape) != 3 || shape[2] != e.cfg.NumMels {
		panic(&torch.Error{Op: "ConformerEncoder", Msg: fmt.Sprintf("features %v, want (B, T, %d)", shape, e.cfg.NumMels)})
	}
	b, t := shape[0], shape[1]
	if lens == nil {
		lens = make([]int64, b)
		for k := range lens {
			lens[k] = t
		}
	}
	if int64(len(lens)) != b {
		panic(&torch.Error{Op: "ConformerEncoder", Msg: fmt.Sprintf("%d lengths for a batch of %d", len(lens), b)})
	}
	outLens := make([]int64, b)
	for k, n := range lens {
		if n > t || SubsampledLength(n) < 1 {
			panic(&torch.Error{Op: "ConformerEncoder", Msg: fmt.Sprintf("sequence %d has %d frames (batch T = %d; need at least 7)", k, n, t)})
		}
		outLens[k] = SubsampledLength(n)
	}
	tt := SubsampledLength(t)
	if tt > e.PosEnc.PE.Size(0) {
		panic(&torch.Error{Op: "ConformerEncoder", Msg: fmt.Sprintf("%d subsampled frames exceed MaxLen %d", tt, e.PosEnc.PE.Size(0))})
	}
	out := torch.TidyTensor(func() *torch.Tensor {
		// The padding mask is copied in before the first kernel: on a GPU
		// a copy from the host waits for every kernel queued before it.
		var mask *torch.Tensor
		for k := range outLens {
			if outLens[k] < tt {
				if outLensT != nil {
					mask = lengthMask(outLensT, tt)
				} else {
					mask = PaddingMask(outLens, tt, feats.Device())
				}
				break
			}
		}
		x := e.Subsample.Forward(feats)
		if x.Size(1) != tt {
			panic(&torch.Error{Op: "ConformerEncoder", Msg: fmt.Sprintf("subsampling gave %d frames for %d, want %d", x.Size(1), t, tt)})
		}
		x = e.Dropout.Forward(e.PosEnc.Forward(x.MulScalar(math.Sqrt(float64(e.cfg.DModel)))))
		ckpt := e.cfg.GradCheckpointing && e.Training() && torch.GradEnabled()
		// Each block's input is released once the block has run (the first
		// here, the others by Pipe): its autograd graph keeps what backward
		// needs, so backward frees each block's input as soon as it is done
		// with it, not when the scope ends.
		return torch.Pipe(x, len(e.Layers.Items), func(i int, x *torch.Tensor) *torch.Tensor {
			out := e.block(i, x, mask, ckpt)
			if i == 0 {
				x.Free()
			}
			return out
		})
	})
	return out, outLens
}

// block runs encoder block i on x, under checkpointing when ckpt.
func (e *ConformerEncoder) block(i int, x, mask *torch.Tensor, ckpt bool) *torch.Tensor {
	blk := e.Layers.Items[i]
	if !ckpt {
		return blk.Forward(x, mask, false)
	}
	runs := 0
	fn := func(in []*torch.Tensor) []*torch.Tensor {
		runs++
		var m *torch.Tensor
		if len(in) > 1 {
			m = in[1]
		}
		return []*torch.Tensor{blk.Forward(in[0], m, runs > 1)}
	}
	if mask != nil {
		return torch.Recompute(fn, x, mask)[0]
	}
	return torch.Recompute(fn, x)[0]
}

// Encode runs the encoder (see ConformerEncoder.Forward).
func (m *Conformer) Encode(feats *torch.Tensor, lens []int64) (*torch.Tensor, []int64) {
	return m.Encoder.Forward(feats, lens)
}

// CTCLogProbs returns log_softmax(ctc_head(enc)) (B, T', V) and the lengths.
func (m *Conformer) CTCLogProbs(feats *torch.Tensor, lens []int64) (*torch.Tensor, []int64) {
	var outLens []int64
	lp := torch.TidyTensor(func() *torch.Tensor {
		var enc *torch.Tensor
		enc, outLens = m.Encode(feats, lens)
		return m.CTCHead.Forward(enc).LogSoftmax(-1)
	})
	return lp, outLens
}

// lengths reads an int64 (B) length tensor (nil stays nil).
func lengths(t *torch.Tensor) []int64 {
	if t == nil {
		return nil
	}
	return t.Int64s()
}

// decoderIO builds the decoder's input <sos>+tokens and target
// tokens+<eos> (both (B, S+1), padded with <pad>) and the input's padding
// mask, from tokens (B, S) and their lengths (B), on the tokens' device:
// position j of a sequence of length l holds <sos> then the tokens up to l
// in the input, the tokens then <eos> at l in the target, and is padding
// from l+1 on.
func decoderIO(tokens, lens *torch.Tensor) (in, target, pad *torch.Tensor) {
	b, s, dev := tokens.Size(0), tokens.Size(1), tokens.Device()
	pos := torch.Arange(0, float64(s+1), 1, torch.Int64, dev).Unsqueeze(0)
	l := lens.Unsqueeze(1)
	padding := torch.Full([]int64{b, s + 1}, float64(PadID), torch.Int64, dev)
	shifted := torch.Cat([]*torch.Tensor{torch.Full([]int64{b, 1}, float64(SOSID), torch.Int64, dev), tokens}, 1)
	in = torch.Where(pos.Le(l), shifted, padding)
	padded := torch.Cat([]*torch.Tensor{tokens, torch.Full([]int64{b, 1}, float64(PadID), torch.Int64, dev)}, 1)
	eos := torch.Where(pos.Eq(l), torch.Full([]int64{b, s + 1}, float64(EOSID), torch.Int64, dev), padding)
	target = torch.Where(pos.Lt(l), padded, eos)
	pad = pos.Gt(l)
	return in, target, pad
}

// Loss is LossParts' total: the training loss, with nothing read on the
// host after the step's first kernel.
func (m *Conformer) Loss(feats, featLens, tokens, tokenLens *torch.Tensor) *torch.Tensor {
	total, ctc, attn := m.LossParts(feats, featLens, tokens, tokenLens)
	ctc.Free()
	attn.Free()
	return total
}

// LossParts computes the joint CTC–attention loss of a batch: feats (B, T,
// mels) float, featLens (B) int64 (nil: all T), tokens (B, S) int64 padded
// with <pad>, tokenLens (B) int64.
//
//   - ctc: CTC over log_softmax(ctc_head(encoder)) as (T', B, V), blank 0,
//     zero_infinity, mean reduction (each loss divided by its target
//     length, then averaged);
//   - attn: label-smoothed cross entropy of decoder(<sos>+tokens) against
//     tokens+<eos>, padding ignored;
//   - total = CTCWeight·ctc + (1 − CTCWeight)·attn.
//
// It returns total (a scalar in the autograd graph) and the two parts,
// detached float32 scalars on the device: nothing is read on the host
// after the step's first kernel (a read waits for the device), so the
// caller reads the parts only when it logs them. All three move to the
// enclosing scope (or the caller owns them). With CTCWeight 1 (or no
// decoder) attn is nil and the decoder does not run; with CTCWeight 0
// ctc is nil.
func (m *Conformer) LossParts(feats, featLens, tokens, tokenLens *torch.Tensor) (total, ctc, attn *torch.Tensor) {
	// The lengths are checked on the host, read before any of the step's
	// kernels are queued: on a GPU a read waits for every kernel before
	// it. BatchLossParts reads nothing: the batch keeps them on the host.
	return m.lossParts(feats, featLens, lengths(featLens), tokens, tokenLens, tokenLens.Int64s(), CTCOnDevice)
}

// CTCOnDevice makes LossParts, BatchLoss and BatchLossParts take
// CapturableBatchLoss's CTC (torch.CTCLossOnDevice): on CUDA cuDNN's CTC,
// which reads its lengths on the device, where ATen's copies them to the
// host inside the op, a wait for every kernel queued before it. Off by
// default: that path has not yet run on a GPU. On the CPU it changes
// nothing (the same loss to the bit). bench's ctc-on-device variant times
// it beside the default.
var CTCOnDevice = false

// BatchLoss is BatchLossParts' total.
func (m *Conformer) BatchLoss(b *data.Batch) *torch.Tensor {
	total, ctc, attn := m.BatchLossParts(b)
	ctc.Free()
	attn.Free()
	return total
}

// BatchLossParts is LossParts of a batch's "feats" and "tokens" (padded
// fields with lengths, as Collate makes them). It checks the lengths on the
// batch's host copy (data.Batch.HostLengths), so nothing is read from the
// device, and computes what depends on them on the device, as the Python
// twin does.
func (m *Conformer) BatchLossParts(b *data.Batch) (total, ctc, attn *torch.Tensor) {
	return m.batchLossParts(b, CTCOnDevice)
}

// batchLossParts is BatchLossParts; onDevice: see lossParts.
func (m *Conformer) batchLossParts(b *data.Batch, onDevice bool) (total, ctc, attn *torch.Tensor) {
	var featLens *torch.Tensor
	var featL []int64
	if _, ok := b.Lengths["feats"]; ok {
		featLens, featL = b.Length("feats"), b.HostLengths("feats")
	}
	return m.lossParts(b.Field("feats"), featLens, featL, b.Field("tokens"), b.Length("tokens"), b.HostLengths("tokens"), onDevice)
}

// CapturableBatchLoss is BatchLoss in the form a CUDA graph can capture:
// its CTC is torch.CTCLossOnDevice, which on CUDA is cuDNN's CTC taking
// the lengths on the device, where ATen's CTC copies them to the host and
// back inside the op. On the CPU both are libtorch's CTC and give the same
// loss to the bit. On CUDA a batch whose lengths do not fit cuDNN's CTC
// (CapturableCTC says which) gets ATen's, which a capture refuses.
func (m *Conformer) CapturableBatchLoss(b *data.Batch) *torch.Tensor {
	total, ctc, attn := m.batchLossParts(b, true)
	ctc.Free()
	attn.Free()
	return total
}

// CapturableCTC says whether CapturableBatchLoss takes b on CUDA: the
// encoder's lengths and the token lengths, from the batch's host copy,
// within cuDNN's CTC's limits (torch.CTCOnDeviceFits). nil when they fit.
func CapturableCTC(b *data.Batch) error {
	var featL []int64
	if _, ok := b.Lengths["feats"]; ok {
		featL = b.HostLengths("feats")
	}
	tl := b.HostLengths("tokens")
	enc := make([]int64, len(tl))
	for i := range enc {
		if featL != nil {
			enc[i] = SubsampledLength(featL[i])
		} else {
			enc[i] = SubsampledLength(b.Field("feats").Size(1))
		}
	}
	if err := torch.CTCOnDeviceFits(enc, tl); err != nil {
		return fmt.Errorf("asr: %w", err)
	}
	return nil
}

// ctcFitsDevice says whether torch.CTCLossOnDevice takes encoder lengths
// enc and token lengths tl on dev: anywhere but on CUDA, and there within
// cuDNN's CTC's limits.
func ctcFitsDevice(dev torch.Device, enc, tl []int64) bool {
	return !dev.IsCUDA() || torch.CTCOnDeviceFits(enc, tl) == nil
}

// lossParts is LossParts with the lengths also on the host (featL nil: all
// T), where they are checked. What depends on them is computed on the
// device from featLens and tokenLens: the encoder's lengths, its padding
// mask and the decoder's input, target and masks. A copy from the host
// waits for the kernels before it, as a read does. onDevice: the CTC is
// torch.CTCLossOnDevice, on CUDA where the lengths fit cuDNN's CTC
// (torch.CTCOnDeviceFits, checked here on the host), ATen's otherwise.
func (m *Conformer) lossParts(feats, featLens *torch.Tensor, featL []int64, tokens, tokenLens *torch.Tensor, tl []int64, onDevice bool) (total, ctc, attn *torch.Tensor) {
	w := m.Cfg.CTCWeight
	out := torch.TidyTensors(func() []*torch.Tensor {
		dev := feats.Device()
		bs, t, s := feats.Size(0), feats.Size(1), tokens.Size(1)
		if int64(len(tl)) != tokens.Size(0) {
			panic(&torch.Error{Op: "Conformer.Loss", Msg: fmt.Sprintf("%d token lengths for %d sequences", len(tl), tokens.Size(0))})
		}
		for i, l := range tl {
			if l < 0 || l > s {
				panic(&torch.Error{Op: "Conformer.Loss", Msg: fmt.Sprintf("token length %d of sequence %d outside [0, %d]", l, i, s)})
			}
		}
		// The encoder's lengths on the device: SubsampledLength, as
		// ⌊(⌊(n−1)/2⌋−1)/2⌋ (Encode checks each n ≥ 7 on the host).
		var encL *torch.Tensor
		if featLens != nil {
			encL = featLens.ToDevice(dev).SubScalar(1).FloorDivScalar(2).SubScalar(1).FloorDivScalar(2)
		} else {
			encL = torch.Full([]int64{bs}, float64(SubsampledLength(t)), torch.Int64, dev)
		}
		enc, encHost := m.Encoder.forward(feats, featL, encL)
		var loss *torch.Tensor
		if w > 0 {
			lp := m.CTCHead.Forward(enc).LogSoftmax(-1).Transpose(0, 1)
			var c *torch.Tensor
			if onDevice && ctcFitsDevice(dev, encHost, tl) {
				c = torch.CTCLossOnDevice(lp, tokens, encL, tokenLens.ToDevice(dev))
			} else {
				c = torch.CTCLoss(lp, tokens, encL, tokenLens, BlankID, torch.ReduceMean, true)
			}
			ctc = c.Detach()
			loss = c.MulScalar(w)
		}
		if w < 1 && m.Decoder != nil {
			in, target, pad := decoderIO(tokens, tokenLens.ToDevice(dev))
			memPad := lengthMask(encL, enc.Size(1))
			logits := m.Decoder.Forward(in, enc, pad, memPad)
			a := torch.CrossEntropy(logits.Reshape(-1, m.Cfg.Vocab), target.Reshape(-1), nil, torch.ReduceMean, PadID, m.Cfg.LabelSmoothing)
			attn = a.Detach()
			if loss == nil {
				loss = a.MulScalar(1 - w)
			} else {
				loss = loss.Add(a.MulScalar(1 - w))
			}
		}
		return []*torch.Tensor{loss, ctc, attn}
	})
	return out[0], out[1], out[2]
}

// TranscribeIDs greedily decodes the CTC head: token ids per sequence
// (blanks and repeats collapsed). It runs in eval mode under NoGrad and
// restores the training mode afterwards.
func (m *Conformer) TranscribeIDs(feats, lens *torch.Tensor) [][]int64 {
	training := m.Training()
	nn.SetTraining(m, false)
	defer nn.SetTraining(m, training)
	var out [][]int64
	torch.NoGrad(func() {
		torch.Tidy(func() {
			lp, outLens := m.CTCLogProbs(feats, lengths(lens))
			ids, err := GreedyCTC(lp, outLens, BlankID)
			if err != nil {
				panic(&torch.Error{Op: "Conformer.Transcribe", Msg: err.Error()})
			}
			out = ids
		})
	})
	return out
}

// Transcribe greedily decodes feats (B, T, mels) with valid lengths lens
// (B) int64 (nil: all T) to text with m.Vocab.
func (m *Conformer) Transcribe(feats, lens *torch.Tensor) []string {
	if m.Vocab == nil {
		panic(&torch.Error{Op: "Conformer.Transcribe", Msg: "no vocabulary: set Conformer.Vocab"})
	}
	ids := m.TranscribeIDs(feats, lens)
	out := make([]string, len(ids))
	for k, s := range ids {
		out[k] = m.Vocab.Decode(s)
	}
	return out
}

// ParamSummary is a one-line parameter count, total and per part, e.g.
// "24.90M parameters (encoder 20.11M, ctc_head 0.02M, decoder 4.78M)".
func (m *Conformer) ParamSummary() string {
	f := func(n int64) string { return fmt.Sprintf("%.2fM", float64(n)/1e6) }
	s := fmt.Sprintf("%s parameters (encoder %s, ctc_head %s", f(nn.NumParams(m)), f(nn.NumParams(m.Encoder)), f(nn.NumParams(m.CTCHead)))
	if m.Decoder != nil {
		s += ", decoder " + f(nn.NumParams(m.Decoder))
	}
	return s + ")"
}
