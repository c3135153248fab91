package asr

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/torchfit/torchfit/recipes"
)

// Special tokens. <blank> is id 0, CTC's blank.
const (
	Blank = "<blank>"
	Pad   = "<pad>"
	SOS   = "<sos>"
	EOS   = "<eos>"
	UNK   = "<unk>"
)

// Ids of the special tokens in every Vocab.
const (
	BlankID int64 = iota
	PadID
	SOSID
	EOSID
	UNKID
)

var specials = []string{Blank, Pad, SOS, EOS, UNK}

// Vocab is a character vocabulary: the specials, then every character (Unicode
// code point: consonants, vowels, matras, virama, anusvara, nukta, space, ...)
// of the training text, sorted.
type Vocab struct {
	tokens []string
	index  map[string]int64
}

// BuildVocab builds a vocabulary from training texts.
func BuildVocab(texts []string) *Vocab {
	set := map[rune]bool{}
	for _, t := range texts {
		for _, r := range t {
			set[r] = true
		}
	}
	chars := make([]string, 0, len(set))
	for r := range set {
		chars = append(chars, string(r))
	}
	sort.Strings(chars)
	v, _ := NewVocab(append(append([]string(nil), specials...), chars...))
	return v
}

// NewVocab makes a vocabulary from its token list, which must start with the
// five specials in order and hold single characters after them.
func NewVocab(tokens []string) (*Vocab, error) {
	if len(tokens) < len(specials) {
		return nil, fmt.Errorf("vocab: %d tokens, want the %d specials first", len(tokens), len(specials))
	}
	v := &Vocab{tokens: append([]string(nil), tokens...), index: map[string]int64{}}
	for i, t := range tokens {
		if i < len(specials) && t != specials[i] {
			return nil, fmt.Errorf("vocab: token %d is %q, want %q", i, t, specials[i])
		}
		if i >= len(specials) && len([]rune(t)) != 1 {
			return nil, fmt.Errorf("vocab: token %d %q is not a single character", i, t)
		}
		if _, dup := v.index[t]; dup {
			return nil, fmt.Errorf("vocab: duplicate token %q", t)
		}
		v.index[t] = int64(i)
	}
	return v, nil
}

// Size is the number of tokens, specials included.
func (v *Vocab) Size() int { return len(v.tokens) }

// Tokens returns the token list (id order).
func (v *Vocab) Tokens() []string { return append([]string(nil), v.tokens...) }

// Token returns the token of id ("" when out of range).
func (v *Vocab) Token(id int64) string {
	if id < 0 || int(id) >= len(v.tokens) {
		return ""
	}
	return v.tokens[id]
}

// ID returns the id of a token and whether it is known.
func (v *Vocab) ID(tok string) (int64, bool) {
	id, ok := v.index[tok]
	return id, ok
}

// Encode maps each character of text to its id (<unk> when unknown). Leading,
// trailing and repeated spaces are collapsed first.
func (v *Vocab) Encode(text string) []int64 {
	text = strings.Join(strings.Fields(text), " ")
	out := make([]int64, 0, len(text))
	for _, r := range text {
		id, ok := v.index[string(r)]
		if !ok {
			id = UNKID
		}
		out = append(out, id)
	}
	return out
}

// Decode maps ids back to text, dropping <blank>, <pad>, <sos> and <eos>
// (<unk> decodes as U+FFFD).
func (v *Vocab) Decode(ids []int64) string {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id == UNKID:
			b.WriteRune('\uFFFD')
		case id < int64(len(specials)) || int(id) >= len(v.tokens):
		default:
			b.WriteString(v.tokens[id])
		}
	}
	return b.String()
}

type vocabJSON struct {
	Tokens []string `json:"tokens"`
}

// MarshalJSON writes {"tokens": [...]}.
func (v *Vocab) MarshalJSON() ([]byte, error) { return json.Marshal(vocabJSON{v.tokens}) }

// UnmarshalJSON reads {"tokens": [...]}.
func (v *Vocab) UnmarshalJSON(b []byte) error {
	var j vocabJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	nv, err := NewVocab(j.Tokens)
	if err != nil {
		return err
	}
	*v = *nv
	return nil
}

// Save writes the vocabulary as JSON, atomically.
func (v *Vocab) Save(path string) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return recipes.WriteFileAtomic(path, append(b, '\n'))
}

// LoadVocab reads a vocabulary written by Save.
func LoadVocab(path string) (*Vocab, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("vocab: %w", err)
	}
	v := new(Vocab)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("vocab %s: %w", path, err)
	}
	return v, nil
}
