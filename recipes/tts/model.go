package tts

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train/ckpt"
)

// Model is what `tts train` trains and `tts say` speaks with: the frozen
// codec and the GPT, one state dict ("codec.*", "gpt.*") so a checkpoint
// holds everything synthesis needs.
type Model struct {
	nn.Base
	Codec *Codec
	GPT   *GPT

	Vocab *Vocab
	Mean  []float32 // the feature normalisation the model was trained with
	Std   []float32
}

// NewModel builds a model; the codec's parameters do not require grad.
func NewModel(cc CodecConfig, gc GPTConfig) (*Model, error) {
	c, err := NewCodec(cc)
	if err != nil {
		return nil, err
	}
	if gc.Codes != cc.Codes {
		nn.Free(c)
		return nil, fmt.Errorf("tts: the GPT has %d audio codes, the codec %d", gc.Codes, cc.Codes)
	}
	g, err := NewGPT(gc)
	if err != nil {
		nn.Free(c)
		return nil, err
	}
	m := &Model{}
	m.Codec = nn.RegisterModule(&m.Base, "codec", c)
	m.GPT = nn.RegisterModule(&m.Base, "gpt", g)
	nn.Freeze(m, "codec.")
	return m, nil
}

// Losses are a batch's cross-entropies.
type Losses struct {
	Total *torch.Tensor // the training loss (see Loss)
	// TextSum and CodeSum are the summed cross-entropies of the phoneme
	// and code targets; Texts and Codes count them; Correct counts the
	// codes predicted right (top-1).
	TextSum, CodeSum      *torch.Tensor
	Texts, Codes, Correct *torch.Tensor
}

// Losses runs the model on a batch from Collate (on the device): the
// frozen codec turns the mels into codes under no-grad, the codes take
// their places in the token sequences, and the GPT predicts every
// phoneme and code from what precedes it.
//
// The loss is XTTS's 0.01·(text CE) + 1·(code CE), written as a sum over
// the batch's code targets so that accumulation over micro-batches of any
// size gives the gradient of the whole batch (train.Config.Count counts
// code targets): (TextWeight·TextRatio·Σ text CE + CodeWeight·Σ code CE)
// / codes, TextRatio being the training split's codes per phoneme, so the
// text term weighs as 0.01 × the mean text CE.
func (m *Model) Losses(b *data.Batch) Losses {
	cfg := m.GPT.Cfg
	var codes *torch.Tensor
	torch.NoGrad(func() { codes = m.Codec.Encode(b.Field("mel")) })
	ids, cidx := b.Field("ids"), b.Field("code_idx")
	filled := torch.Where(cidx.GeScalar(0), codes.Gather(1, cidx.ClampMin(0)), ids)
	lat := m.GPT.Cond.Forward(b.Field("cond"), b.Length("cond"))
	h := m.GPT.Forward(lat, m.GPT.Embed(filled, b.Field("kind"), b.Field("pos")), nil)
	n, l := cfg.CondLatents, ids.Size(1)
	hp := h.Narrow(1, n, l-1)
	tgt := filled.Narrow(1, 1, l-1)
	tk := b.Field("tk").Narrow(1, 1, l-1)
	ignore := torch.FullLike(tgt, -100)
	isText, isCode := tk.EqScalar(kindText), tk.EqScalar(kindAudio)
	textT := torch.Where(isText, tgt, ignore).Reshape(-1)
	codeT := torch.Where(isCode, tgt, ignore).Reshape(-1)
	// The logits are released here: cross-entropy keeps what its backward
	// needs (its log-softmax), and the step's peak is the backward's.
	sums := torch.TidyTensors(func() []*torch.Tensor {
		textLogits := m.GPT.TextHead.Forward(hp).Reshape(-1, cfg.Vocab+2)
		codeLogits := m.GPT.AudioHead.Forward(hp).Reshape(-1, cfg.Codes+2)
		var correct *torch.Tensor
		torch.NoGrad(func() {
			_, pred := codeLogits.MaxDim(-1, false)
			correct = pred.Eq(codeT).Sum()
		})
		return []*torch.Tensor{torch.CrossEntropy(textLogits, textT, nil, torch.ReduceSum, -100, 0),
			torch.CrossEntropy(codeLogits, codeT, nil, torch.ReduceSum, -100, 0), correct}
	})
	var out Losses
	out.TextSum, out.CodeSum, out.Correct = sums[0], sums[1], sums[2]
	out.Texts = isText.Sum()
	out.Codes = isCode.Sum()
	out.Total = out.TextSum.MulScalar(cfg.TextWeight * cfg.TextRatio).Add(out.CodeSum.MulScalar(cfg.CodeWeight)).Div(out.Codes.ClampMin(1))
	return out
}

// Loss is the training loss of a micro-batch.
func (m *Model) Loss(b *data.Batch) *torch.Tensor { return m.Losses(b).Total }

// CountCodes is the train.CountFunc of Loss: the micro-batch's code
// targets (codes and audio stops).
func CountCodes(mb *data.Batch) float64 {
	return mb.Field("tk").EqScalar(kindAudio).Sum().Item()
}

// ---- checkpoints ------------------------------------------------------------

// modelMeta is stored in checkpoints ("meta"/"model", JSON).
type modelMeta struct {
	Kind  string      `json:"kind"` // "codec" or "gpt"
	Codec CodecConfig `json:"codec"`
	GPT   *GPTConfig  `json:"gpt,omitempty"`
	Vocab []string    `json:"vocab,omitempty"`
	Mean  []float32   `json:"mean"`
	Std   []float32   `json:"std"`
	Data  string      `json:"data,omitempty"`
	// CodecFile is the codec checkpoint a GPT's codec came from.
	CodecFile string `json:"codec_file,omitempty"`
}

func metaDict(m modelMeta) *ptfile.Dict {
	b, _ := json.Marshal(m)
	return ptfile.NewDict("recipe", "tts", "model", string(b))
}

// checkpointError is a tts checkpoint that cannot be used (the shared
// recipes.CheckpointError: a command line exits 2). Running out of memory
// while building its model passes through: the file is not at fault.
func checkpointError(path string, err error) error {
	if errors.Is(err, torch.ErrOutOfMemory) {
		return err
	}
	return &recipes.CheckpointError{Recipe: "tts", Path: path, Err: err}
}

// buildError marks an error building a model from the user's sizes as
// the user's (exit 2), unless it ran out of memory (exit 3): sizes that
// do not fit are not out of range.
func buildError(err error) error {
	if errors.Is(err, torch.ErrOutOfMemory) {
		return fmt.Errorf("tts: building the model: %w", err)
	}
	return recipes.Usage(err)
}

// readMeta returns the model description of path, a checkpoint of kind,
// checked against its weights' shapes. The weights are described, not
// read (ckpt.Reader.Describe): their records are read through to their
// checksums, and nothing is allocated.
func readMeta(path, kind string) (modelMeta, error) {
	var meta modelMeta
	r, err := ckpt.Open(path)
	if err != nil {
		return meta, fileError(path, err)
	}
	defer r.Close()
	f, err := r.Describe("meta", "model")
	if err != nil {
		return meta, fileError(path, err)
	}
	return checkedMeta(f, kind)
}

// readCheckpoint reads a TTS checkpoint of the given kind once, checks its
// description against its weights, and returns both; free releases the
// weights. Running out of memory while reading is loadOOM's error, not
// the file's.
func readCheckpoint(path, kind string) (meta modelMeta, weights torch.StateDict, free func(), err error) {
	f, err := ckpt.ReadParts(path, "meta", "model") // not the optimizer's state
	if err != nil {
		if errors.Is(err, torch.ErrOutOfMemory) {
			return meta, nil, nil, loadOOM(kind, path, err)
		}
		return meta, nil, nil, fileError(path, err)
	}
	if meta, err = checkedMeta(f, kind); err != nil {
		f.Free()
		return meta, nil, nil, err
	}
	if weights, err = f.Tensors("model"); err != nil {
		f.Free()
		return meta, nil, nil, checkpointError(path, fmt.Errorf("model weights: %v", err))
	}
	return meta, weights, f.Free, nil
}

// fileError is an error opening or reading a checkpoint: the file's (a
// *ckpt.Error) or the system's.
func fileError(path string, err error) error {
	var ce *ckpt.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("tts: checkpoint %s: %w", path, err)
	}
	return checkpointError(path, ce.Err)
}

// checkedMeta is the model description of f (its meta and model parts,
// read or described), a checkpoint of kind, checked against the model's
// shapes.
func checkedMeta(f *ckpt.File, kind string) (modelMeta, error) {
	var meta modelMeta
	bad := func(format string, args ...any) (modelMeta, error) {
		return meta, checkpointError(f.Path, fmt.Errorf(format, args...))
	}
	md := f.Meta()
	var str string
	if md != nil {
		if r, _ := md.Get("recipe"); r == "tts" {
			x, _ := md.Get("model")
			str, _ = x.(string)
		}
	}
	if str == "" {
		return bad("not a torchfit TTS checkpoint")
	}
	if err := json.Unmarshal([]byte(str), &meta); err != nil {
		return bad("bad model description: %v", err)
	}
	if meta.Kind != kind {
		want := map[string]string{"codec": "a codec checkpoint (from `tts train-codec`)", "gpt": "a GPT checkpoint (from `tts train`)"}[kind]
		return bad("is a %s checkpoint, not %s", meta.Kind, want)
	}
	shapes, err := f.Shapes("model")
	if err != nil {
		return bad("model weights: %v", err)
	}
	if err := checkMeta(meta, shapes); err != nil {
		return bad("%v", err)
	}
	return meta, nil
}

// loadOOM is running out of memory while reading a checkpoint: the file
// is fine, the memory is not — most often the user's own cap
// (--memory-limit, --memory-fraction), which the message then names. It
// wraps the out-of-memory *torch.Error without the reader's
// *ckpt.Error, a user error that would blame the file (exit 2, not
// out of memory's 3).
func loadOOM(kind, path string, err error) error {
	cause := fmt.Errorf("%w: %v", torch.ErrOutOfMemory, err)
	var te *torch.Error
	if errors.As(err, &te) {
		cause = te // the allocation and the cap, in libtorch's words
	}
	what := map[string]string{"codec": "codec", "gpt": "GPT"}[kind]
	if st, serr := torch.MemoryStats(torch.CPU); serr == nil && st.Limit > 0 {
		return fmt.Errorf("tts: the memory cap on the CPU (%s) is too small to load the %s checkpoint %s: raise --memory-limit or --memory-fraction, or leave it out: %w",
			torch.FormatBytes(st.Limit), what, path, cause)
	}
	return fmt.Errorf("tts: out of memory loading the %s checkpoint %s: %w", what, path, cause)
}

// checkMeta checks a description's bounds and its sizes against the
// weights' shapes (by name) before anything is built from it.
func checkMeta(m modelMeta, w map[string][]int64) error {
	if err := m.Codec.Validate(); err != nil {
		return fmt.Errorf("model description: %w", err)
	}
	if len(m.Mean) != NMels || len(m.Std) != NMels {
		return fmt.Errorf("model description: normalisation of %d/%d bins, want %d", len(m.Mean), len(m.Std), NMels)
	}
	prefix := ""
	if m.Kind == "gpt" {
		prefix = "codec."
	}
	type want struct {
		key   string
		shape []int64
	}
	ws := []want{
		{prefix + "codebook", []int64{m.Codec.Codes, m.Codec.CodeDim}},
		{prefix + "enc_in.weight", []int64{m.Codec.Channels, NMels, 3}},
	}
	if m.Kind == "gpt" {
		g := m.GPT
		if g == nil {
			return fmt.Errorf("model description: no GPT")
		}
		if err := g.Validate(); err != nil {
			return fmt.Errorf("model description: %w", err)
		}
		if int64(len(m.Vocab)) != g.Vocab {
			return fmt.Errorf("model description: %d phonemes for a vocabulary of %d", len(m.Vocab), g.Vocab)
		}
		d := g.DecoderDim
		ws = append(ws,
			want{"gpt.text_embed.weight", []int64{g.Vocab + 2, g.TextEncoderDim}},
			want{"gpt.audio_embed.weight", []int64{g.Codes + 2, d}},
			want{"gpt.audio_pos.weight", []int64{g.MaxCodes + 2, d}},
			want{"gpt.text_pos.weight", []int64{g.MaxText + 2, d}},
			want{"gpt.cond.latents", []int64{g.CondLatents, d}},
			want{"gpt.blocks.0.fc1.weight", []int64{g.FF, d}},
		)
		if n := recipes.CountLayers(w, "gpt.blocks."); n != g.Layers {
			return fmt.Errorf("model description says %d layers, the weights have %d", g.Layers, n)
		}
	}
	for _, x := range ws {
		got, ok := w[x.key]
		if !ok {
			return fmt.Errorf("the weights have no %s", x.key)
		}
		if !slices.Equal(got, x.shape) {
			return fmt.Errorf("model description disagrees with the weights: %s is %v, not %v", x.key, got, x.shape)
		}
	}
	return nil
}

// LoadCodec rebuilds a codec from a `tts train-codec` checkpoint, with the
// normalisation it was trained with.
func LoadCodec(path string, dev torch.Device) (c *Codec, mean, std []float32, err error) {
	meta, w, free, err := readCheckpoint(path, "codec")
	if err != nil {
		return nil, nil, nil, err
	}
	defer free()
	if c, err = NewCodec(meta.Codec); err != nil {
		return nil, nil, nil, checkpointError(path, err)
	}
	if _, err := nn.LoadStateDict(c, w, true); err != nil {
		nn.Free(c)
		return nil, nil, nil, checkpointError(path, err)
	}
	if dev != torch.CPU {
		nn.To(c, dev, torch.Float32)
	}
	nn.SetTraining(c, false)
	return c, meta.Mean, meta.Std, nil
}

// LoadModel rebuilds a model from a `tts train` checkpoint for synthesis.
func LoadModel(path string, dev torch.Device) (*Model, error) {
	meta, w, free, err := readCheckpoint(path, "gpt")
	if err != nil {
		return nil, err
	}
	defer free()
	vocab, err := NewVocab(meta.Vocab)
	if err != nil {
		return nil, checkpointError(path, err)
	}
	m, err := NewModel(meta.Codec, *meta.GPT)
	if err != nil {
		return nil, checkpointError(path, err)
	}
	if _, err := nn.LoadStateDict(m, w, true); err != nil {
		nn.Free(m)
		return nil, checkpointError(path, err)
	}
	m.Vocab, m.Mean, m.Std = vocab, meta.Mean, meta.Std
	if dev != torch.CPU {
		nn.To(m, dev, torch.Float32)
	}
	nn.SetTraining(m, false)
	return m, nil
}

// usage makes a missing checkpoint flag one line.
func needFile(flag, path string) error {
	if path == "" {
		return recipes.Usagef("--%s is required", flag)
	}
	return nil
}
