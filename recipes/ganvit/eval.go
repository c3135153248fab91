package ganvit

import (
	"context"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strings"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// EvalConfig configures Evaluate.
type EvalConfig struct {
	Checkpoint string
	// Classifier judges the generated spectrograms (default: the
	// checkpoint's own classifier).
	Classifier   string
	Data, Split  string
	Device       torch.Device
	Precision    amp.Precision
	Generated    int // spectrograms generated per genre (0: none)
	Batch        int
	Seed         uint64
	Mels, Frames int64 // when non-zero: the shape the caller expects (checked)
	Log          func(string, ...any)
}

// Limits on what eval generates: at most MaxGenerated spectrograms per
// genre, and at most MaxGeneratedBytes of them in all (they are held in
// memory to be judged): 4 GiB is 1,600 per genre at the seed's 128 mels ×
// 1292 frames.
const (
	MaxGenerated      = 1_000_000
	MaxGeneratedBytes = 4 << 30
)

// check refuses settings that cannot be honoured, before anything is
// loaded: a batch outside [1, recipes.MaxBatch], a count of generated
// spectrograms below 0 or whose spectrograms of shape would not fit in
// MaxGeneratedBytes.
func (c EvalConfig) check(shape Shape) error {
	if err := checkEvalCounts(c.Batch, c.Generated); err != nil {
		return err
	}
	each := int64(len(Genres)) * max(shape.Size(), 1) * 4 // bytes per spectrogram of each genre
	if most := int64(MaxGeneratedBytes) / each; int64(c.Generated) > most {
		return &recipes.ConfigError{Field: "generated", Value: c.Generated,
			Reason: fmt.Sprintf("must be in [0, %d]: %d genres of spectrograms of %v in at most %s", most, len(Genres), shape, torch.FormatBytes(MaxGeneratedBytes))}
	}
	return nil
}

// checkEvalCounts checks eval's --batch-size and --generated against
// their ranges (the shape unknown yet): a *recipes.ConfigError saying the
// range.
func checkEvalCounts(batch, generated int) error {
	for _, f := range []struct {
		name         string
		v, min, most int
	}{{"batch-size", batch, 1, recipes.MaxBatch}, {"generated", generated, 0, MaxGenerated}} {
		if f.v < f.min || f.v > f.most {
			return &recipes.ConfigError{Field: f.name, Value: f.v, Reason: fmt.Sprintf("must be in [%d, %d]", f.min, f.most)}
		}
	}
	return nil
}

// GenreRow is how the generator did for one genre.
type GenreRow struct {
	Genre             string
	N, Correct        int
	Asked, Produced   float64 // mean brightness asked for and measured on the generated spectrograms
	RealAcc, RealN    int     // the judge on the real clips of this genre (correct, of)
	ProducedBrightErr float64 // mean |produced − asked| brightness
}

// EvalResult is what Evaluate measured.
type EvalResult struct {
	Split      string
	Accuracy   *Accuracy // nil without a classifier
	Genres     []GenreRow
	BrightCorr float64 // correlation of asked and produced brightness over all generated
	JudgedBy   string
	Shape      Shape
}

// Table renders the result.
func (r EvalResult) Table() string {
	var b strings.Builder
	if a := r.Accuracy; a != nil {
		fmt.Fprintf(&b, "%s split (%d clips): accuracy %.3f; %s\n", r.Split, a.N, a.Value(), perClass(*a))
	}
	if len(r.Genres) > 0 {
		fmt.Fprintf(&b, "generated spectrograms judged by %s (conditions of the %s split's clips):\n", r.JudgedBy, r.Split)
		fmt.Fprintf(&b, "| genre asked | generated | classified as asked | judge on real clips | brightness asked | brightness produced | mean abs error |\n|---|---:|---:|---:|---:|---:|---:|\n")
		var n, c int
		for _, g := range r.Genres {
			real := "-"
			if g.RealN > 0 {
				real = fmt.Sprintf("%.3f", float64(g.RealAcc)/float64(g.RealN))
			}
			fmt.Fprintf(&b, "| %s | %d | %.3f | %s | %.3f | %.3f | %.3f |\n", g.Genre, g.N, float64(g.Correct)/float64(max(1, g.N)), real, g.Asked, g.Produced, g.ProducedBrightErr)
			n, c = n+g.N, c+g.Correct
		}
		fmt.Fprintf(&b, "all: %d generated, %.3f classified as the genre asked for; brightness asked vs produced: correlation %.3f\n", n, float64(c)/float64(max(1, n)), r.BrightCorr)
	}
	return b.String()
}

// Evaluate scores a checkpoint: its classifier's accuracy on a split, and
// its generator per genre — spectrograms generated with the conditions
// (tempo, brightness) and genre of the split's clips, classified by a
// classifier (the checkpoint's or cfg.Classifier's), and their measured
// brightness against the one asked for.
func Evaluate(ctx context.Context, cfg EvalConfig) (res EvalResult, err error) {
	err = torch.Main().DoErr(func() error {
		res, err = evaluate(ctx, cfg)
		return err
	})
	return res, err
}

func evaluate(ctx context.Context, cfg EvalConfig) (EvalResult, error) {
	res := EvalResult{Split: cfg.Split}
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	// A negative size was a check silently skipped.
	if err := recipes.CheckRanges(recipes.Between("n-mels", cfg.Mels, 0, 1024), recipes.Between("frames", cfg.Frames, 0, 1<<16)); err != nil {
		return res, err
	}
	f, err := ckpt.ReadParts(cfg.Checkpoint, "meta", "classifier", "generator") // not the optimizers' state
	if err != nil {
		return res, err
	}
	defer f.Free()
	meta, err := readMeta(f)
	if err != nil {
		return res, err
	}
	shape := meta.Shape()
	res.Shape = shape
	want := shape
	if cfg.Mels > 0 {
		want.Mels = cfg.Mels
	}
	if cfg.Frames > 0 {
		want.Frames = cfg.Frames
	}
	if want != shape {
		return res, &ShapeError{Path: cfg.Checkpoint, Want: shape, Have: want}
	}
	if err := cfg.check(shape); err != nil {
		return res, err
	}
	// The judge's file is checked before anything is logged.
	var jf *ckpt.File
	var jm Meta
	if cfg.Classifier != "" {
		if jf, err = ckpt.ReadParts(cfg.Classifier, "meta", "classifier"); err != nil {
			return res, err
		}
		defer jf.Free()
		if jm, err = readMeta(jf); err != nil {
			return res, err
		}
		if !jf.Has("classifier") {
			return res, checkpointError(cfg.Classifier, fmt.Errorf("has no classifier"))
		}
		if jm.Shape() != shape {
			return res, &ShapeError{Path: cfg.Classifier, Want: jm.Shape(), Have: shape}
		}
	}
	if cfg.Generated > 0 && jf == nil && !f.Has("classifier") {
		// Asked for what cannot be done: refused before any work.
		return res, &recipes.ConfigError{Field: "generated", Value: cfg.Generated,
			Reason: fmt.Sprintf("needs a classifier to judge the generated spectrograms, and %s has none: pass --classifier CHECKPOINT", cfg.Checkpoint)}
	}
	specs, err := LoadSpecs(ctx, cfg.Data, cfg.Split, shape, 0)
	if err != nil {
		return res, err
	}
	meta.Norm.Apply(specs)
	logf("%s split: %d clips, spectrograms of %v", cfg.Split, specs.Len(), shape)

	var judge *ViT
	if f.Has("classifier") {
		v, err := NewViT(meta.ViT)
		if err != nil {
			return res, checkpointError(cfg.Checkpoint, err)
		}
		defer nn.Free(v)
		if err := f.Module("classifier", v); err != nil {
			return res, err
		}
		nn.To(v, cfg.Device, torch.Float32)
		acc, err := Predict(ctx, v, specs, cfg.Device, cfg.Precision, cfg.Batch)
		if err != nil {
			return res, err
		}
		res.Accuracy = &acc
		judge, res.JudgedBy = v, cfg.Checkpoint+"'s classifier"
	}
	if jf != nil {
		v, err := NewViT(jm.ViT)
		if err != nil {
			return res, checkpointError(cfg.Classifier, err)
		}
		defer nn.Free(v)
		if err := jf.Module("classifier", v); err != nil {
			return res, err
		}
		nn.To(v, cfg.Device, torch.Float32)
		judge, res.JudgedBy = v, cfg.Classifier+"'s classifier"
	}
	if cfg.Generated == 0 {
		return res, nil
	}
	realAcc, err := Predict(ctx, judge, specs, cfg.Device, cfg.Precision, cfg.Batch)
	if err != nil {
		return res, err
	}
	g := NewGenerator(meta.GAN)
	defer nn.Free(g)
	if err := f.Module("generator", g); err != nil {
		return res, err
	}
	nn.To(g, cfg.Device, torch.Float32)
	nn.SetTraining(g, false)
	// Conditions: the split's clips of each genre, drawn with replacement.
	rng := mrand.New(mrand.NewPCG(cfg.Seed, 0xe7a1))
	gen := &Specs{Shape: shape}
	for k := range Genres {
		var idx []int
		for i, l := range specs.Labels {
			if int(l) == k {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		for j := 0; j < cfg.Generated; j++ {
			i := idx[rng.IntN(len(idx))]
			gen.Cond = append(gen.Cond, specs.Cond[i])
			gen.Labels = append(gen.Labels, int64(k))
			gen.Tempo = append(gen.Tempo, specs.Tempo[i])
			gen.Brightness = append(gen.Brightness, specs.Brightness[i])
		}
	}
	torch.ManualSeed(cfg.Seed)
	gen.Data, err = GenerateSpecs(g, cfg.Device, cfg.Precision, gen.Cond, gen.Labels, cfg.Batch)
	if err != nil {
		return res, err
	}
	acc, err := Predict(ctx, judge, gen, cfg.Device, cfg.Precision, cfg.Batch)
	if err != nil {
		return res, err
	}
	rows := make([]GenreRow, len(Genres))
	var asked, produced []float64
	for i, data := range gen.Data {
		k := gen.Labels[i]
		r := &rows[k]
		r.N++
		if acc.Pred[i] == k {
			r.Correct++
		}
		pb := Brightness(data, shape)
		r.Asked += gen.Brightness[i]
		r.Produced += pb
		r.ProducedBrightErr += math.Abs(pb - gen.Brightness[i])
		asked, produced = append(asked, gen.Brightness[i]), append(produced, pb)
	}
	for k := range rows {
		rows[k].Genre = Genres[k]
		rows[k].RealAcc, rows[k].RealN = realAcc.PerClass[k].Correct, realAcc.PerClass[k].N
		if n := float64(rows[k].N); n > 0 {
			rows[k].Asked /= n
			rows[k].Produced /= n
			rows[k].ProducedBrightErr /= n
		}
	}
	res.Genres = rows
	res.BrightCorr = correlation(asked, produced)
	return res, nil
}

func correlation(a, b []float64) float64 {
	ma, sa := meanStd(a)
	mb, sb := meanStd(b)
	var c float64
	for i := range a {
		c += (a[i] - ma) * (b[i] - mb)
	}
	return c / float64(max(1, len(a))) / (sa * sb)
}
