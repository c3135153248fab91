package tts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/recipes/speech"
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

// DefaultHeldOutVoice is the voice no training utterance uses.
const DefaultHeldOutVoice = "mr+f4"

// DefaultDataConfig returns 4,000 utterances in data/tts, mr+f4 held out.
func DefaultDataConfig() DataConfig {
	return DataConfig{OutDir: "data/tts", Utterances: 4000, Seed: 1, HeldOutVoice: DefaultHeldOutVoice, Espeak: "espeak-ng"}
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
	if cfg.OutDir == "" || cfg.Utterances <= 0 {
		return st, fmt.Errorf("tts data: need an output directory and a positive number of utterances")
	}
	if cfg.HeldOutVoice == "" {
		cfg.HeldOutVoice = DefaultHeldOutVoice
	}
	if cfg.Espeak == "" {
		cfg.Espeak = "espeak-ng"
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.NumCPU()
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
		return st, fmt.Errorf("tts data: held-out voice %q is not one of %s", cfg.HeldOutVoice, strings.Join(speech.DefaultVoices, ", "))
	}
	g.HeldOutVoices = []string{cfg.HeldOutVoice}
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
	if err := atomicfile.WriteFile(filepath.Join(cfg.OutDir, PhonemesFile), b); err != nil {
		return st, err
	}
	if st.Frames, err = BuildFeatureCache(cfg.OutDir); err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

// PhonemesFile maps each sentence of the corpus to its phonemes.
const PhonemesFile = "phonemes.json"

// PhonemeVoice is the espeak-ng voice whose phonemes the texts get: the
// corpus's voices are all Marathi variants (see package speech).
const PhonemeVoice = "mr"

// WordSep is the token between words (and clauses).
const WordSep = "_"

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
				toks = append(toks, WordSep)
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
	b, err := os.ReadFile(filepath.Join(dir, PhonemesFile))
	if err != nil {
		return nil, fmt.Errorf("tts: no phonemes in %s (run `torchfit tts data --out %s`): %w", dir, dir, err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("tts: %s: %w", filepath.Join(dir, PhonemesFile), err)
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

// BuildVocab collects the phoneme tokens of a set of phoneme strings.
func BuildVocab(phonemes []string) *Vocab {
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
	v, _ := NewVocab(append(toks, ph...))
	return v
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
