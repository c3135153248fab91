package clip

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// MirrorPairs returns a collate that makes every second sample of a batch
// the one before it mirrored: its image flipped left to right and its
// caption's "left" and "right" swapped, then stacks them as data.Collate
// does. A car's direction is a few pixels of shape and lights at 64×64; in
// a batch of random images a caption's only negative that differs from it
// in direction alone is rare (1 in 96 of the cars' classes), so the
// contrastive loss barely asks for direction. With mirrored pairs every
// image has that negative beside it, in the same micro-batch (pairs are
// adjacent and micro-batches are contiguous runs of an even size). Each
// pair's second image replaces a loaded one: half the images of a batch
// are drawn from the data set, each step. The tokenizer must have both
// words.
func MirrorPairs(tok *Tokenizer) (func([]data.Sample) (*data.Batch, error), error) {
	left, lok := tok.ids["left"]
	right, rok := tok.ids["right"]
	if !lok || !rok {
		return nil, fmt.Errorf("clip: mirrored pairs need the words left and right in the vocabulary")
	}
	return func(samples []data.Sample) (*data.Batch, error) {
		out := make([]data.Sample, len(samples))
		copy(out, samples)
		for k := 1; k < len(out); k += 2 {
			src := out[k-1]
			img, text := src["image"], src["text"]
			if img == nil || text == nil || img.Dim() != 3 {
				return nil, fmt.Errorf("clip: mirrored pairs: samples need a (3, H, W) image and text ids")
			}
			ids := text.Int64s()
			for i, id := range ids {
				switch id {
				case left:
					ids[i] = right
				case right:
					ids[i] = left
				}
			}
			out[k] = data.Sample{"image": img.Flip(2), "text": torch.FromSlice(ids, text.Shape())}
		}
		return data.Collate(out)
	}, nil
}
