package clip

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	_ "image/jpeg" // real photos in a data directory may be JPEG

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// Attrs are an image's attributes by name: color, type, direction for a
// car; color, shape, size, direction, phrase for a shape.
type Attrs map[string]string

// Kind is a data set's kind: how its images are drawn, its caption
// templates (for training and held out for evaluation) and the attributes
// whose combinations are its zero-shot classes.
type Kind struct {
	Name           string
	Train, HeldOut []string
	ClassKeys      []string
	draw           func(*rand.Rand, int) (*image.RGBA, Attrs)
}

// Kinds: cars (the recipe's data) and shapes (the pretraining set).
var (
	Cars   = Kind{Name: "cars", Train: carTrain, HeldOut: carHeldOut, ClassKeys: []string{"color", "type", "direction"}, draw: drawCar}
	Shapes = Kind{Name: "shapes", Train: shapeTrain, HeldOut: shapeHeldOut, ClassKeys: []string{"color", "phrase"}, draw: drawShape}
)

// kindByName returns the kind called name.
func kindByName(name string) (Kind, error) {
	switch name {
	case "cars":
		return Cars, nil
	case "shapes":
		return Shapes, nil
	}
	return Kind{}, fmt.Errorf("unknown data kind %q (want cars or shapes)", name)
}

// Classes returns every zero-shot class: each combination of the class
// attributes' values (cars: 8 colours × 6 types × 2 directions = 96).
func (k Kind) Classes() []Attrs {
	var out []Attrs
	switch k.Name {
	case "cars":
		for _, c := range Colors() {
			for _, t := range BodyTypes() {
				for _, d := range Directions {
					out = append(out, Attrs{"color": c, "type": t, "direction": d})
				}
			}
		}
	case "shapes":
		for _, c := range Colors() {
			for _, s := range ShapeNames {
				if pointing(s) {
					for _, d := range Directions {
						out = append(out, Attrs{"color": c, "shape": s, "direction": d, "phrase": s + " pointing " + d})
					}
				} else {
					out = append(out, Attrs{"color": c, "shape": s, "phrase": s})
				}
			}
		}
	}
	return out
}

// ClassOf returns the index in Classes of the class an image's attributes
// name (−1 when none).
func (k Kind) ClassOf(a Attrs) int {
	for i, c := range k.Classes() {
		if k.SameClass(a, c) {
			return i
		}
	}
	return -1
}

// SameClass reports whether a and b agree on every class attribute.
func (k Kind) SameClass(a, b Attrs) bool {
	for _, key := range k.ClassKeys {
		if a[key] != b[key] {
			return false
		}
	}
	return true
}

// Caption fills a template with attributes ({shape} is the phrase: "arrow
// pointing left").
func Caption(template string, a Attrs) string {
	return strings.NewReplacer("{color}", a["color"], "{type}", a["type"], "{direction}", a["direction"],
		"{size}", a["size"], "{shape}", a["phrase"]).Replace(template)
}

// Splits: one image in 20 is validation, two in 20 are the held-out test
// images; the rest train.
const (
	SplitTrain = "train"
	SplitValid = "valid"
	SplitTest  = "test"
)

func splitOf(i int) string {
	switch i % 20 {
	case 3:
		return SplitValid
	case 7, 15:
		return SplitTest
	}
	return SplitTrain
}

// Item is one image of a data set: its file (relative to the directory),
// split, caption and attributes.
type Item struct {
	File    string `json:"file"`
	Split   string `json:"split"`
	Caption string `json:"caption"`
	Attrs   Attrs  `json:"attrs"`
}

// Meta describes a generated data set (meta.json).
type Meta struct {
	Kind   string `json:"kind"`
	Images int    `json:"images"`
	Size   int    `json:"size"`
	Seed   uint64 `json:"seed"`
}

// GenerateConfig is `torchfit clip data`.
type GenerateConfig struct {
	Out     string
	Kind    string // cars or shapes
	Images  int
	Size    int // pixels per side
	Seed    uint64
	Workers int // 0: 4
}

// GenerateStats is what Generate did.
type GenerateStats struct {
	Written, Skipped int
	Counts           map[string]int // images per split
	Elapsed          time.Duration
}

// DataError is a data directory that cannot be used: missing, of another
// kind or settings, or with a bad manifest or image.
type DataError struct {
	Path string
	Err  error
}

func (e *DataError) Error() string { return fmt.Sprintf("clip: data %s: %v", e.Path, e.Err) }
func (e *DataError) Unwrap() error { return e.Err }

// UserError marks it as the user's input (a command line exits 2).
func (*DataError) UserError() {}

// Generate draws a data set into cfg.Out: images/NNNNNN.png and
// manifest.jsonl (one Item per line), meta.json. Image i depends only on
// (Seed, i), so the same settings give the same files, and a larger
// --images extends a set. A directory holding a set of another kind, size
// or seed is refused, never overwritten; images already there are kept.
func Generate(ctx context.Context, cfg GenerateConfig) (GenerateStats, error) {
	start := time.Now()
	st := GenerateStats{Counts: map[string]int{}}
	kind, err := kindByName(cfg.Kind)
	if err != nil {
		return st, &recipes.ConfigError{Field: "kind", Value: cfg.Kind, Err: err}
	}
	switch {
	case cfg.Images < 20:
		return st, &recipes.ConfigError{Field: "images", Value: cfg.Images, Reason: "at least 20 (one in 20 is validation, two test)"}
	case cfg.Images > 10_000_000:
		return st, &recipes.ConfigError{Field: "images", Value: cfg.Images, Reason: "at most 10,000,000"}
	case cfg.Size < 16 || cfg.Size > 1024:
		return st, &recipes.ConfigError{Field: "size", Value: cfg.Size, Reason: "between 16 and 1024 pixels"}
	case cfg.Out == "":
		return st, &recipes.ConfigError{Field: "out", Value: cfg.Out, Reason: "empty"}
	case cfg.Workers < 0 || cfg.Workers > recipes.MaxWorkers:
		return st, &recipes.ConfigError{Field: "workers", Value: cfg.Workers, Reason: fmt.Sprintf("must be in [0, %d] (0: 4)", recipes.MaxWorkers)}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	meta := Meta{Kind: kind.Name, Images: cfg.Images, Size: cfg.Size, Seed: cfg.Seed}
	if old, err := readMeta(cfg.Out); err == nil {
		if old.Kind != meta.Kind || old.Size != meta.Size || old.Seed != meta.Seed {
			return st, &DataError{cfg.Out, fmt.Errorf("holds a %s set of %d×%d images with seed %d; these settings would draw another (choose another --out)",
				old.Kind, old.Size, old.Size, old.Seed)}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Out, "images"), 0o755); err != nil {
		return st, &DataError{cfg.Out, err}
	}
	items := make([]Item, cfg.Images)
	var mu sync.Mutex
	var firstErr error
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				it, wrote, err := drawItem(kind, cfg, i)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				items[i] = it
				if wrote {
					st.Written++
				} else {
					st.Skipped++
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < cfg.Images; i++ {
		if ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return st, firstErr
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return st, err
		}
		st.Counts[it.Split]++
	}
	if err := atomicfile.WriteFile(filepath.Join(cfg.Out, "manifest.jsonl"), buf.Bytes()); err != nil {
		return st, err
	}
	mb, _ := json.MarshalIndent(meta, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(cfg.Out, "meta.json"), append(mb, '\n')); err != nil {
		return st, err
	}
	st.Elapsed = time.Since(start)
	return st, nil
}

// drawItem draws image i (unless its file is there) and returns its item.
func drawItem(kind Kind, cfg GenerateConfig, i int) (Item, bool, error) {
	r := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
	img, attrs := kind.draw(r, cfg.Size)
	split := splitOf(i)
	templates := kind.Train
	if split != SplitTrain {
		templates = kind.HeldOut
	}
	it := Item{File: fmt.Sprintf("images/%06d.png", i), Split: split, Caption: Caption(templates[r.IntN(len(templates))], attrs), Attrs: attrs}
	path := filepath.Join(cfg.Out, it.File)
	if _, err := os.Stat(path); err == nil {
		return it, false, nil
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return it, false, err
	}
	return it, true, atomicfile.WriteFile(path, buf.Bytes())
}

func readMeta(dir string) (Meta, error) {
	var m Meta
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, &DataError{dir, fmt.Errorf("meta.json: %v", err)}
	}
	return m, nil
}

// Set is a data directory read: its kind and the items of every split.
type Set struct {
	Dir   string
	Kind  Kind
	Meta  Meta
	Items []Item
}

// Split returns the items of one split.
func (s *Set) Split(name string) []Item {
	var out []Item
	for _, it := range s.Items {
		if it.Split == name {
			out = append(out, it)
		}
	}
	return out
}

// maxManifest bounds a manifest's size (10 million images of long
// captions).
const maxManifest = 4 << 30

// ReadSet reads a data directory (meta.json and manifest.jsonl), checking
// that every item's split and class attributes are known and its file
// exists. The images are read when the loader asks for them.
func ReadSet(dir string) (*Set, error) {
	if _, err := os.Stat(filepath.Join(dir, "manifest.jsonl")); err != nil {
		return nil, &DataError{dir, fmt.Errorf("no manifest.jsonl: create a data set with `torchfit clip data --out %s`", dir)}
	}
	meta, err := readMeta(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, &DataError{dir, fmt.Errorf("no meta.json (it names the data set's kind: cars or shapes)")}
	}
	if err != nil {
		return nil, err
	}
	kind, err := kindByName(meta.Kind)
	if err != nil {
		return nil, &DataError{dir, fmt.Errorf("meta.json: %v", err)}
	}
	f, err := os.Open(filepath.Join(dir, "manifest.jsonl"))
	if err != nil {
		return nil, &DataError{dir, err}
	}
	defer f.Close()
	set := &Set{Dir: dir, Kind: kind, Meta: meta}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var it Item
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&it); err != nil {
			return nil, &DataError{dir, fmt.Errorf("manifest.jsonl line %d: %v", line, err)}
		}
		if it.Split != SplitTrain && it.Split != SplitValid && it.Split != SplitTest {
			return nil, &DataError{dir, fmt.Errorf("manifest.jsonl line %d: split %q (want train, valid or test)", line, it.Split)}
		}
		if it.File == "" || filepath.IsAbs(it.File) || strings.HasPrefix(filepath.Clean(it.File), "..") {
			return nil, &DataError{dir, fmt.Errorf("manifest.jsonl line %d: file %q is not a path inside the directory", line, it.File)}
		}
		if strings.TrimSpace(it.Caption) == "" {
			return nil, &DataError{dir, fmt.Errorf("manifest.jsonl line %d: empty caption", line)}
		}
		if kind.ClassOf(it.Attrs) < 0 {
			return nil, &DataError{dir, fmt.Errorf("manifest.jsonl line %d: attributes %v are no %s class", line, it.Attrs, kind.Name)}
		}
		if err := checkImage(filepath.Join(dir, it.File)); err != nil {
			var big *ImageSizeError
			if errors.As(err, &big) {
				return nil, &DataError{dir, err}
			}
			return nil, &DataError{dir, fmt.Errorf("manifest.jsonl line %d: %v", line, err)}
		}
		set.Items = append(set.Items, it)
	}
	if err := sc.Err(); err != nil {
		return nil, &DataError{dir, fmt.Errorf("manifest.jsonl: %v", err)}
	}
	if len(set.Items) == 0 {
		return nil, &DataError{dir, fmt.Errorf("manifest.jsonl lists no images")}
	}
	return set, nil
}

// CLIP's image normalisation (OpenAI's preprocess).
var (
	imageMean = [3]float32{0.48145466, 0.4578275, 0.40821073}
	imageStd  = [3]float32{0.26862954, 0.26130258, 0.27577711}
)

// MaxImagePixels bounds an image's pixels (2^26: 8192 × 8192), checked
// from its header before it is decoded: decoding holds every pixel (a PNG
// whose header claims 60000 × 60000 asked for 14.4 GB).
const MaxImagePixels = 1 << 26

// ImageSizeError is an image whose header claims more than MaxImagePixels.
type ImageSizeError struct {
	Path          string
	Width, Height int
}

func (e *ImageSizeError) Error() string {
	return fmt.Sprintf("%s: an image of %d × %d pixels: at most %d pixels (8192 × 8192)", e.Path, e.Width, e.Height, MaxImagePixels)
}

// UserError marks it as the user's input (a command line exits 2).
func (*ImageSizeError) UserError() {}

// LoadImage decodes an image file, centre-crops it to a square, resizes it
// to res×res (bilinear) and normalises it as CLIP does: float32 (3, res,
// res). An image of more than MaxImagePixels is an *ImageSizeError,
// refused from its header before any pixel is decoded.
func LoadImage(path string, res int) ([]float32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	if err := checkHeader(path, r); err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.Reset(f)
	img, _, err := image.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pixels(img, res), nil
}

// checkImage reads an image file's header: an image (PNG, JPEG) of at
// most MaxImagePixels, or an error (an *ImageSizeError for one larger).
func checkImage(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return checkHeader(path, bufio.NewReader(f))
}

func checkHeader(path string, r io.Reader) error {
	cfg, _, err := image.DecodeConfig(r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if int64(cfg.Width)*int64(cfg.Height) > MaxImagePixels {
		return &ImageSizeError{Path: path, Width: cfg.Width, Height: cfg.Height}
	}
	return nil
}

// pixels turns an image into CLIP's normalised (3, res, res) float32.
func pixels(img image.Image, res int) []float32 {
	b := img.Bounds()
	side := min(b.Dx(), b.Dy())
	ox, oy := b.Min.X+(b.Dx()-side)/2, b.Min.Y+(b.Dy()-side)/2
	out := make([]float32, 3*res*res)
	at := func(x, y int) [3]float32 {
		r, g, bl, _ := img.At(ox+x, oy+y).RGBA()
		return [3]float32{float32(r) / 65535, float32(g) / 65535, float32(bl) / 65535}
	}
	scale := float64(side) / float64(res)
	for y := 0; y < res; y++ {
		for x := 0; x < res; x++ {
			var p [3]float32
			if side == res {
				p = at(x, y)
			} else { // bilinear, pixel centres aligned (align_corners=False)
				fx := (float64(x)+0.5)*scale - 0.5
				fy := (float64(y)+0.5)*scale - 0.5
				x0, y0 := int(max(0, fx)), int(max(0, fy))
				x1, y1 := min(x0+1, side-1), min(y0+1, side-1)
				tx, ty := float32(max(0, fx)-float64(x0)), float32(max(0, fy)-float64(y0))
				a, bb, c, d := at(x0, y0), at(x1, y0), at(x0, y1), at(x1, y1)
				for k := range p {
					p[k] = (a[k]*(1-tx)+bb[k]*tx)*(1-ty) + (c[k]*(1-tx)+d[k]*tx)*ty
				}
			}
			for k := range p {
				out[k*res*res+y*res+x] = (p[k] - imageMean[k]) / imageStd[k]
			}
		}
	}
	return out
}

// Dataset is a split of a data set for the loader: samples "image" (3,
// res, res) float32 and "text" (context) int64 token ids.
type Dataset struct {
	Set   *Set
	Items []Item
	Res   int
	Tok   *Tokenizer
}

// Len is the number of images.
func (d *Dataset) Len() int { return len(d.Items) }

// Get loads image i and tokenises its caption.
func (d *Dataset) Get(i int) (data.Sample, error) {
	it := d.Items[i]
	px, err := LoadImage(filepath.Join(d.Set.Dir, it.File), d.Res)
	if err != nil {
		return nil, &DataError{d.Set.Dir, err}
	}
	ids := d.Tok.Encode(it.Caption)
	return data.Sample{
		"image": torch.FromSlice(px, []int64{3, int64(d.Res), int64(d.Res)}),
		"text":  torch.FromSlice(ids, nil),
	}, nil
}

// vocabularyWords returns every word of every kind's templates and
// attributes, sorted: the tokenizer's vocabulary.
func vocabularyWords() []string {
	seen := map[string]bool{}
	add := func(s string) {
		for _, w := range strings.Fields(s) {
			if !strings.HasPrefix(w, "{") {
				seen[w] = true
			}
		}
	}
	for _, k := range []Kind{Cars, Shapes} {
		for _, t := range slices.Concat(k.Train, k.HeldOut) {
			add(t)
		}
	}
	for _, s := range slices.Concat(Colors(), BodyTypes(), Directions, ShapeNames, []string{"small", "large", "pointing"}) {
		add(s)
	}
	words := make([]string, 0, len(seen))
	for w := range seen {
		words = append(words, w)
	}
	sort.Strings(words)
	return words
}
