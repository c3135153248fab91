package ganvit

import (
	"bufio"
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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/audio"
)

// Genres are the synthetic genres, in label order. They differ in what a
// spectrogram shows: ambient is slow, tonal and dark (sustained chords
// through a low-pass filter, no percussion); folk is plucked melody and
// bass at a walking tempo, no drums; rock is fast, with kick, snare and
// overdriven power chords (broadband, bright); electronic is a steady
// four-on-the-floor kick, off-beat hi-hats and a sawtooth bass in
// sixteenths (regular vertical stripes, bright).
var Genres = []string{"ambient", "folk", "rock", "electronic"}

// tempoRange is each genre's tempo range in beats per minute (they overlap).
var tempoRange = map[string][2]float64{
	"ambient":    {60, 85},
	"folk":       {75, 110},
	"rock":       {100, 150},
	"electronic": {118, 140},
}

// Clip is one line of the manifest (clips.jsonl).
type Clip struct {
	ID      string  `json:"id"`
	Path    string  `json:"path"` // relative to the manifest's directory
	Genre   string  `json:"genre"`
	Label   int     `json:"label"` // index in Genres
	Tempo   float64 `json:"tempo"` // beats per minute
	Key     int     `json:"key"`   // MIDI note of the root
	Minor   bool    `json:"minor"`
	Seconds float64 `json:"seconds"`
	Split   string  `json:"split"` // train, valid or test
	Seed    uint64  `json:"seed"`
}

// Splits of the data set.
const (
	SplitTrain = "train"
	SplitValid = "valid"
	SplitTest  = "test"
)

// manifestName is the manifest's file name in a data directory.
const manifestName = "clips.jsonl"

// GenerateConfig configures Generate.
type GenerateConfig struct {
	OutDir   string
	Clips    int     // clips over all splits (balanced over the genres)
	Seconds  float64 // length of each clip
	Seed     uint64
	Workers  int    // parallel sox processes (0: the number of CPUs)
	Sox      string // the sox binary ("sox")
	Progress func(done, total int)
}

// GenerateStats says what Generate did.
type GenerateStats struct {
	Synthesised, Skipped int
	Counts               map[string]int // clips per split
	Elapsed              time.Duration
}

// MaxClips and maxSeconds bound a data set's size.
const (
	MaxClips   = 1 << 20
	maxSeconds = 600
)

// planClips returns the clips Generate makes: genre i mod 4, tempo, key
// and mode drawn from PCG(seed, i), and the split by position: of every 40
// clips (10 per genre), 4 are test, 4 valid, 32 train.
func planClips(cfg GenerateConfig) []Clip {
	clips := make([]Clip, cfg.Clips)
	for i := range clips {
		g := Genres[i%len(Genres)]
		r := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		tr := tempoRange[g]
		split := SplitTrain
		switch (i / len(Genres)) % 10 {
		case 0:
			split = SplitTest
		case 5:
			split = SplitValid
		}
		c := Clip{
			Genre: g, Label: i % len(Genres), Tempo: math.Round((tr[0]+r.Float64()*(tr[1]-tr[0]))*10) / 10,
			Key: 45 + r.IntN(12), Minor: r.IntN(2) == 0, Seconds: cfg.Seconds, Split: split, Seed: r.Uint64(),
		}
		c.ID = fmt.Sprintf("%06d_%s", i, g)
		// The name carries a hash of what sox is asked to do, so a re-run
		// with another seed or length never keeps a stale file.
		h := fnv.New64a()
		fmt.Fprint(h, c.Seconds)
		for _, l := range Arrange(c) {
			fmt.Fprint(h, l.Gain, l.Args())
		}
		c.Path = filepath.Join("clips", fmt.Sprintf("%s_%08x.wav", c.ID, h.Sum64()&0xffffffff))
		clips[i] = c
	}
	return clips
}

// Generate synthesises the clips with sox into cfg.OutDir (clips/*.wav and
// the manifest clips.jsonl). It is resumable: a clip already there with the
// right length is kept; new files are renamed into place when complete.
func Generate(ctx context.Context, cfg GenerateConfig) (GenerateStats, error) {
	start := time.Now()
	st := GenerateStats{Counts: map[string]int{}}
	switch {
	case cfg.OutDir == "":
		return st, errors.New("data: --out is empty")
	case cfg.Clips < len(Genres) || cfg.Clips > MaxClips:
		return st, fmt.Errorf("data: --clips %d: want %d to %d (at least one per genre)", cfg.Clips, len(Genres), MaxClips)
	case !(cfg.Seconds >= 1 && cfg.Seconds <= maxSeconds):
		return st, fmt.Errorf("data: --seconds %v: want 1 to %d", cfg.Seconds, maxSeconds)
	}
	if cfg.Sox == "" {
		cfg.Sox = "sox"
	}
	if _, err := exec.LookPath(cfg.Sox); err != nil {
		return st, fmt.Errorf("data: %s not found (Debian: apt-get install sox; make deps installs it): %w", cfg.Sox, err)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.NumCPU()
	}
	clips := planClips(cfg)
	if err := os.MkdirAll(filepath.Join(cfg.OutDir, "clips"), 0o755); err != nil {
		return st, fmt.Errorf("data: %w", err)
	}
	tmp, err := os.MkdirTemp(cfg.OutDir, ".synth-")
	if err != nil {
		return st, fmt.Errorf("data: %w", err)
	}
	defer os.RemoveAll(tmp)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	var mu sync.Mutex
	var firstErr error
	done := 0
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				made, err := makeClip(ctx, cfg, tmp, clips[i])
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				if made {
					st.Synthesised++
				} else if err == nil {
					st.Skipped++
				}
				done++
				if cfg.Progress != nil {
					cfg.Progress(done, len(clips))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range clips {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return st, firstErr
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	for _, c := range clips {
		st.Counts[c.Split]++
	}
	if err := WriteManifest(filepath.Join(cfg.OutDir, manifestName), clips); err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

// clipSamples is the exact length of a clip in samples.
func clipSamples(seconds float64) int { return int(math.Round(seconds * SampleRate)) }

// makeClip synthesises one clip unless a valid one is there.
func makeClip(ctx context.Context, cfg GenerateConfig, tmp string, c Clip) (bool, error) {
	path := filepath.Join(cfg.OutDir, c.Path)
	if x, err := audio.ReadWAV(path, SampleRate); err == nil && len(x) == clipSamples(c.Seconds) {
		return false, nil
	}
	layers := Arrange(c)
	var mix []string
	for k, l := range layers {
		f := filepath.Join(tmp, fmt.Sprintf("%s_%d.wav", c.ID, k))
		args := append([]string{"-V1", "-R", "-n", "-r", strconv.Itoa(SampleRate), "-c", "1", "-b", "16", f}, l.Args()...)
		if err := runSox(ctx, cfg.Sox, args...); err != nil {
			return false, fmt.Errorf("data: clip %s, layer %s: %w", c.ID, l.Name, err)
		}
		defer os.Remove(f)
		mix = append(mix, "-v", strconv.FormatFloat(l.Gain, 'f', 3, 64), f)
	}
	out := filepath.Join(tmp, filepath.Base(c.Path))
	args := []string{"-V1", "-R"} // -R: repeatable noise and dither
	if len(layers) > 1 {
		args = append(args, "-m")
	}
	args = append(args, mix...)
	n := clipSamples(c.Seconds)
	args = append(args, "-c", "1", "-b", "16", out, "gain", "-n", "-3", "trim", "0", fmt.Sprintf("%ds", n), "pad", "0", fmt.Sprintf("%ds", n))
	if err := runSox(ctx, cfg.Sox, args...); err != nil {
		return false, fmt.Errorf("data: clip %s, mix: %w", c.ID, err)
	}
	x, err := audio.ReadWAV(out, SampleRate)
	if err != nil {
		return false, fmt.Errorf("data: sox wrote an unreadable clip: %w", err)
	}
	if len(x) < n { // pad after trim leaves at least n samples
		return false, fmt.Errorf("data: clip %s has %d samples, want %d", c.ID, len(x), n)
	}
	if len(x) > n { // trim the padding back to exactly n samples
		if err := os.WriteFile(out, audio.EncodeWAV(audio.FloatToInt16(x[:n]), SampleRate), 0o644); err != nil {
			return false, fmt.Errorf("data: %w", err)
		}
	}
	if err := os.Rename(out, path); err != nil {
		return false, fmt.Errorf("data: %w", err)
	}
	return true, nil
}

func runSox(ctx context.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: %v: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// Layer is one instrument of a clip: a sequence of sox effect chains
// (each a note, a chord or a drum hit padded to its slot), rendered by one
// sox process, then mixed with the clip's other layers at Gain.
type Layer struct {
	Name   string
	Gain   float64
	Chains [][]string
}

// Args are the sox effect arguments: the chains joined by ":".
func (l Layer) Args() []string {
	var out []string
	for k, c := range l.Chains {
		if k > 0 {
			out = append(out, ":")
		}
		out = append(out, c...)
	}
	return out
}

// hz is the frequency of a MIDI note.
func hz(note int) string {
	return strconv.FormatFloat(440*math.Pow(2, float64(note-69)/12), 'f', 2, 64)
}

func secs(s float64) string { return strconv.FormatFloat(s, 'f', 4, 64) }

// Arrange composes a clip's layers, deterministically from its seed.
func Arrange(c Clip) []Layer {
	r := rand.New(rand.NewPCG(c.Seed, 7))
	beat := 60 / c.Tempo
	total := c.Seconds + beat // a little more than needed: the mix is trimmed
	scale := []int{0, 2, 4, 5, 7, 9, 11}
	if c.Minor {
		scale = []int{0, 2, 3, 5, 7, 8, 10}
	}
	degree := func(d int) int { // scale degree (any integer) to semitones
		o := d / 7
		if d < 0 && d%7 != 0 {
			o--
		}
		return 12*o + scale[((d%7)+7)%7]
	}
	triad := func(root int) [3]int {
		return [3]int{degree(root), degree(root + 2), degree(root + 4)}
	}
	progression := func() []int { // chord roots (scale degrees), one per bar
		prog := [][]int{{0, 5, 3, 4}, {0, 3, 4, 0}, {0, 4, 5, 3}, {5, 3, 0, 4}}
		return prog[r.IntN(len(prog))]
	}
	// fill repeats one slot's chain builder until the layer lasts total seconds.
	fill := func(slot float64, chain func(k int) []string) [][]string {
		var out [][]string
		for k, t := 0, 0.0; t < total; k, t = k+1, t+slot {
			out = append(out, chain(k))
		}
		return out
	}
	note := func(typ string, f string, dur, slot float64, effects ...string) []string {
		ch := []string{"synth", secs(dur), typ, f}
		ch = append(ch, effects...)
		return append(ch, "pad", "0", secs(slot-dur))
	}
	rest := func(slot float64) []string { return []string{"synth", secs(slot), "sine", "0", "vol", "0"} }
	kick := func(slot float64) []string {
		return note("sine", "150-45", 0.14, slot, "fade", "0", "0.14", "0.11")
	}
	noise := func(dur, slot float64, effects ...string) []string {
		ch := append([]string{"synth", secs(dur), "whitenoise"}, effects...)
		return append(ch, "pad", "0", secs(slot-dur))
	}
	snare := func(slot float64) []string {
		return noise(0.16, slot, "lowpass", "6000", "fade", "0", "0.16", "0.14")
	}
	hat := func(slot float64) []string {
		return noise(0.05, slot, "highpass", "7000", "fade", "0", "0.05", "0.045")
	}
	prog := progression()
	chordAt := func(k int, perBar int) [3]int { return triad(prog[(k/perBar)%len(prog)]) }
	root := c.Key
	var layers []Layer
	switch c.Genre {
	case "ambient":
		bar := 4 * beat
		cutoff := strconv.Itoa(900 + r.IntN(600))
		pad := Layer{Name: "pad", Gain: 1, Chains: fill(bar, func(k int) []string {
			t := chordAt(k, 1)
			typ := []string{"sine", "triangle"}[r.IntN(2)]
			att := bar * (0.25 + 0.2*r.Float64())
			return []string{"synth", secs(bar), typ, hz(root + 12 + t[0]), typ, hz(root + 12 + t[1]), typ, hz(root + 24 + t[2]),
				"remix", "1-3", "lowpass", cutoff, "fade", "q", secs(att), secs(bar), secs(bar * 0.4)}
		})}
		drone := Layer{Name: "drone", Gain: 0.5, Chains: fill(2*bar, func(k int) []string {
			return []string{"synth", secs(2 * bar), "sine", hz(root - 12), "tremolo", secs(0.2 + r.Float64()*0.3), "40"}
		})}
		layers = []Layer{pad, drone}
		if r.IntN(10) < 4 { // sometimes a sparse plucked line, as folk has
			layers = append(layers, Layer{Name: "pluck", Gain: 0.35, Chains: fill(beat, func(k int) []string {
				if r.IntN(3) > 0 {
					return rest(beat)
				}
				t := chordAt(k, 4)
				return note("pluck", hz(root+24+t[r.IntN(3)]), beat, beat)
			})})
		}
	case "folk":
		eighth := beat / 2
		pattern := []int{0, 1, 2, 1, 0, 2, 1, 2}
		if r.IntN(2) == 0 {
			pattern = []int{0, 2, 1, 2, 0, 1, 2, 1}
		}
		melody := Layer{Name: "melody", Gain: 0.9, Chains: fill(eighth, func(k int) []string {
			t := chordAt(k, 8)
			n := root + 24 + t[pattern[k%len(pattern)]]
			if r.IntN(6) == 0 {
				n += 12
			}
			return note("pluck", hz(n), eighth, eighth)
		})}
		bass := Layer{Name: "bass", Gain: 0.8, Chains: fill(beat, func(k int) []string {
			t := chordAt(k, 4)
			return note("pluck", hz(root+t[[]int{0, 2}[k%2]]), beat, beat)
		})}
		layers = []Layer{melody, bass}
		if r.IntN(2) == 0 { // sometimes a shaker on the eighths
			layers = append(layers, Layer{Name: "shaker", Gain: 0.25, Chains: fill(eighth, func(k int) []string { return hat(eighth) })})
		}
	case "rock":
		eighth := beat / 2
		drums := Layer{Name: "drums", Gain: 0.9, Chains: fill(eighth, func(k int) []string {
			switch k % 8 {
			case 0, 4:
				return kick(eighth)
			case 2, 6:
				return snare(eighth)
			}
			return hat(eighth)
		})}
		drive := strconv.Itoa(15 + r.IntN(20))
		if r.IntN(10) < 3 { // sometimes a clean guitar
			drive = "0"
		}
		guitar := Layer{Name: "guitar", Gain: 0.6, Chains: fill(eighth, func(k int) []string {
			t := chordAt(k, 8)
			b := root + t[0]
			typ := []string{"square", "sawtooth"}[r.IntN(2)]
			return []string{"synth", secs(eighth * 0.9), typ, hz(b), typ, hz(b + 7), typ, hz(b + 12), "remix", "1-3",
				"overdrive", drive, "fade", "0", secs(eighth * 0.9), secs(eighth * 0.3), "pad", "0", secs(eighth * 0.1)}
		})}
		layers = []Layer{drums, guitar}
	case "electronic":
		sixteenth := beat / 4
		drums := Layer{Name: "drums", Gain: 1, Chains: fill(beat/2, func(k int) []string {
			if k%2 == 0 {
				return kick(beat / 2)
			}
			return hat(beat / 2)
		})}
		cutoff := strconv.Itoa(1500 + r.IntN(2500))
		bass := Layer{Name: "bass", Gain: 0.6, Chains: fill(sixteenth, func(k int) []string {
			t := chordAt(k, 16)
			n := root + t[0] - 12
			if k%4 == 2 {
				n += 12
			}
			if k%8 == 7 {
				return rest(sixteenth)
			}
			return note("sawtooth", hz(n), sixteenth*0.8, sixteenth, "lowpass", cutoff, "fade", "0", secs(sixteenth*0.8), secs(sixteenth*0.3))
		})}
		lead := Layer{Name: "lead", Gain: 0.35, Chains: fill(2*sixteenth, func(k int) []string {
			t := chordAt(k, 8)
			return note("square", hz(root+24+t[k%3]), sixteenth*1.5, 2*sixteenth, "fade", "0", secs(sixteenth*1.5), secs(sixteenth*0.5))
		})}
		layers = []Layer{drums, bass, lead}
		if r.IntN(10) < 3 { // sometimes a pad under it, as ambient has
			bar := 4 * beat
			layers = append(layers, Layer{Name: "pad", Gain: 0.4, Chains: fill(bar, func(k int) []string {
				t := chordAt(k*16, 16)
				return []string{"synth", secs(bar), "sine", hz(root + 12 + t[0]), "sine", hz(root + 12 + t[1]), "sine", hz(root + 24 + t[2]),
					"remix", "1-3", "fade", "q", secs(bar / 3), secs(bar), secs(bar / 3)}
			})})
		}
	}
	// Background noise of a random colour and level in every clip.
	colour := []string{"pinknoise", "brownnoise", "whitenoise"}[r.IntN(3)]
	layers = append(layers, Layer{Name: "noise", Gain: 0.02 + 0.12*r.Float64(), Chains: [][]string{{"synth", secs(total), colour}}})
	return layers
}

// WriteManifest writes clips as JSON lines, atomically.
func WriteManifest(path string, clips []Clip) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, c := range clips {
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	if err := atomicfile.WriteFile(path, b.Bytes()); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	return nil
}

// DataError is a data directory or manifest that cannot be used (a
// command line exits 2).
type DataError struct {
	Path string
	Err  error
}

func (e *DataError) Error() string { return "data " + e.Path + ": " + e.Err.Error() }
func (e *DataError) Unwrap() error { return e.Err }

// UserError marks it as the user's input.
func (*DataError) UserError() {}

// ReadManifest reads a data directory's manifest.
func ReadManifest(dir string) ([]Clip, error) {
	path := filepath.Join(dir, manifestName)
	f, err := os.Open(path)
	if err != nil {
		return nil, &DataError{path, fmt.Errorf("%w (make one with: torchfit ganvit data --out %s)", err, dir)}
	}
	defer f.Close()
	var clips []Clip
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var c Clip
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, &DataError{path, fmt.Errorf("line %d: %v", line, err)}
		}
		if c.Label < 0 || c.Label >= len(Genres) || Genres[c.Label] != c.Genre {
			return nil, &DataError{path, fmt.Errorf("line %d: genre %q with label %d (genres: %s)", line, c.Genre, c.Label, strings.Join(Genres, ", "))}
		}
		if c.Split != SplitTrain && c.Split != SplitValid && c.Split != SplitTest {
			return nil, &DataError{path, fmt.Errorf("line %d: split %q", line, c.Split)}
		}
		if !(c.Tempo > 0 && c.Tempo < 1000) {
			return nil, &DataError{path, fmt.Errorf("line %d: tempo %v", line, c.Tempo)}
		}
		if c.Path == "" || filepath.IsAbs(c.Path) || strings.HasPrefix(filepath.Clean(c.Path), "..") {
			return nil, &DataError{path, fmt.Errorf("line %d: path %q (want a path inside the data directory)", line, c.Path)}
		}
		clips = append(clips, c)
	}
	if err := sc.Err(); err != nil {
		return nil, &DataError{path, err}
	}
	if len(clips) == 0 {
		return nil, &DataError{path, errors.New("no clips")}
	}
	return clips, nil
}
