package asr

import (
	"fmt"
	"strings"

	"github.com/torchfit/torchfit/torch"
)

// CTCCollapse applies the CTC rule to a frame-wise best path: merge runs of
// the same id, then drop blanks.
func CTCCollapse(frames []int64, blank int64) []int64 {
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
		out[i] = CTCCollapse(best[i*t:i*t+n], blank)
	}
	return out, nil
}

// DecodeCTC collapses a frame-wise best path and decodes it to text.
func (v *Vocab) DecodeCTC(frames []int64) string {
	return v.Decode(CTCCollapse(frames, BlankID))
}

// EditDistance is the Levenshtein distance between two sequences.
func EditDistance[T comparable](ref, hyp []T) int {
	prev := make([]int, len(hyp)+1)
	cur := make([]int, len(hyp)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ref); i++ {
		cur[0] = i
		for j := 1; j <= len(hyp); j++ {
			sub := prev[j-1]
			if ref[i-1] != hyp[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(hyp)]
}

// CER is the character error rate of hyp against ref: Levenshtein distance
// over Unicode code points (matras and virama count as characters) divided by
// the reference length. Spaces are normalised (collapsed) and counted. An
// empty reference gives 0 for an empty hypothesis, else 1.
func CER(ref, hyp string) float64 {
	r, h := []rune(normSpace(ref)), []rune(normSpace(hyp))
	return rate(EditDistance(r, h), len(r), len(h))
}

// WER is the word error rate: Levenshtein distance over space-separated words
// divided by the number of reference words.
func WER(ref, hyp string) float64 {
	r, h := strings.Fields(ref), strings.Fields(hyp)
	return rate(EditDistance(r, h), len(r), len(h))
}

func rate(edits, refLen, hypLen int) float64 {
	if refLen == 0 {
		if hypLen == 0 {
			return 0
		}
		return 1
	}
	return float64(edits) / float64(refLen)
}

func normSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

// ErrorRate accumulates corpus-level CER and WER: total edits over total
// reference length (not the mean of per-utterance rates).
type ErrorRate struct {
	CharEdits, Chars int
	WordEdits, Words int
}

// Add accumulates one reference/hypothesis pair.
func (e *ErrorRate) Add(ref, hyp string) {
	rc, hc := []rune(normSpace(ref)), []rune(normSpace(hyp))
	e.CharEdits += EditDistance(rc, hc)
	e.Chars += len(rc)
	rw, hw := strings.Fields(ref), strings.Fields(hyp)
	e.WordEdits += EditDistance(rw, hw)
	e.Words += len(rw)
}

// CER is the corpus character error rate so far.
func (e *ErrorRate) CER() float64 { return rate(e.CharEdits, e.Chars, e.CharEdits) }

// WER is the corpus word error rate so far.
func (e *ErrorRate) WER() float64 { return rate(e.WordEdits, e.Words, e.WordEdits) }
