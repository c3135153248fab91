package tts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// DataConfig configures Generate: the speech corpus synthesis the ASR
// recipe trains on (package speech), clean, with one voice held out.
type DataConfig struct {
	OutDir     string
	Utterances int // over all splits
	Seed       uint64
	Workers    int // synthesis and phonemisation workers (0: all CPUs)
	// HeldOutVoice reads half of the test split and nothing else: the
	// unseen speaker.
	HeldOutVoice string
	Espeak       string // espeak-ng binary
}

// defaultHeldOutVoice is the voice no training utterance uses.
const defaultHeldOutVoice = "mr+f4"

// DefaultDataConfig returns 4,000 utterances in data/tts, mr+f4 held out.
func DefaultDataConfig() DataConfig {
	return DataConfig{OutDir: "data/tts", Utterances: 4000, Seed: 1, HeldOutVoice: defaultHeldOutVoice, Espeak: "espeak-ng"}
}

// DataStats is what Generate did.
type DataStats struct {
	speech.GenerateStats
	Phonemised int // distinct sentences
	Frames     int // mel frames in the feature cache
	Elapsed    time.Duration
}

// Generate synthesises the corpus with speech.Generate (no added noise: a
// TTS model learns whatever it hears), phonemises every sentence
// with espeak-ng (phonemes.json), and writes the log-mel feature cache
// (features.json, mels.f32). It is resumable as speech.Generate is.
func Generate(ctx context.Context, cfg DataConfig) (DataStats, error) {
	start := time.Now()
	var st DataStats
	if cfg.OutDir == "" {
		return st, &recipes.ConfigError{Field: "out", Value: cfg.OutDir, Reason: "name the corpus directory"}
	}
	if err := checkUtterances(cfg.Utterances); err != nil {
		return st, err
	}
	if err := recipes.CheckRanges(recipes.Between("workers", int64(cfg.Workers), 0, recipes.MaxWorkers)); err != nil {
		return st, err
	}
	if cfg.Espeak == "" {
		cfg.Espeak = "espeak-ng"
	}
	if cfg.Workers == 0 {
		cfg.Workers = runtime.NumCPU()
	}
	g, err := speechConfig(cfg)
	if err != nil {
		return st, err
	}
	gs, err := speech.Generate(ctx, g)
	if err != nil {
		return st, err
	}
	st.GenerateStats = gs
	var texts []string
	for _, sp := range speech.Splits {
		utts, err := speech.ReadManifest(filepath.Join(cfg.OutDir, string(sp)+".jsonl"))
		if err != nil {
			return st, err
		}
		for _, u := range utts {
			texts = append(texts, u.Text)
		}
	}
	ph, err := Phonemise(ctx, cfg.Espeak, texts, cfg.Workers)
	if err != nil {
		return st, err
	}
	st.Phonemised = len(ph)
	b, err := json.MarshalIndent(ph, "", " ")
	if err != nil {
		return st, err
	}
	if err := atomicfile.WriteFile(filepath.Join(cfg.OutDir, phonemesFile), b); err != nil {
		return st, err
	}
	if st.Frames, err = BuildFeatureCache(cfg.OutDir); err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

// speechConfig is the speech corpus that cfg's makes: package speech's
// splits and voices, clean, cfg.HeldOutVoice reading only test sentences.
func speechConfig(cfg DataConfig) (speech.GenerateConfig, error) {
	if cfg.HeldOutVoice == "" {
		cfg.HeldOutVoice = defaultHeldOutVoice
	}
	g := speech.DefaultGenerateConfig()
	g.OutDir, g.Utterances, g.Seed, g.Workers, g.Espeak = cfg.OutDir, cfg.Utterances, cfg.Seed, cfg.Workers, cfg.Espeak
	g.NoiseFraction = 0
	g.Voices = nil
	for _, v := range speech.DefaultVoices {
		if v != cfg.HeldOutVoice {
			g.Voices = append(g.Voices, v)
		}
	}
	if len(g.Voices) == len(speech.DefaultVoices) {
		return g, &recipes.ConfigError{Field: "held-out-voice", Value: cfg.HeldOutVoice, Reason: "not one of " + strings.Join(speech.DefaultVoices, ", ")}
	}
	g.HeldOutVoices = []string{cfg.HeldOutVoice}
	return g, nil
}

// splitCounts is how many utterances each split of a corpus of n gets, by
// speech.Plan (the split logic Generate follows).
func splitCounts(n int) (map[speech.Split]int, error) {
	cfg := DefaultDataConfig()
	cfg.Utterances = n
	g, err := speechConfig(cfg)
	if err != nil {
		return nil, err
	}
	g.Composer = defaultComposer()
	utts, err := speech.Plan(g)
	if err != nil {
		return nil, err
	}
	counts := map[speech.Split]int{}
	for _, u := range utts {
		counts[u.Split]++
	}
	return counts, nil
}

// defaultComposer is speech's sentence composer, built once.
var defaultComposer = sync.OnceValue(speech.DefaultComposer)

// minUtterances is the smallest corpus whose every split (train, valid,
// test) has an utterance: valid and test are fractions of it, rounded, so
// a smaller one trains with no validation score and evaluates nothing.
// Larger corpora only grow the splits.
var minUtterances = sync.OnceValue(func() int {
	for n := 1; ; n++ {
		counts, err := splitCounts(n)
		if err != nil {
			panic(fmt.Sprintf("tts: planning a corpus of %d: %v", n, err)) // the defaults plan
		}
		if emptySplits(counts) == nil {
			return n
		}
	}
})

// emptySplits names the splits with no utterance.
func emptySplits(counts map[speech.Split]int) []string {
	var out []string
	for _, sp := range speech.Splits {
		if counts[sp] == 0 {
			out = append(out, string(sp))
		}
	}
	return out
}

// checkUtterances refuses a corpus size that leaves a split empty, or
// above speech.MaxUtterances.
func checkUtterances(n int) error {
	if n > speech.MaxUtterances {
		return &recipes.ConfigError{Field: "utterances", Value: n, Reason: fmt.Sprintf("must be at most %d", speech.MaxUtterances)}
	}
	least := minUtterances()
	if n >= least {
		return nil
	}
	if n < 1 {
		return &recipes.ConfigError{Field: "utterances", Value: n, Reason: fmt.Sprintf("must be at least %d", least)}
	}
	counts, err := splitCounts(n)
	if err != nil {
		return err
	}
	empty := emptySplits(counts)
	what := "the " + strings.Join(empty, " and ") + " split"
	if len(empty) > 1 {
		what += "s"
	}
	return &recipes.ConfigError{Field: "utterances", Value: n, Reason: fmt.Sprintf("leaves %s empty (train %d, valid %d, test %d): want at least %d, so that training has a validation score and eval a test set",
		what, counts[speech.Train], counts[speech.Valid], counts[speech.Test], least)}
}

// phonemesFile maps each sentence of the corpus to its phonemes.
const phonemesFile = "phonemes.json"

// PhonemeVoice is the espeak-ng voice whose phonemes the texts get: the
// corpus's voices are all Marathi variants (see package speech).
const PhonemeVoice = "mr"

// wordSep is the token between words (and clauses).
const wordSep = "_"

// Phonemise returns espeak-ng's phonemes for each distinct text, as
// space-separated tokens with WordSep between words (see Phonemes).
func Phonemise(ctx context.Context, espeak string, texts []string, workers int) (map[string]string, error) {
	if _, err := exec.LookPath(espeak); err != nil {
		return nil, fmt.Errorf("tts: %s not found (run 'make deps' to install espeak-ng): %w", espeak, err)
	}
	uniq := map[string]string{}
	var todo []string
	for _, t := range texts {
		if _, ok := uniq[t]; !ok {
			uniq[t] = ""
			todo = append(todo, t)
		}
	}
	sort.Strings(todo)
	var mu sync.Mutex
	var first error
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range jobs {
				p, err := Phonemes(ctx, espeak, t)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				uniq[t] = p
				mu.Unlock()
			}
		}()
	}
	for _, t := range todo {
		jobs <- t
	}
	close(jobs)
	wg.Wait()
	return uniq, first
}

// Phonemes runs espeak-ng on one text and returns its phonemes (espeak-ng's
// ASCII phoneme mnemonics, -x, one token each) with WordSep between words:
// "m 'a: m i ; _ 'a: j @3 z".
func Phonemes(ctx context.Context, espeak, text string) (string, error) {
	if strings.TrimSpace(text) == "" {
		return "", ErrEmptyText
	}
	cmd := exec.CommandContext(ctx, espeak, "-q", "-x", "--sep= ", "-v", PhonemeVoice, "--", text)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("tts: espeak-ng -x %q: %w: %s", text, err, strings.TrimSpace(stderr.String()))
	}
	var toks []string
	for _, line := range strings.Split(out.String(), "\n") {
		for _, w := range strings.Split(line, "  ") {
			f := strings.Fields(w)
			if len(f) == 0 {
				continue
			}
			if len(toks) > 0 {
				toks = append(toks, wordSep)
			}
			toks = append(toks, f...)
		}
	}
	if len(toks) == 0 {
		return "", fmt.Errorf("%w: espeak-ng finds nothing to say in %q", ErrEmptyText, text)
	}
	return strings.Join(toks, " "), nil
}

// ErrEmptyText is a text with nothing to say.
var ErrEmptyText = errors.New("tts: empty text")

// readPhonemes reads a corpus's phonemes.json.
func readPhonemes(dir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, phonemesFile))
	if err != nil {
		return nil, fmt.Errorf("tts: no phonemes in %s (run `torchfit tts data --out %s`): %w", dir, dir, err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("tts: %s: %w", filepath.Join(dir, phonemesFile), err)
	}
	return m, nil
}

// Special token ids of the phoneme vocabulary.
const (
	PadID int64 = 0
	UNKID int64 = 1
)

// Vocab maps phoneme tokens to ids: <pad>, <unk>, then the phonemes of the
// training split, sorted.
type Vocab struct {
	Tokens []string
	ids    map[string]int64
}

// NewVocab builds a vocabulary from its token list (the first two are the
// specials).
func NewVocab(tokens []string) (*Vocab, error) {
	if len(tokens) < 3 || tokens[0] != "<pad>" || tokens[1] != "<unk>" {
		return nil, fmt.Errorf("tts: a phoneme vocabulary starts with <pad>, <unk> and has phonemes")
	}
	v := &Vocab{Tokens: slices.Clone(tokens), ids: map[string]int64{}}
	for i, t := range tokens {
		if _, dup := v.ids[t]; dup {
			return nil, fmt.Errorf("tts: phoneme %q twice in the vocabulary", t)
		}
		v.ids[t] = int64(i)
	}
	return v, nil
}

// BuildVocab collects the phoneme tokens of a set of phoneme strings (an
// error when there are none).
func BuildVocab(phonemes []string) (*Vocab, error) {
	set := map[string]bool{}
	for _, p := range phonemes {
		for _, t := range strings.Fields(p) {
			set[t] = true
		}
	}
	toks := []string{"<pad>", "<unk>"}
	var ph []string
	for t := range set {
		ph = append(ph, t)
	}
	sort.Strings(ph)
	return NewVocab(append(toks, ph...))
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return len(v.Tokens) }

// Encode maps a phoneme string to ids (unknown phonemes: UNKID) and
// returns how many were unknown.
func (v *Vocab) Encode(phonemes string) (ids []int64, unknown int) {
	for _, t := range strings.Fields(phonemes) {
		id, ok := v.ids[t]
		if !ok {
			id = UNKID
			unknown++
		}
		ids = append(ids, id)
	}
	return ids, unknown
}

// Corpus is one split of a TTS corpus: its utterances, their phoneme ids,
// where their frames lie in the feature cache, and the utterances of each
// speaker (for reference clips).
type Corpus struct {
	Split     string
	Utts      []speech.Utterance
	Items     []FeatureItem
	Phonemes  []string
	Text      [][]int64
	Store     *FeatureStore
	BySpeaker map[string][]int
	// RefSplit is the corpus reference clips come from (itself when nil).
	Ref *Corpus
	// RefMode is how a reference clip is chosen (RefSpeaker when empty).
	RefMode string

	seed  uint64
	epoch atomic.Uint64
}

// LoadCorpus reads a split of the corpus in dir (manifest, phonemes,
// feature cache items) and encodes its phonemes with vocab.
func LoadCorpus(dir, split string, store *FeatureStore, vocab *Vocab, seed uint64) (*Corpus, error) {
	utts, err := speech.ReadManifest(filepath.Join(dir, split+".jsonl"))
	if err != nil {
		return nil, fmt.Errorf("tts: %w (run `torchfit tts data --out %s`)", err, dir)
	}
	ph, err := readPhonemes(dir)
	if err != nil {
		return nil, err
	}
	items := store.Index.Items[split]
	if len(items) != len(utts) {
		return nil, fmt.Errorf("tts: %s has %d %s utterances, the feature cache %d: run `torchfit tts data --out %s` again", dir, len(utts), split, len(items), dir)
	}
	c := &Corpus{Split: split, Utts: utts, Items: items, Store: store, BySpeaker: map[string][]int{}, seed: seed}
	for i, u := range utts {
		if items[i].ID != u.ID {
			return nil, fmt.Errorf("tts: the feature cache of %s does not match %s.jsonl (item %d: %s, not %s): run `torchfit tts data --out %s` again", dir, split, i, items[i].ID, u.ID, dir)
		}
		p, ok := ph[u.Text]
		if !ok {
			return nil, fmt.Errorf("tts: %s has no phonemes for %q: run `torchfit tts data --out %s` again", phonemesFile, u.Text, dir)
		}
		c.Phonemes = append(c.Phonemes, p)
		if vocab != nil {
			ids, _ := vocab.Encode(p)
			c.Text = append(c.Text, ids)
		}
		c.BySpeaker[u.Speaker] = append(c.BySpeaker[u.Speaker], i)
	}
	return c, nil
}

// Len is the number of utterances.
func (c *Corpus) Len() int { return len(c.Utts) }

// SetEpoch changes the reference clips drawn for each item.
func (c *Corpus) SetEpoch(e int) { c.epoch.Store(uint64(e)) }

// Mel returns item i's normalised log-mel frames (T × NMels).
func (c *Corpus) Mel(i int) ([]float32, error) {
	v, err := c.Store.Frames(c.Items[i])
	if err != nil {
		return nil, err
	}
	c.Store.Index.Normalize(v)
	return v, nil
}

// How a training utterance's reference clip is chosen (`tts train
// --reference`).
const (
	// RefSpeaker: another utterance of the same speaker, drawn anew each
	// epoch. Its speed and pitch are the generator's independent draws, so
	// the GPT has to guess the target's.
	RefSpeaker = "speaker"
	// RefStyle: one of the speaker's styleCandidates utterances closest in
	// speaking rate and pitch, so the reference tells the GPT how fast and
	// how high to speak, as another take of the same session would.
	RefStyle = "style"
	// RefSelf: a slice of the utterance itself, its codes left out of the
	// loss (XTTS's GPT trainer: use_masking_gt_as_prompt).
	RefSelf = "self"
)

// RefModes lists the reference modes.
var RefModes = []string{RefSpeaker, RefStyle, RefSelf}

// styleCandidates is how many of a speaker's utterances closest in speed
// and pitch RefStyle draws among.
const styleCandidates = 4

// RefIndex returns the item of c.Ref (or c) whose clip conditions item i:
// another utterance of the same speaker (RefSpeaker, RefSelf) or one
// close to item i in speed and pitch (RefStyle), drawn from (seed, epoch,
// i).
func (c *Corpus) RefIndex(i int) int {
	ref := c.Ref
	if ref == nil {
		ref = c
	}
	same := ref.BySpeaker[c.Utts[i].Speaker]
	if len(same) == 0 {
		return -1
	}
	r := c.draw(uint64(i))
	if c.RefMode == RefStyle {
		return ref.closestStyle(same, c.Utts[i], ref != c, i, r)
	}
	for range 4 {
		k := same[r.IntN(len(same))]
		if ref != c || k != i || len(same) == 1 {
			return k
		}
	}
	return same[0]
}

// closestStyle draws one of the styleCandidates items among same (not
// item self unless other is true or it is the only one) whose speed and
// pitch are closest to u's: distance |Δspeed| + |Δpitch|, the generator's
// units (words a minute, espeak-ng's 0–99 pitch), ties to the earlier
// item.
func (c *Corpus) closestStyle(same []int, u speech.Utterance, other bool, self int, r *rand.Rand) int {
	type cand struct{ k, d int }
	var best [styleCandidates]cand
	n := 0
	for _, k := range same {
		if !other && k == self && len(same) > 1 {
			continue
		}
		v := c.Utts[k]
		d := abs(v.Speed-u.Speed) + abs(v.Pitch-u.Pitch)
		j := min(n, styleCandidates-1)
		if n == styleCandidates && d >= best[j].d {
			continue
		}
		for j > 0 && best[j-1].d > d {
			best[j] = best[j-1]
			j--
		}
		best[j] = cand{k, d}
		n = min(n+1, styleCandidates)
	}
	return best[r.IntN(n)].k
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// draw is the generator of one item's reference draws: (seed, epoch,
// stream).
func (c *Corpus) draw(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(c.seed^c.epoch.Load()*0x9e3779b97f4a7c15, stream))
}

// selfSlice returns the frames [s, e) of an utterance of t frames that
// condition it under RefSelf, drawn from (seed, epoch, i): as XTTS's
// get_prompt_slice, a length of 3–6 s, or half the utterance when it is
// shorter than that, at a random start.
func (c *Corpus) selfSlice(i, t int) (s, e int) {
	if t < 2 {
		return 0, t
	}
	r := c.draw(uint64(i) ^ 0x5e1f)
	n := condFrames/2 + r.IntN(condFrames-condFrames/2+1)
	if n > t {
		n = max(t/2, 1)
	}
	s = r.IntN(t - n + 1)
	return s, s + n
}

// refMel returns the conditioning clip of item i, cut to CondFrames.
func (c *Corpus) refMel(i int) ([]float32, error) {
	ref := c.Ref
	if ref == nil {
		ref = c
	}
	k := c.RefIndex(i)
	if k < 0 {
		return nil, fmt.Errorf("tts: no reference clip for speaker %s", c.Utts[i].Speaker)
	}
	v, err := ref.Mel(k)
	if err != nil {
		return nil, err
	}
	return v[:min(len(v), condFrames*NMels)], nil
}

// Dataset returns the GPT's training samples: "mel" (T, NMels), "cond"
// (Tc, NMels) and "text" (phoneme ids).
func (c *Corpus) Dataset() data.Dataset[data.Sample] {
	return data.DatasetFunc[data.Sample]{N: c.Len(), F: func(i int) (data.Sample, error) {
		mel, err := c.Mel(i)
		if err != nil {
			return nil, err
		}
		t := len(mel) / NMels
		var ref []float32
		span := []int64{0, 0} // the codes left out of the loss
		if c.RefMode == RefSelf {
			s, e := c.selfSlice(i, t)
			ref = mel[s*NMels : e*NMels]
			span = []int64{int64(s / Down), CodeLen(int64(e))}
		} else if ref, err = c.refMel(i); err != nil {
			return nil, err
		}
		return data.Sample{
			"mel":       torch.FromSlice(mel, []int64{int64(t), NMels}),
			"cond":      torch.FromSlice(ref, []int64{int64(len(ref) / NMels), NMels}),
			"text":      torch.FromSlice(c.Text[i], nil),
			"cond_span": torch.FromSlice(span, nil),
		}, nil
	}}
}

// CropDataset returns the codec's training samples: "mel", a crop of
// frames frames (a multiple of Down) of each utterance at an offset drawn
// from (seed, epoch, i); shorter utterances are padded with silence.
func (c *Corpus) CropDataset(frames int) data.Dataset[data.Sample] {
	silence := make([]float32, NMels)
	copy(silence, c.silence())
	return data.DatasetFunc[data.Sample]{N: c.Len(), F: func(i int) (data.Sample, error) {
		mel, err := c.Mel(i)
		if err != nil {
			return nil, err
		}
		t := len(mel) / NMels
		out := make([]float32, frames*NMels)
		if t <= frames {
			copy(out, mel)
			for j := t; j < frames; j++ {
				copy(out[j*NMels:], silence)
			}
		} else {
			h := fnv.New64a()
			fmt.Fprintf(h, "%d/%d/%d", c.seed, c.epoch.Load(), i)
			off := int(h.Sum64() % uint64(t-frames+1))
			copy(out, mel[off*NMels:(off+frames)*NMels])
		}
		return data.Sample{"mel": torch.FromSlice(out, []int64{int64(frames), NMels})}, nil
	}}
}

// silence is the normalised log-mel of digital silence.
func (c *Corpus) silence() []float32 {
	v := make([]float32, NMels)
	for k := range v {
		v[k] = float32(logFloor())
	}
	c.Store.Index.Normalize(v)
	return v
}

// Pad multiples: mel frames to 8 (4 codes), token sequences to 8.
const (
	framePad = 8
	seqPad   = 8
)

// Collate builds the GPT's batch: "mel" and "cond" padded (with their
// Lengths), "cond_span" (optional: the codes [from, to) of each sample
// that its reference slice holds, left out of the loss), and the token
// sequences [text start, phonemes, text stop,
// audio start, codes, audio stop] per sample: "ids" (the codes' places
// hold 0 until the codec fills them in the loss), "kind" (kindText,
// kindAudio, kindPad), "pos" (the position within its stream),
// "code_idx" (which code a place holds, −1 elsewhere) and "tk" (what the
// token is a target of: kindText for phonemes and the text stop,
// kindAudio for codes and the audio stop, 0 for the start tokens,
// padding and the codes a reference slice holds).
func Collate(cfg GPTConfig) func([]data.Sample) (*data.Batch, error) {
	pad := data.PadCollate(map[string]data.Pad{
		"mel":  {Dim: 0, Multiple: framePad},
		"cond": {Dim: 0, Multiple: framePad},
		"text": {Dim: 0},
	})
	return func(samples []data.Sample) (*data.Batch, error) {
		b, err := pad(samples)
		if err != nil {
			return nil, err
		}
		ok := false
		defer func() {
			if !ok {
				b.Free()
			}
		}()
		melLens := b.HostLengths("mel")
		textLens := b.HostLengths("text")
		var spans []int64 // (from, to) per sample: codes not to score
		if f, ok := b.Fields["cond_span"]; ok {
			spans = f.Int64s()
			f.Free()
			delete(b.Fields, "cond_span")
		}
		text := b.Fields["text"]
		nmax := text.Size(1)
		tv := text.Int64s()
		n := len(melLens)
		seqLens := make([]int64, n)
		var longest int64
		for k := range n {
			m := CodeLen(melLens[k])
			if textLens[k] > cfg.MaxText || m > cfg.MaxCodes {
				return nil, fmt.Errorf("tts: an utterance of %d phonemes and %d codes exceeds the model's %d and %d", textLens[k], m, cfg.MaxText, cfg.MaxCodes)
			}
			seqLens[k] = textLens[k] + 2 + m + 2
			longest = max(longest, seqLens[k])
		}
		l := (longest + seqPad - 1) / seqPad * seqPad
		ids := make([]int64, int64(n)*l)
		kind := make([]int64, len(ids))
		pos := make([]int64, len(ids))
		cidx := make([]int64, len(ids))
		tk := make([]int64, len(ids))
		for i := range cidx {
			cidx[i] = -1
		}
		for k := range n {
			row := int64(k) * l
			p := row
			put := func(id, kd, ps, ci, target int64) {
				ids[p], kind[p], pos[p], cidx[p], tk[p] = id, kd, ps, ci, target
				p++
			}
			nt := textLens[k]
			put(cfg.textStart(), kindText, 0, -1, 0)
			for j := range nt {
				put(tv[int64(k)*nmax+j], kindText, j+1, -1, kindText)
			}
			put(cfg.textStop(), kindText, nt+1, -1, kindText)
			m := CodeLen(melLens[k])
			put(cfg.audioStart(), kindAudio, 0, -1, 0)
			for j := range m {
				target := int64(kindAudio)
				if spans != nil && j >= spans[2*k] && j < spans[2*k+1] {
					target = 0 // in the reference slice (RefSelf)
				}
				put(0, kindAudio, j+1, j, target)
			}
			put(cfg.audioStop(), kindAudio, m+1, -1, kindAudio)
		}
		text.Free()
		b.Lengths["text"].Free()
		delete(b.Fields, "text")
		delete(b.Lengths, "text")
		delete(b.PadDims, "text")
		if b.Multiples == nil {
			b.Multiples = map[string]int{}
		}
		shape := []int64{int64(n), l}
		for name, v := range map[string][]int64{"ids": ids, "kind": kind, "pos": pos, "code_idx": cidx, "tk": tk} {
			b.Fields[name] = torch.FromSlice(v, shape)
			b.SetLengths(name, seqLens) // kept on the host too (Batch.HostLengths)
			b.PadDims[name] = 1
			b.Multiples[name] = seqPad
		}
		ok = true
		return b, nil
	}
}

// longest returns the corpus's item indices, longest first.
func (c *Corpus) longest() []int {
	order := make([]int, c.Len())
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return c.Items[order[a]].Frames+len(c.Text[order[a]])*2 > c.Items[order[b]].Frames+len(c.Text[order[b]])*2
	})
	return order
}
