package clip

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
)

// Scores are a model's results on held-out images.
type Scores struct {
	// ZeroShot is the zero-shot accuracy over every class of the kind
	// (cars: 96 colour × type × direction classes): each image is given
	// the class whose prompt embedding (the mean over the held-out
	// templates) is nearest.
	ZeroShot float64
	// Attr is the zero-shot accuracy per class attribute (color, type,
	// direction): how often the predicted class has the image's value.
	Attr map[string]float64
	// R1 is text→image recall@1: each image's held-out caption ranks the
	// held-out images; a hit is a top image that has every attribute the
	// caption names (the images of one class are equally right answers).
	R1 float64
	// Loss is the contrastive loss of the (image, caption) pairs in
	// batches of LossBatch.
	Loss      float64
	LossBatch int
	N         int // images
	Classes   int
}

// Values returns the scores as evaluation values (metrics, log lines).
func (s Scores) Values(prefix string) map[string]float64 {
	v := map[string]float64{prefix + "zero_shot": s.ZeroShot, prefix + "r1": s.R1, prefix + "loss": s.Loss}
	for k, a := range s.Attr {
		v[prefix+k] = a
	}
	return v
}

// EvalOptions say how Score runs.
type EvalOptions struct {
	Device     torch.Device
	Precision  amp.Precision // autocast for the forward passes (fp32: none)
	MicroBatch int           // images (and captions) per forward; halved on out-of-memory
	LossBatch  int           // pairs per contrastive loss (the effective batch)
}

// Score evaluates the model on items (held-out images with held-out
// captions) under NoGrad in eval mode, in micro-batches each released
// before the next; only the embeddings are kept, on the CPU. An
// out-of-memory error halves the micro-batch and carries on.
func Score(m *Model, tok *Tokenizer, set *Set, items []Item, o EvalOptions) (Scores, error) {
	var s Scores
	if len(items) == 0 {
		return s, &DataError{set.Dir, errors.New("no held-out images to evaluate on")}
	}
	if o.MicroBatch < 1 {
		o.MicroBatch = 64
	}
	if o.LossBatch < 2 {
		o.LossBatch = 128
	}
	training := m.Training()
	nn.SetTraining(m, false)
	defer nn.SetTraining(m, training)
	defer torch.EmptyCache()

	classes := set.Kind.Classes()
	var prompts []string
	for _, c := range classes {
		for _, t := range set.Kind.HeldOut {
			prompts = append(prompts, Caption(t, c))
		}
	}
	captions := make([]string, len(items))
	for i, it := range items {
		captions[i] = it.Caption
	}
	var img, txt, cls *torch.Tensor // normalised embeddings on the CPU, float32
	defer func() {
		for _, t := range []*torch.Tensor{img, txt, cls} {
			if t != nil {
				t.Free()
			}
		}
	}()
	var err error
	if img, err = embedAll(m, len(items), &o, func(i int) (*torch.Tensor, error) {
		px, err := LoadImage(filepath.Join(set.Dir, items[i].File), int(m.Cfg.ImageResolution))
		if err != nil {
			return nil, &DataError{set.Dir, err}
		}
		return torch.FromSlice(px, []int64{3, m.Cfg.ImageResolution, m.Cfg.ImageResolution}), nil
	}, m.EncodeImage); err != nil {
		return s, err
	}
	text := func(texts []string) func(i int) (*torch.Tensor, error) {
		return func(i int) (*torch.Tensor, error) { return torch.FromSlice(tok.Encode(texts[i]), nil), nil }
	}
	if txt, err = embedAll(m, len(items), &o, text(captions), m.EncodeText); err != nil {
		return s, err
	}
	if cls, err = embedAll(m, len(prompts), &o, text(prompts), m.EncodeText); err != nil {
		return s, err
	}
	err = torch.Try(func() {
		torch.Tidy(func() {
			torch.NoGrad(func() {
				nt := int64(len(set.Kind.HeldOut))
				// Prompt ensembling: the mean of a class's template
				// embeddings, normalised again.
				proto := cls.Reshape(int64(len(classes)), nt, -1).MeanDim([]int64{1}, false)
				proto = proto.Div(proto.NormDim(2, []int64{-1}, true))
				pred := img.Matmul(proto.T()).Argmax(-1, false).Int64s()
				top := txt.Matmul(img.T()).Argmax(-1, false).Int64s()
				s.Attr = map[string]float64{}
				for i, it := range items {
					p := classes[pred[i]]
					if set.Kind.SameClass(p, it.Attrs) {
						s.ZeroShot++
					}
					for _, k := range set.Kind.ClassKeys {
						if p[k] == it.Attrs[k] {
							s.Attr[k]++
						}
					}
					if set.Kind.SameClass(items[top[i]].Attrs, it.Attrs) {
						s.R1++
					}
				}
				n := float64(len(items))
				s.ZeroShot /= n
				s.R1 /= n
				for k := range s.Attr {
					s.Attr[k] /= n
				}
				// The contrastive loss of the pairs, batch by batch.
				var total float64
				for i := 0; i < len(items); i += o.LossBatch {
					j := min(i+o.LossBatch, len(items))
					if j-i < 2 {
						break
					}
					l := m.Loss(img.Narrow(0, int64(i), int64(j-i)).ToDevice(o.Device), txt.Narrow(0, int64(i), int64(j-i)).ToDevice(o.Device))
					total += l.Item() * float64(j-i)
					s.LossBatch = max(s.LossBatch, j-i)
				}
				s.Loss = total / n
			})
		})
	})
	s.N, s.Classes = len(items), len(classes)
	return s, err
}

// embedAll embeds n inputs (get(i) builds input i on the CPU) in
// micro-batches on the device, returning the normalised embeddings on the
// CPU as float32 (n, dim).
func embedAll(m *Model, n int, o *EvalOptions, get func(int) (*torch.Tensor, error), encode func(*torch.Tensor) *torch.Tensor) (*torch.Tensor, error) {
	var parts []*torch.Tensor
	defer func() {
		for _, p := range parts {
			p.Free()
		}
	}()
	for i := 0; i < n; {
		j := min(i+o.MicroBatch, n)
		var part *torch.Tensor
		err := torch.TidyErr(func() error {
			xs := make([]*torch.Tensor, 0, j-i)
			for k := i; k < j; k++ {
				x, err := get(k)
				if err != nil {
					return err
				}
				xs = append(xs, x)
			}
			batch := torch.Stack(xs, 0).ToDevice(o.Device)
			var e *torch.Tensor
			torch.NoGrad(func() {
				if o.Precision != "" && o.Precision != amp.FP32 {
					amp.Autocast(o.Device, o.Precision.DType(), func() { e = encode(batch) })
				} else {
					e = encode(batch)
				}
				e = e.ToDType(torch.Float32)
				e = e.Div(e.NormDim(2, []int64{-1}, true)).ToDevice(torch.CPU)
			})
			part = e.Keep()
			return nil
		})
		if errors.Is(err, torch.ErrOutOfMemory) && o.MicroBatch > 1 {
			torch.EmptyCache()
			o.MicroBatch /= 2
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("clip: evaluation: %w", err)
		}
		parts = append(parts, part)
		i = j
	}
	var out *torch.Tensor
	err := torch.Try(func() { out = torch.Cat(parts, 0).Keep() })
	return out, err
}

// EvalResult is `torchfit clip eval`.
type EvalResult struct {
	Scores
	Preset string
	Split  string
}

// Evaluate scores a checkpoint (or a CLIP state dict) on a split of a data
// directory: zero-shot accuracy and text→image R@1 with the held-out
// templates.
func Evaluate(path, dir, split string, dev torch.Device, precision string, micro int) (res EvalResult, err error) {
	torch.Main().Do(func() { res, err = evaluate(path, dir, split, dev, precision, micro) })
	return res, err
}

func evaluate(path, dir, split string, dev torch.Device, precision string, micro int) (EvalResult, error) {
	res := EvalResult{Split: split}
	if split != SplitTrain && split != SplitValid && split != SplitTest {
		return res, recipes.Usagef("--split %q: want train, valid or test", split)
	}
	if err := recipes.CheckRanges(recipes.Between("batch-size", int64(micro), 1, recipes.MaxBatch)); err != nil {
		return res, err
	}
	set, err := ReadSet(dir)
	if err != nil {
		return res, err
	}
	items := set.Split(split)
	if len(items) == 0 {
		return res, &DataError{dir, fmt.Errorf("no %s images", split)}
	}
	w, err := ReadWeights(path)
	if err != nil {
		return res, err
	}
	defer w.Free()
	m, err := w.Load(path)
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	if dev != torch.CPU {
		nn.To(m, dev, torch.Float32)
	}
	tok, err := tokenizerFor(w.Meta)
	if err != nil {
		return res, checkpointError(path, err)
	}
	p, err := amp.ParsePrecision(precision, dev)
	if err != nil {
		return res, recipes.Usagef("--mixed-precision %s: %v", precision, err)
	}
	res.Preset = w.Meta.Preset
	if res.Preset == "" {
		res.Preset = presetOf(w.Meta.Config)
	}
	res.Scores, err = Score(m, tok, set, items, EvalOptions{Device: dev, Precision: p.Precision, MicroBatch: micro, LossBatch: 128})
	return res, err
}
