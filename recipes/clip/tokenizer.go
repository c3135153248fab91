package clip

import (
	"fmt"
	"strings"
)

// Token ids: CLIP's layout with a word-level vocabulary. 0 pads (as in
// OpenAI's tokenize), 1 is an unknown word, words follow from 2, and the
// start and end of text are the two highest ids (OpenAI: 49406, 49407),
// so the text tower finds the end by argmax as OpenAI's encode_text does.
const (
	PadID = 0
	UnkID = 1
)

// Tokenizer maps captions to CLIP's token ids over a word vocabulary.
type Tokenizer struct {
	Words   []string
	Vocab   int64 // the model's vocabulary size: SOT = Vocab−2, EOT = Vocab−1
	Context int64 // tokens per caption, SOT and EOT included
	ids     map[string]int64
}

// NewTokenizer returns a tokenizer of words for a model with the given
// vocabulary size and context length.
func NewTokenizer(words []string, vocab, context int64) (*Tokenizer, error) {
	if int64(len(words))+4 > vocab {
		return nil, fmt.Errorf("clip: %d words need a vocabulary of at least %d ids, the model has %d", len(words), len(words)+4, vocab)
	}
	if context < 3 {
		return nil, fmt.Errorf("clip: context length %d: at least 3", context)
	}
	t := &Tokenizer{Words: words, Vocab: vocab, Context: context, ids: map[string]int64{}}
	for i, w := range words {
		if _, dup := t.ids[w]; dup || w == "" || strings.ContainsAny(w, " \t\n") {
			return nil, fmt.Errorf("clip: vocabulary word %q is empty, repeated or has spaces", w)
		}
		t.ids[w] = int64(i) + 2
	}
	return t, nil
}

// SOT and EOT are the start- and end-of-text ids.
func (t *Tokenizer) SOT() int64 { return t.Vocab - 2 }
func (t *Tokenizer) EOT() int64 { return t.Vocab - 1 }

// Encode returns Context ids: SOT, the caption's words (lower-cased; an
// unknown word is UnkID), EOT, then padding. A caption too long is cut,
// keeping EOT last (OpenAI's tokenize with truncate=True).
func (t *Tokenizer) Encode(caption string) []int64 {
	out := make([]int64, t.Context)
	out[0] = t.SOT()
	n := int64(1)
	for _, w := range strings.Fields(strings.ToLower(caption)) {
		if n == t.Context-1 {
			break
		}
		id, ok := t.ids[w]
		if !ok {
			id = UnkID
		}
		out[n] = id
		n++
	}
	out[n] = t.EOT()
	return out
}

// Decode returns the words of ids, without SOT, EOT and padding.
func (t *Tokenizer) Decode(ids []int64) string {
	var ws []string
	for _, id := range ids {
		switch {
		case id == t.EOT():
			return strings.Join(ws, " ")
		case id == t.SOT() || id == PadID:
		case id == UnkID:
			ws = append(ws, "<unk>")
		case id >= 2 && id-2 < int64(len(t.Words)):
			ws = append(ws, t.Words[id-2])
		}
	}
	return strings.Join(ws, " ")
}
