package tts

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
)

// SampleOptions control sampling of codes: XTTS's defaults are
// temperature 0.75, top-k 50, top-p 0.85.
type SampleOptions struct {
	Temperature float64 // 0: greedy
	TopK        int     // 0: all
	TopP        float64 // 0 or 1: all
	// RepetitionPenalty divides the logit of every code already generated
	// (multiplies it where negative) before temperature, as Hugging
	// Face's generate does for XTTS; 0 or 1: none.
	RepetitionPenalty float64
	Seed              uint64
	// MaxCodes bounds the codes generated (0: 10 per phoneme + 50, at
	// most the model's MaxCodes).
	MaxCodes int
	// Candidates is how many sequences are sampled (seeds Seed, Seed+1,
	// …) to keep the one the GPT itself finds likeliest — the mean log
	// probability of its codes and stop token under the model's own
	// distribution, one that stopped before one that ran to MaxCodes: the
	// best-of-N of Tortoise's num_autoregressive_samples, ranked by the
	// GPT instead of a CLVP model. 0 or 1: one.
	Candidates int
}

// DefaultSampleOptions are XTTS's temperature, top-k and top-p, without
// its repetition penalty, which measured worse on this codec (README).
func DefaultSampleOptions() SampleOptions {
	return SampleOptions{Temperature: 0.75, TopK: 50, TopP: 0.85, RepetitionPenalty: 1, Seed: 1}
}

// Validate checks the options.
func (o SampleOptions) Validate() error {
	switch {
	case !(o.Temperature >= 0 && o.Temperature <= 10):
		return &recipes.ConfigError{Field: "temperature", Value: o.Temperature, Reason: "must be in [0, 10] (0: greedy)"}
	case o.TopK < 0:
		return &recipes.ConfigError{Field: "top-k", Value: o.TopK, Reason: "must be >= 0 (0: all)"}
	case !(o.TopP >= 0 && o.TopP <= 1):
		return &recipes.ConfigError{Field: "top-p", Value: o.TopP, Reason: "must be in [0, 1]"}
	case !(o.RepetitionPenalty >= 0 && o.RepetitionPenalty <= 100):
		return &recipes.ConfigError{Field: "repetition-penalty", Value: o.RepetitionPenalty, Reason: "must be in [0, 100] (0 or 1: none)"}
	case o.MaxCodes < 0:
		return &recipes.ConfigError{Field: "max-codes", Value: o.MaxCodes, Reason: "must be >= 0"}
	case o.Candidates < 0 || o.Candidates > 64:
		return &recipes.ConfigError{Field: "candidates", Value: o.Candidates, Reason: "must be in [0, 64] (0 or 1: one)"}
	}
	return nil
}

// checkGLIters refuses a Griffin-Lim iteration count outside [1, 1000]
// (10^12 was a Go fatal out-of-memory error, 0 a silent pass with none).
func checkGLIters(n int) error {
	if n < 1 || n > 1000 {
		return &recipes.ConfigError{Field: "griffin-lim-iters", Value: n, Reason: "must be in [1, 1000]"}
	}
	return nil
}

// Latents returns the speaker latents (1, CondLatents, D) of a reference
// clip's normalised log-mels (T, NMels); clips longer than CondFrames are
// cut.
func (m *Model) Latents(ref *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		r := ref.Narrow(0, 0, min(ref.Size(0), condFrames)).Unsqueeze(0)
		return m.GPT.Cond.Forward(r, nil)
	})
}

// Candidate is one sampled code sequence and the GPT's score of it.
type Candidate struct {
	Codes   []int64
	Stopped bool    // the GPT ended it (not the length bound)
	Score   float64 // mean log probability per token (see generate)
}

// better is the GPT's ranking: one that stopped before one that ran to
// the length bound, then the likelier.
func (c Candidate) better(o Candidate) bool {
	return c.Stopped && !o.Stopped || c.Stopped == o.Stopped && c.Score > o.Score
}

// Sample samples max(o.Candidates, 1) code sequences (seeds o.Seed,
// o.Seed+1, …) for phoneme ids given speaker latents (1, N, D) and
// returns them in the GPT's order (Candidate.better; ties keep the seed
// order), the likeliest first.
func (m *Model) Sample(latents *torch.Tensor, text []int64, o SampleOptions) []Candidate {
	cs := make([]Candidate, max(o.Candidates, 1))
	for k := range cs {
		one := o
		one.Seed = o.Seed + uint64(k)
		cs[k].Codes, cs[k].Stopped, cs[k].Score = m.generate(latents, text, one)
	}
	sort.SliceStable(cs, func(a, b int) bool { return cs[a].better(cs[b]) })
	return cs
}

// Generate samples codes for phoneme ids given speaker latents (1, N, D):
// the prompt [latents | text start, phonemes, text stop, audio start] goes
// through the GPT once, then one code at a time, each step attending to
// the cached keys and values of every earlier position, until the audio
// stop token or the length bound. With o.Candidates > 1 it samples that
// many sequences and keeps the likeliest (SampleOptions.Candidates).
func (m *Model) Generate(latents *torch.Tensor, text []int64, o SampleOptions) (codes []int64, stopped bool) {
	c := m.Sample(latents, text, o)[0]
	return c.Codes, c.Stopped
}

// generate samples one sequence and returns it with its mean log
// probability per token (codes and, when stopped, the stop token) under
// the GPT's distribution before temperature, top-k, top-p and penalty.
func (m *Model) generate(latents *torch.Tensor, text []int64, o SampleOptions) (codes []int64, stopped bool, score float64) {
	cfg := m.GPT.Cfg
	limit := o.MaxCodes
	if limit == 0 {
		limit = 10*len(text) + 50
	}
	limit = min(limit, int(cfg.MaxCodes))
	r := rand.New(rand.NewPCG(o.Seed, 0xc0de5))
	caches := make([]kvCache, len(m.GPT.Blocks.Items))
	defer func() {
		for i := range caches {
			caches[i].free()
		}
	}()
	dev := latents.Device()
	var logp float64
	n := 0
	torch.NoGrad(func() {
		var logits []float32
		torch.Tidy(func() {
			h := m.GPT.Forward(latents, m.embedPrompt(text, nil, dev), caches)
			logits = m.GPT.AudioHead.Forward(h.Select(1, h.Size(1)-1)).ToDevice(torch.CPU).Float32s()
		})
		seen := map[int64]bool{}
		for j := 1; j <= limit; j++ {
			logits[cfg.audioStart()] = float32(math.Inf(-1))
			raw := logits
			if o.RepetitionPenalty != 0 && o.RepetitionPenalty != 1 {
				logits = slices.Clone(logits)
				penalise(logits, seen, o.RepetitionPenalty)
			}
			c := sample(logits, o, r)
			logp += float64(raw[c]) - logSumExp(raw)
			n++
			if c == cfg.audioStop() {
				stopped = true
				return
			}
			codes = append(codes, c)
			seen[c] = true
			if j == limit {
				return
			}
			torch.Tidy(func() {
				one := func(v int64) *torch.Tensor { return torch.FromSlice([]int64{v}, []int64{1, 1}).ToDevice(dev) }
				h := m.GPT.Forward(nil, m.GPT.Embed(one(c), one(kindAudio), one(int64(j))), caches)
				logits = m.GPT.AudioHead.Forward(h.Select(1, 0)).ToDevice(torch.CPU).Float32s()
			})
		}
	})
	if n > 0 {
		score = logp / float64(n)
	}
	return codes, stopped, score
}

// logSumExp is log Σ exp(v) over v (−Inf entries add nothing).
func logSumExp(v []float32) float64 {
	hi := math.Inf(-1)
	for _, x := range v {
		hi = math.Max(hi, float64(x))
	}
	var s float64
	for _, x := range v {
		s += math.Exp(float64(x) - hi)
	}
	return hi + math.Log(s)
}

// embedPrompt embeds [text start, text, text stop, audio start, codes]
// as one sequence (1, L, D) on dev: the text stream's positions from 0,
// the audio stream's from 0 at the audio start.
func (m *Model) embedPrompt(text, codes []int64, dev torch.Device) *torch.Tensor {
	cfg := m.GPT.Cfg
	n := len(text) + 2
	ids := append(append(append([]int64{cfg.textStart()}, text...), cfg.textStop(), cfg.audioStart()), codes...)
	kind := make([]int64, len(ids))
	pos := make([]int64, len(ids))
	for j := range ids {
		if j < n {
			kind[j], pos[j] = kindText, int64(j)
		} else {
			kind[j], pos[j] = kindAudio, int64(j-n)
		}
	}
	t := func(v []int64) *torch.Tensor { return torch.FromSlice(v, []int64{1, int64(len(v))}).ToDevice(dev) }
	return m.GPT.Embed(t(ids), t(kind), t(pos))
}

// TeacherForced returns the code the GPT finds likeliest at each of
// codes' places given the true codes before it (training's pass, the
// argmax over the codebook) and speaker latents (1, N, D). Decoded, they
// show how much intelligibility the GPT's next-code predictions keep when
// its own earlier choices cannot lead it astray; against Generate's codes
// they separate the GPT's per-code errors from the drift of sampling.
// Codes beyond the GPT's MaxCodes are left out.
func (m *Model) TeacherForced(latents *torch.Tensor, text, codes []int64) []int64 {
	cfg := m.GPT.Cfg
	codes = codes[:min(int64(len(codes)), cfg.MaxCodes)]
	if len(codes) == 0 {
		return nil
	}
	var out []int64
	dev := latents.Device()
	torch.NoGrad(func() {
		torch.Tidy(func() {
			h := m.GPT.Forward(latents, m.embedPrompt(text, codes, dev), nil)
			// Code j is predicted at the audio start (j = 0) or at code j − 1.
			at := h.Narrow(1, latents.Size(1)+int64(len(text))+2, int64(len(codes)))
			logits := m.GPT.AudioHead.Forward(at).Narrow(-1, 0, cfg.Codes)
			_, idx := logits.MaxDim(-1, false)
			out = idx.Reshape(-1).ToDevice(torch.CPU).Int64s()
		})
	})
	return out
}

// penalise applies the repetition penalty p to the logits of the codes
// seen: a positive logit is divided by p, a negative one multiplied, so
// p > 1 makes every seen code less likely (Hugging Face's
// RepetitionPenaltyLogitsProcessor).
func penalise(logits []float32, seen map[int64]bool, p float64) {
	if p == 0 || p == 1 {
		return
	}
	for c := range seen {
		if v := logits[c]; v > 0 {
			logits[c] = float32(float64(v) / p)
		} else {
			logits[c] = float32(float64(v) * p)
		}
	}
}

// sample draws a token from logits with temperature, top-k and top-p
// (greedy at temperature 0).
func sample(logits []float32, o SampleOptions, r *rand.Rand) int64 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	if o.Temperature == 0 {
		return int64(best)
	}
	type cand struct {
		i int
		p float64
	}
	cs := make([]cand, 0, len(logits))
	for i, v := range logits {
		if !math.IsInf(float64(v), -1) {
			cs = append(cs, cand{i, (float64(v) - float64(logits[best])) / o.Temperature})
		}
	}
	sort.Slice(cs, func(a, b int) bool { return cs[a].p > cs[b].p || (cs[a].p == cs[b].p && cs[a].i < cs[b].i) })
	if o.TopK > 0 && len(cs) > o.TopK {
		cs = cs[:o.TopK]
	}
	var z float64
	for k := range cs {
		cs[k].p = math.Exp(cs[k].p)
		z += cs[k].p
	}
	if o.TopP > 0 && o.TopP < 1 {
		var acc float64
		for k := range cs {
			acc += cs[k].p / z
			if acc >= o.TopP {
				cs = cs[:k+1]
				break
			}
		}
		z = 0
		for _, c := range cs {
			z += c.p
		}
	}
	u := r.Float64() * z
	for _, c := range cs {
		if u < c.p {
			return int64(c.i)
		}
		u -= c.p
	}
	return int64(cs[len(cs)-1].i)
}

// SayConfig is `torchfit tts say`.
type SayConfig struct {
	Checkpoint string // from `tts train`
	Text       string
	Speaker    string // reference clip (WAV)
	Out        string // WAV to write
	Device     torch.Device
	Sample     SampleOptions
	GLIters    int    // Griffin-Lim iterations
	Espeak     string // espeak-ng binary
	// Rank is an ASR checkpoint that keeps, of Sample.Candidates, the one
	// it transcribes closest to Text (instead of the GPT's likeliest), with
	// Transcribe (asr.TranscribeFiles; cmd/torchfit wires it in).
	Rank       string
	Transcribe Transcriber
}

// minReference is the shortest reference clip accepted, in seconds.
const minReference = 0.5

// ReferenceError is a reference clip that cannot condition a voice: not
// audio, or too short.
type ReferenceError struct {
	Path string
	Err  error
}

func (e *ReferenceError) Error() string {
	return fmt.Sprintf("tts: reference clip %s: %v", e.Path, e.Err)
}
func (e *ReferenceError) Unwrap() error { return e.Err }

// UserError marks it as the user's input (exit status 2).
func (*ReferenceError) UserError() {}

// TextError is a text that cannot be spoken: empty, or nothing espeak-ng
// reads.
type TextError struct{ Err error }

func (e *TextError) Error() string { return e.Err.Error() }
func (e *TextError) Unwrap() error { return e.Err }

// UserError marks it as the user's input (exit status 2).
func (*TextError) UserError() {}

// SayResult is what Say did.
type SayResult struct {
	Phonemes string
	Unknown  int // phonemes outside the model's vocabulary (read as <unk>)
	Codes    int
	Stopped  bool // the model ended the utterance (not the length bound)
	Seconds  float64
	// Pick is the candidate kept, in the GPT's order (0: its likeliest);
	// CER is the ranker's CER of it (SayConfig.Rank; else 0).
	Pick int
	CER  float64
}

// ReadReference reads a reference clip: a WAV file of at least
// MinReference seconds (a *ReferenceError otherwise).
func ReadReference(path string) ([]float32, error) {
	x, err := audio.ReadWAV(path, SampleRate)
	if err != nil {
		var ae *audio.Error
		if errors.As(err, &ae) {
			return nil, &ReferenceError{path, ae.Err}
		}
		return nil, &ReferenceError{path, err}
	}
	if s := float64(len(x)) / SampleRate; s < minReference {
		return nil, &ReferenceError{path, fmt.Errorf("%.2f s long; a speaker needs at least %.1f s", s, minReference)}
	}
	return x, nil
}

// input is a file a command reads, named by its flag.
type input struct{ flag, path string }

// checkOutNotInput refuses (a user error) an --out that is one of the
// inputs, under whatever name (a link, ./x.wav): the output is written
// after the input is read, and would silently replace it — the speaker's
// own recording, say, with the synthesis.
func checkOutNotInput(out string, inputs ...input) error {
	ost, err := os.Stat(out)
	if err != nil {
		return nil // a new file (or one CheckOutput reports)
	}
	for _, in := range inputs {
		if in.path == "" {
			continue
		}
		if ist, err := os.Stat(in.path); err == nil && os.SameFile(ost, ist) {
			return recipes.Usagef("--out %s is the --%s file %s: writing there would destroy it; name another --out", out, in.flag, in.path)
		}
	}
	return nil
}

// CheckText refuses a text with nothing to say.
func CheckText(text string) error {
	if strings.TrimSpace(text) == "" {
		return &TextError{fmt.Errorf("%w: --text is empty", ErrEmptyText)}
	}
	return nil
}

// Say synthesises text in the voice of a reference clip to a 16 kHz WAV.
// Inputs are checked (text, reference clip, checkpoint) before the model
// is built.
func Say(ctx context.Context, cfg SayConfig) (res SayResult, err error) {
	if err := CheckText(cfg.Text); err != nil {
		return res, err
	}
	if err := cfg.Sample.Validate(); err != nil {
		return res, err
	}
	if err := checkGLIters(cfg.GLIters); err != nil {
		return res, err
	}
	if err := needFile("checkpoint", cfg.Checkpoint); err != nil {
		return res, err
	}
	if err := checkRanker(cfg.Rank, "", cfg.Sample.Candidates, cfg.Transcribe); err != nil {
		return res, err
	}
	if err := checkOutNotInput(cfg.Out, input{"speaker", cfg.Speaker}, input{"checkpoint", cfg.Checkpoint}, input{"rank-asr", cfg.Rank}); err != nil {
		return res, err
	}
	ref, err := ReadReference(cfg.Speaker)
	if err != nil {
		return res, err
	}
	espeak := cfg.Espeak
	if espeak == "" {
		espeak = "espeak-ng"
	}
	ph, err := Phonemes(ctx, espeak, cfg.Text)
	if errors.Is(err, ErrEmptyText) {
		return res, &TextError{err}
	}
	if err != nil {
		return res, err
	}
	res.Phonemes = ph
	if cfg.Rank != "" {
		// The ranker's checkpoint is read before the model runs.
		if _, err := cfg.Transcribe(cfg.Rank, nil, cfg.Device); err != nil {
			return res, err
		}
	}
	torch.Main().Do(func() {
		var m *Model
		if m, err = LoadModel(cfg.Checkpoint, cfg.Device); err != nil {
			return
		}
		defer nn.Free(m)
		var wav []float32
		wav, res, err = m.say(ph, ref, cfg)
		if err == nil {
			err = audio.WriteWAV(cfg.Out, audio.FloatToInt16(wav), SampleRate)
		}
	})
	return res, err
}

// say runs synthesis on libtorch's thread.
func (m *Model) say(ph string, ref []float32, cfg SayConfig) ([]float32, SayResult, error) {
	res := SayResult{Phonemes: ph}
	ids, unk := m.Vocab.Encode(ph)
	res.Unknown = unk
	if int64(len(ids)) > m.GPT.Cfg.MaxText {
		return nil, res, &TextError{fmt.Errorf("tts: the text has %d phonemes; the model reads at most %d (split it into sentences)", len(ids), m.GPT.Cfg.MaxText)}
	}
	mel, err := NewMel()
	if err != nil {
		return nil, res, err
	}
	defer mel.Close()
	var cands []Candidate
	err = torch.Try(func() {
		torch.Tidy(func() {
			lm, err := mel.LogMel(ref)
			if err != nil {
				panic(&torch.Error{Op: "LogMel", Msg: err.Error()})
			}
			lat := m.Latents(m.normalize(lm).ToDevice(m.device()))
			cands = m.Sample(lat, ids, cfg.Sample)
		})
	})
	if err != nil {
		return nil, res, err
	}
	if cfg.Rank == "" {
		cands = cands[:1]
	}
	wavs := make([][]float32, len(cands))
	for k, c := range cands {
		var logmel *torch.Tensor
		if err := torch.Try(func() { logmel = torch.TidyTensor(func() *torch.Tensor { return m.decodeCodes(c.Codes) }) }); err != nil {
			return nil, res, err
		}
		wavs[k], err = mel.Vocode(logmel, cfg.GLIters, cfg.Sample.Seed)
		logmel.Free()
		if err != nil {
			return nil, res, err
		}
	}
	if cfg.Rank != "" {
		if res.Pick, res.CER, err = rankWAVs(cfg, wavs); err != nil {
			return nil, res, err
		}
	}
	c := cands[res.Pick]
	res.Codes, res.Stopped = len(c.Codes), c.Stopped
	res.Seconds = float64(len(wavs[res.Pick])) / SampleRate
	return wavs[res.Pick], res, nil
}

// rankWAVs returns the candidate cfg.Rank transcribes closest to
// cfg.Text, with its CER, their WAVs written to a temporary directory.
func rankWAVs(cfg SayConfig, wavs [][]float32) (int, float64, error) {
	dir, err := os.MkdirTemp("", "torchfit-tts-rank")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	name := func(k int) string { return filepath.Join(dir, fmt.Sprintf("%d.wav", k)) }
	pick, cers, err := rankByASR(cfg.Transcribe, cfg.Rank, cfg.Text, wavs, name, cfg.Device)
	if err != nil {
		return 0, 0, err
	}
	return pick, cers[pick], nil
}

// decodeCodes turns codes into denormalised log-mels (T, NMels) on the
// CPU through the codec (no codes: one code 0).
func (m *Model) decodeCodes(codes []int64) *torch.Tensor {
	if len(codes) == 0 {
		codes = []int64{0}
	}
	out := m.Codec.Decode(torch.FromSlice(codes, []int64{1, int64(len(codes))}).ToDevice(m.device()))
	return m.denormalize(out.Squeeze().ToDevice(torch.CPU))
}

func (m *Model) device() torch.Device { return m.Codec.Codebook.Device() }

// normalize and denormalize apply the training split's per-bin statistics
// to (T, NMels) log-mels.
// The statistics go to x's device (a CUDA x cannot meet CPU vectors).
func (m *Model) normalize(x *torch.Tensor) *torch.Tensor {
	mean := torch.FromSlice(m.Mean, []int64{NMels}).ToDevice(x.Device())
	std := torch.FromSlice(m.Std, []int64{NMels}).ToDevice(x.Device())
	return x.Sub(mean).Div(std)
}

func (m *Model) denormalize(x *torch.Tensor) *torch.Tensor {
	mean := torch.FromSlice(m.Mean, []int64{NMels}).ToDevice(x.Device())
	std := torch.FromSlice(m.Std, []int64{NMels}).ToDevice(x.Device())
	return x.Mul(std).Add(mean)
}
