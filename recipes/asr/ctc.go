package asr

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
)

// cTCCollapse applies the CTC rule to a frame-wise best path: merge runs of
// the same id, then drop blanks.
func cTCCollapse(frames []int64, blank int64) []int64 {
	out := make([]int64, 0, len(frames))
	prev := int64(-1)
	for _, id := range frames {
		if id != prev && id != blank {
			out = append(out, id)
		}
		prev = id
	}
	return out
}

// GreedyCTC decodes (T, V) or (B, T, V) log-probabilities (or logits) by
// taking the best token per frame and collapsing. lengths (may be nil) gives
// each sequence's valid frame count.
func GreedyCTC(logProbs *torch.Tensor, lengths []int64, blank int64) ([][]int64, error) {
	var best []int64
	var b, t int64
	err := torch.Try(func() {
		x := logProbs
		switch x.Dim() {
		case 2:
			b, t = 1, x.Size(0)
		case 3:
			b, t = x.Size(0), x.Size(1)
		default:
			panic(&torch.Error{Op: "GreedyCTC", Msg: fmt.Sprintf("want (T, V) or (B, T, V), got %v", x.Shape())})
		}
		torch.Tidy(func() { best = x.Argmax(-1, false).Int64s() })
	})
	if err != nil {
		return nil, fmt.Errorf("greedy ctc: %w", err)
	}
	if lengths != nil && int64(len(lengths)) != b {
		return nil, fmt.Errorf("greedy ctc: %d lengths for batch of %d", len(lengths), b)
	}
	out := make([][]int64, b)
	for i := int64(0); i < b; i++ {
		n := t
		if lengths != nil {
			n = min(t, max(0, lengths[i]))
		}
		out[i] = cTCCollapse(best[i*t:i*t+n], blank)
	}
	return out, nil
}

// DecodeCTC collapses a frame-wise best path and decodes it to text.
func (v *Vocab) DecodeCTC(frames []int64) string {
	return v.Decode(cTCCollapse(frames, BlankID))
}
