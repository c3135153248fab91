package speech

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/audio"
)

// SampleRate is the corpus's rate: 16 kHz mono 16-bit PCM files.
const SampleRate = 16000

// GenerateConfig configures Generate. Zero fields take the defaults of
// DefaultGenerateConfig; the field comments double as CLI flag help.
type GenerateConfig struct {
	OutDir        string  // output directory (wav/, train.jsonl, valid.jsonl, test.jsonl)
	Utterances    int     // total number of utterances over all splits
	Seed          uint64  // seed for sentences, voices, speeds, pitches and noise
	Workers       int     // parallel synthesis workers (0: number of CPUs)
	NoiseFraction float64 // fraction of utterances with white noise added (SNR 15-30 dB)
	ValidFraction float64 // fraction of utterances (and sentence space) in valid
	TestFraction  float64 // fraction of utterances (and sentence space) in test
	// Voices are the espeak-ng voices for train and valid (and half of test).
	Voices []string
	// HeldOutVoices are used only in test (half of its utterances).
	HeldOutVoices []string
	Espeak        string                // espeak-ng binary
	Sox           string                // sox binary
	Composer      *Composer             // nil: DefaultComposer()
	Progress      func(done, total int) // optional, called from worker goroutines
}

// DefaultVoices are the Marathi voice and its variants. espeak-ng 1.51's
// Konkani voice (kok) is not usable for Devanagari: `espeak-ng -q -v kok -x
// पाणी` prints p,@a:k'a:rn.@ik'a:r (it spells out the letters' names), while
// `-v mr` prints p'a:n.i, so Marathi, a close neighbour sharing the script, reads
// Konkani text.
var DefaultVoices = []string{"mr", "mr+f1", "mr+f2", "mr+f3", "mr+f4", "mr+m1", "mr+m2", "mr+m3", "mr+m4", "mr+m6"}

// DefaultHeldOutVoices are test-only: the Hindi voice reading the same
// Devanagari, a different accent and prosody.
var DefaultHeldOutVoices = []string{"hi", "hi+f2"}

// DefaultGenerateConfig returns the defaults: 2000 utterances, 10% valid, 10%
// test, 20% noisy, all CPUs.
func DefaultGenerateConfig() GenerateConfig {
	return GenerateConfig{
		OutDir:        "data/asr",
		Utterances:    2000,
		Seed:          1,
		NoiseFraction: 0.2,
		ValidFraction: 0.1,
		TestFraction:  0.1,
		Voices:        DefaultVoices,
		HeldOutVoices: DefaultHeldOutVoices,
		Espeak:        "espeak-ng",
		Sox:           "sox",
	}
}

// MaxUtterances bounds a corpus (about 50 hours of speech), far beyond
// what the recipes train on.
const MaxUtterances = 100_000

func (c *GenerateConfig) fill() error {
	d := DefaultGenerateConfig()
	if c.OutDir == "" {
		return errors.New("generate: OutDir is empty")
	}
	if c.Utterances <= 0 {
		return fmt.Errorf("generate: Utterances = %d, want > 0", c.Utterances)
	}
	if c.Utterances > MaxUtterances {
		// The sentence plan is built in memory first: 10^9 was a Go fatal out-of-memory error.
		return fmt.Errorf("generate: Utterances = %d, want at most %d", c.Utterances, MaxUtterances)
	}
	if c.Workers < 0 {
		return fmt.Errorf("generate: Workers = %d, want >= 0 (0: all CPUs)", c.Workers)
	}
	if c.Workers == 0 {
		c.Workers = runtime.NumCPU()
	}
	if c.ValidFraction == 0 && c.TestFraction == 0 {
		c.ValidFraction, c.TestFraction = d.ValidFraction, d.TestFraction
	}
	if c.ValidFraction < 0 || c.TestFraction < 0 || c.ValidFraction+c.TestFraction >= 0.9 {
		return fmt.Errorf("generate: valid %.2f + test %.2f fractions must be >= 0 and < 0.9", c.ValidFraction, c.TestFraction)
	}
	if c.NoiseFraction < 0 || c.NoiseFraction > 1 {
		return fmt.Errorf("generate: NoiseFraction %.2f not in [0, 1]", c.NoiseFraction)
	}
	if len(c.Voices) == 0 {
		c.Voices = d.Voices
	}
	if c.HeldOutVoices == nil {
		c.HeldOutVoices = d.HeldOutVoices
	}
	for _, h := range c.HeldOutVoices {
		for _, v := range c.Voices {
			if h == v {
				return fmt.Errorf("generate: voice %q is both a training and a held-out voice", h)
			}
		}
	}
	if c.Espeak == "" {
		c.Espeak = d.Espeak
	}
	if c.Sox == "" {
		c.Sox = d.Sox
	}
	if c.Composer == nil {
		c.Composer = DefaultComposer()
	}
	return nil
}

// Utterance is one manifest line.
type Utterance struct {
	ID       string  `json:"id"`
	Path     string  `json:"path"` // relative to the manifest's directory
	Text     string  `json:"text"`
	Duration float64 `json:"duration"` // seconds
	Voice    string  `json:"voice"`    // espeak-ng voice, e.g. "mr+f3"
	Speaker  string  `json:"speaker"`  // synthetic speaker id: the voice
	Speed    int     `json:"speed,omitempty"`
	Pitch    int     `json:"pitch,omitempty"`
	SNR      float64 `json:"snr_db,omitempty"` // added white noise; 0: clean
	Template string  `json:"template,omitempty"`
	Split    Split   `json:"split"`

	noiseSeed uint64
}

// GenerateStats reports what Generate did.
type GenerateStats struct {
	Synthesised int
	Skipped     int // already present and valid (resume)
	Workers     int
	Counts      map[Split]int
	Seconds     float64 // total audio
	Elapsed     time.Duration
}

// Plan returns the utterances Generate would make, without audio (Duration
// is 0). It is deterministic given the config, whatever the worker count.
func Plan(cfg GenerateConfig) ([]Utterance, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return plan(cfg), nil
}

func plan(cfg GenerateConfig) []Utterance {
	nValid := int(math.Round(float64(cfg.Utterances) * cfg.ValidFraction))
	nTest := int(math.Round(float64(cfg.Utterances) * cfg.TestFraction))
	n := map[Split]int{Train: cfg.Utterances - nValid - nTest, Valid: nValid, Test: nTest}
	var out []Utterance
	for _, sp := range Splits {
		sents := cfg.Composer.SentencesFor(sp, n[sp], cfg.Seed, cfg.ValidFraction, cfg.TestFraction)
		for j, s := range sents {
			r := rand.New(rand.NewPCG(cfg.Seed^0x5eed, splitSalt(sp)+uint64(j)))
			voice := cfg.Voices[r.IntN(len(cfg.Voices))]
			if sp == Test && len(cfg.HeldOutVoices) > 0 && j%2 == 0 {
				voice = cfg.HeldOutVoices[r.IntN(len(cfg.HeldOutVoices))]
			}
			u := Utterance{
				Text: s.Text, Template: s.Template, Split: sp, Voice: voice, Speaker: voice,
				Speed: 130 + r.IntN(56), Pitch: 30 + r.IntN(41),
			}
			if r.Float64() < cfg.NoiseFraction {
				u.SNR = math.Round((15+15*r.Float64())*10) / 10
				u.noiseSeed = r.Uint64()
			}
			h := fnv.New32a()
			fmt.Fprintf(h, "%s|%s|%d|%d|%g|%d", u.Text, u.Voice, u.Speed, u.Pitch, u.SNR, u.noiseSeed)
			u.ID = fmt.Sprintf("%s_%05d_%08x", sp, j, h.Sum32())
			u.Path = filepath.ToSlash(filepath.Join("wav", string(sp), u.ID+".wav"))
			out = append(out, u)
		}
	}
	return out
}

// Generate synthesises a Konkani speech corpus under cfg.OutDir with
// espeak-ng (Marathi voices; Hindi voices held out for test), resamples to
// 16 kHz mono 16-bit with sox, adds white noise to a fraction of utterances,
// and writes train.jsonl, valid.jsonl and test.jsonl. It is resumable: WAV
// files already present and valid are not synthesised again (file names carry
// a hash of what they hold), and manifests are written atomically at the end.
func Generate(ctx context.Context, cfg GenerateConfig) (GenerateStats, error) {
	start := time.Now()
	stats := GenerateStats{Counts: map[Split]int{}}
	if err := cfg.fill(); err != nil {
		return stats, err
	}
	for _, bin := range []string{cfg.Espeak, cfg.Sox} {
		if _, err := exec.LookPath(bin); err != nil {
			return stats, fmt.Errorf("generate: %s not found (run 'make deps' to install espeak-ng and sox): %w", bin, err)
		}
	}
	stats.Workers = cfg.Workers
	utts := plan(cfg)
	tmpDir := filepath.Join(cfg.OutDir, "tmp")
	for _, d := range []string{tmpDir, filepath.Join(cfg.OutDir, "wav", "train"), filepath.Join(cfg.OutDir, "wav", "valid"), filepath.Join(cfg.OutDir, "wav", "test")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return stats, fmt.Errorf("generate: %w", err)
		}
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan int)
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	// At most one worker an utterance: more would only wait (and 10^12
	// goroutines were a Go fatal out-of-memory error).
	for w := 0; w < min(cfg.Workers, len(utts)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				synth, err := makeUtterance(ctx, cfg, tmpDir, &utts[i])
				if err != nil {
					cancel(err)
					continue
				}
				mu.Lock()
				if synth {
					stats.Synthesised++
				} else {
					stats.Skipped++
				}
				done++
				d := done
				mu.Unlock()
				if cfg.Progress != nil {
					cfg.Progress(d, len(utts))
				}
			}
		}()
	}
feed:
	for i := range utts {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return stats, fmt.Errorf("generate: %w", err)
	}
	os.Remove(tmpDir)

	bySplit := map[Split][]Utterance{}
	for _, u := range utts {
		bySplit[u.Split] = append(bySplit[u.Split], u)
		stats.Counts[u.Split]++
		stats.Seconds += u.Duration
	}
	for _, sp := range Splits {
		if err := WriteManifest(filepath.Join(cfg.OutDir, string(sp)+".jsonl"), bySplit[sp]); err != nil {
			return stats, fmt.Errorf("generate: %w", err)
		}
	}
	stats.Elapsed = time.Since(start)
	return stats, nil
}

// validUtterance reports whether path is a finished 16 kHz mono 16-bit WAV
// with audio, and its duration.
func validUtterance(path string) (float64, bool) {
	info, err := audio.ReadWAVInfo(path)
	if err != nil || !info.IsPCM16Mono(SampleRate) || info.Frames < SampleRate/10 {
		return 0, false
	}
	return info.Duration(), true
}

func makeUtterance(ctx context.Context, cfg GenerateConfig, tmpDir string, u *Utterance) (bool, error) {
	dst := filepath.Join(cfg.OutDir, filepath.FromSlash(u.Path))
	if d, ok := validUtterance(dst); ok {
		u.Duration = round3(d)
		return false, nil
	}
	raw := filepath.Join(tmpDir, u.ID+".espeak.wav")
	res := filepath.Join(tmpDir, u.ID+".16k.wav")
	defer os.Remove(raw)
	defer os.Remove(res)
	if err := run(ctx, cfg.Espeak, "-v", u.Voice, "-s", fmt.Sprint(u.Speed), "-p", fmt.Sprint(u.Pitch), "-w", raw, u.Text); err != nil {
		return false, fmt.Errorf("%s: %w", u.ID, err)
	}
	// -D: no dither (deterministic output); -V1: errors only.
	if err := run(ctx, cfg.Sox, "-V1", "-D", raw, "-r", fmt.Sprint(SampleRate), "-c", "1", "-b", "16", "-e", "signed-integer", res); err != nil {
		return false, fmt.Errorf("%s: %w", u.ID, err)
	}
	if u.SNR > 0 {
		s, err := audio.ReadWAVInt16(res, SampleRate)
		if err != nil {
			return false, fmt.Errorf("%s: %w", u.ID, err)
		}
		addNoise(s, u.SNR, u.noiseSeed)
		if err := audio.WriteWAV(res, s, SampleRate); err != nil {
			return false, fmt.Errorf("%s: %w", u.ID, err)
		}
	}
	d, ok := validUtterance(res)
	if !ok {
		return false, fmt.Errorf("%s: espeak-ng/sox produced no usable audio for %q (voice %s)", u.ID, u.Text, u.Voice)
	}
	if err := os.Rename(res, dst); err != nil {
		return false, fmt.Errorf("%s: %w", u.ID, err)
	}
	u.Duration = round3(d)
	return true, nil
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// addNoise adds Gaussian white noise at snrDB relative to the signal's RMS.
func addNoise(s []int16, snrDB float64, seed uint64) {
	var e float64
	for _, v := range s {
		e += float64(v) * float64(v)
	}
	if len(s) == 0 || e == 0 {
		return
	}
	sigma := math.Sqrt(e/float64(len(s))) / math.Pow(10, snrDB/20)
	r := rand.New(rand.NewPCG(seed, 0x4015e))
	for i, v := range s {
		x := float64(v) + sigma*r.NormFloat64()
		s[i] = int16(max(-32768, min(32767, math.Round(x))))
	}
}

func run(ctx context.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args[:len(args)-1], " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// WriteManifest writes utterances as JSON lines, atomically.
func WriteManifest(path string, utts []Utterance) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range utts {
		if err := enc.Encode(&utts[i]); err != nil {
			return fmt.Errorf("manifest %s: %w", path, err)
		}
	}
	return atomicfile.WriteFile(path, buf.Bytes())
}

// ReadManifest reads a JSONL manifest.
func ReadManifest(path string) ([]Utterance, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	var out []Utterance
	for n, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var u Utterance
		if err := json.Unmarshal(line, &u); err != nil {
			return nil, fmt.Errorf("manifest %s line %d: %w", path, n+1, err)
		}
		if u.Path == "" {
			return nil, fmt.Errorf("manifest %s line %d: no path", path, n+1)
		}
		out = append(out, u)
	}
	return out, nil
}
