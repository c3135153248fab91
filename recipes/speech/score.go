package speech

import "strings"

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
