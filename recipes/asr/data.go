package asr

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"

	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// Corpus is a manifest whose items are computed on the fly: Get reads the
// WAV file and returns its features and token ids. It is safe for
// concurrent Get calls (the Dataset adapter's workers).
type Corpus struct {
	Utts  []speech.Utterance
	Dir   string // manifest paths are relative to Dir
	Vocab *Vocab
	Feat  *Featurizer

	augment *SpecAugment
	seed    uint64
	epoch   atomic.Uint64
}

// LoadCorpus reads a JSONL manifest; paths in it are relative to its directory.
func LoadCorpus(manifest string, vocab *Vocab, feat *Featurizer) (*Corpus, error) {
	if vocab == nil || feat == nil {
		return nil, fmt.Errorf("corpus %s: vocab and featurizer are required", manifest)
	}
	utts, err := speech.ReadManifest(manifest)
	if err != nil {
		return nil, err
	}
	return &Corpus{Utts: utts, Dir: filepath.Dir(manifest), Vocab: vocab, Feat: feat}, nil
}

// WithSpecAugment makes Get apply SpecAugment (training). Masks depend on
// seed, the epoch (SetEpoch) and the item index, so a run is reproducible
// whatever order or worker fetches an item.
func (c *Corpus) WithSpecAugment(a SpecAugment, seed uint64) *Corpus {
	c.augment, c.seed = &a, seed
	return c
}

// SetEpoch changes the SpecAugment masks drawn for each item.
func (c *Corpus) SetEpoch(e int) { c.epoch.Store(uint64(e)) }

// Len is the number of utterances.
func (c *Corpus) Len() int { return len(c.Utts) }

// Path is the file path of item i.
func (c *Corpus) Path(i int) string {
	return filepath.Join(c.Dir, filepath.FromSlash(c.Utts[i].Path))
}

// Frames is the feature length of item i from its manifest duration (for
// length-bucketed batching without reading audio); it may be off by one.
func (c *Corpus) Frames(i int) int {
	return c.Feat.Frames(int(c.Utts[i].Duration * float64(c.Feat.SampleRate)))
}

// Get returns item i: features (T, NMels) float32 (the caller owns the
// tensor), the token ids of its text, and the text.
func (c *Corpus) Get(i int) (*torch.Tensor, []int64, string, error) {
	if i < 0 || i >= len(c.Utts) {
		return nil, nil, "", fmt.Errorf("corpus: index %d out of range [0, %d)", i, len(c.Utts))
	}
	u := c.Utts[i]
	feats, err := c.Feat.FeaturesFile(c.Path(i))
	if err != nil {
		return nil, nil, "", fmt.Errorf("corpus item %d (%s): %w", i, u.ID, err)
	}
	if c.augment != nil {
		r := rand.New(rand.NewPCG(c.seed^c.epoch.Load()*0x9e3779b97f4a7c15, uint64(i)))
		var aug *torch.Tensor
		err := torch.Try(func() { aug = c.augment.Apply(feats, r) })
		feats.Free()
		if err != nil {
			return nil, nil, "", fmt.Errorf("corpus item %d: specaugment: %w", i, err)
		}
		feats = aug
	}
	return feats, c.Vocab.Encode(u.Text), u.Text, nil
}

// Texts returns the transcripts (e.g. for BuildVocab on the train manifest).
func (c *Corpus) Texts() []string {
	out := make([]string, len(c.Utts))
	for i, u := range c.Utts {
		out[i] = u.Text
	}
	return out
}

// BuildVocabFromManifest builds the character vocabulary from a manifest's texts.
func BuildVocabFromManifest(manifest string) (*Vocab, error) {
	utts, err := speech.ReadManifest(manifest)
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(utts))
	for i, u := range utts {
		texts[i] = u.Text
	}
	return BuildVocab(texts), nil
}

// sample is one utterance for the loader.
func dataset(c *Corpus) data.Dataset[data.Sample] {
	return data.DatasetFunc[data.Sample]{N: c.Len(), F: func(i int) (data.Sample, error) {
		feats, ids, _, err := c.Get(i)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			ids = []int64{UNKID}
		}
		return data.Sample{"feats": feats, "tokens": torch.FromSlice(ids, nil)}, nil
	}}
}

func span(start, end int) []int {
	out := make([]int, 0, end-start)
	for i := start; i < end; i++ {
		out = append(out, i)
	}
	return out
}

// frameMultiple is the default TrainConfig.PadMultiple: a batch's frames
// are padded to a multiple of 32 (and its token ids to a multiple of 8), so
// the CPU backend sees a few dozen shapes instead of one per utterance
// length. Every shape costs oneDNN a compiled kernel (and a slot in its
// primitive cache) per operation; the padding is masked out of the loss.
const frameMultiple = 32

// CollatePadded pads features to a multiple of frames (1: none) and token
// ids to a multiple of 8 (1 when frames is 1).
func CollatePadded(frames int) func([]data.Sample) (*data.Batch, error) {
	tokens := 8
	if frames <= 1 {
		frames, tokens = 1, 1
	}
	return data.PadCollate(map[string]data.Pad{
		"feats":  {Dim: 0, Multiple: frames},
		"tokens": {Dim: 0, Value: float64(PadID), Multiple: tokens},
	})
}

// Collate pads features and token ids of a list of utterances (to
// multiples of FrameMultiple frames and 8 tokens).
var Collate = CollatePadded(frameMultiple)
