package speech

import (
	"bufio"
	_ "embed"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

//go:embed lexicon.tsv
var lexiconTSV string

// Entry is one lexicon word (or short phrase) with its category and an
// English gloss; for the "number" category the gloss is the value.
type Entry struct {
	Category string
	Word     string
	Gloss    string
}

// Lexicon is a categorised word list.
type Lexicon struct {
	Entries []Entry
	byCat   map[string][]Entry
}

// DefaultLexicon returns the shipped everyday-Konkani lexicon (lexicon.tsv).
func DefaultLexicon() *Lexicon {
	l, err := ParseLexicon(lexiconTSV)
	if err != nil {
		panic(fmt.Sprintf("speech: shipped lexicon: %v", err))
	}
	return l
}

// ParseLexicon reads "category<TAB>word<TAB>gloss" lines; '#' starts a comment line.
func ParseLexicon(tsv string) (*Lexicon, error) {
	l := &Lexicon{byCat: map[string][]Entry{}}
	sc := bufio.NewScanner(strings.NewReader(tsv))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[0] == "" || strings.TrimSpace(f[1]) == "" {
			return nil, fmt.Errorf("lexicon line %d: want category<TAB>word<TAB>gloss, got %q", n, line)
		}
		e := Entry{Category: f[0], Word: strings.TrimSpace(f[1]), Gloss: f[2]}
		l.Entries = append(l.Entries, e)
		l.byCat[e.Category] = append(l.byCat[e.Category], e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lexicon: %w", err)
	}
	return l, nil
}

// Category returns the entries of one category (nil when unknown).
func (l *Lexicon) Category(c string) []Entry { return l.byCat[c] }

// Categories returns the category names, sorted.
func (l *Lexicon) Categories() []string {
	cs := make([]string, 0, len(l.byCat))
	for c := range l.byCat {
		cs = append(cs, c)
	}
	sort.Strings(cs)
	return cs
}

// NumberWord returns the Konkani word for n (0..100).
func (l *Lexicon) NumberWord(n int) (string, bool) {
	for _, e := range l.byCat["number"] {
		if e.Gloss == strconv.Itoa(n) {
			return e.Word, true
		}
	}
	return "", false
}

// Template is a sentence pattern: literal Devanagari words and slots.
// A slot is {category}, {number:lo-hi} (a number word in [lo, hi]) or
// {#sum} ("a आनी b मेळून c", a+b=c<=100). HeldOut templates are used only
// for test sentences, so the test split holds sentence shapes never trained on.
type Template struct {
	Name    string
	Pattern string
	HeldOut bool
}

// DefaultTemplates are the composer's sentence shapes (3 to 6 words each).
var DefaultTemplates = []Template{
	{Name: "eat", Pattern: "{subject} {time} {food} {eatverb}"},
	{Name: "drink", Pattern: "{subject} {drink} {drinkverb}"},
	{Name: "go", Pattern: "{time} {subject} {place_to} वता"},
	{Name: "greet", Pattern: "नमस्कार {kin} तुमी कशें आसात"},
	{Name: "want", Pattern: "म्हाका {number:1-100} रुपया जाय"},
	{Name: "house", Pattern: "आमच्या घरांत {number:2-20} मनशां आसात"},
	{Name: "colour", Pattern: "हें {colour} {thing} म्हजें"},
	{Name: "day", Pattern: "आयज {day} आसा"},
	{Name: "verb", Pattern: "{subject} {adverb} {verb}"},
	{Name: "animal", Pattern: "{animal} {place_to} {adverb} धांवता"},
	{Name: "sum", Pattern: "{#sum} जातात"},
	{Name: "why", Pattern: "{kin} आयज {place_to} कित्याक वता", HeldOut: true},
	{Name: "name", Pattern: "{kin} तुमचें नांव कितें", HeldOut: true},
}

// TemplateSet selects which templates a composer draws from.
type TemplateSet int

const (
	SharedTemplates  TemplateSet = iota // templates used by every split
	HeldOutTemplates                    // test-only templates
	AllTemplates
)

// Sentence is one composed sentence and the template it came from.
type Sentence struct {
	Text     string
	Template string
	HeldOut  bool
}

// Composer makes Devanagari sentences from a lexicon and templates.
type Composer struct {
	lex       *Lexicon
	shared    []Template
	heldOut   []Template
	numberLst []string // index = value
}

// NewComposer checks that every slot of every template can be filled.
func NewComposer(lex *Lexicon, templates []Template) (*Composer, error) {
	c := &Composer{lex: lex, numberLst: make([]string, 101)}
	for n := 0; n <= 100; n++ {
		w, ok := lex.NumberWord(n)
		if !ok {
			w = ""
		}
		c.numberLst[n] = w
	}
	for _, t := range templates {
		for _, tok := range strings.Fields(t.Pattern) {
			if !isSlot(tok) {
				continue
			}
			if err := c.checkSlot(tok[1 : len(tok)-1]); err != nil {
				return nil, fmt.Errorf("template %q: %w", t.Name, err)
			}
		}
		if t.HeldOut {
			c.heldOut = append(c.heldOut, t)
		} else {
			c.shared = append(c.shared, t)
		}
	}
	if len(c.shared) == 0 {
		return nil, fmt.Errorf("composer: no shared templates")
	}
	return c, nil
}

// DefaultComposer is NewComposer(DefaultLexicon(), DefaultTemplates).
func DefaultComposer() *Composer {
	c, err := NewComposer(DefaultLexicon(), DefaultTemplates)
	if err != nil {
		panic(fmt.Sprintf("speech: default composer: %v", err))
	}
	return c
}

func isSlot(tok string) bool {
	return len(tok) > 2 && tok[0] == '{' && tok[len(tok)-1] == '}'
}

func parseRange(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if lo, err = strconv.Atoi(a); err == nil && ok {
		hi, err = strconv.Atoi(b)
	}
	if err != nil || !ok || lo < 0 || hi > 100 || lo > hi {
		return 0, 0, fmt.Errorf("bad number range %q (want lo-hi within 0-100)", s)
	}
	return lo, hi, nil
}

func (c *Composer) checkSlot(s string) error {
	switch {
	case s == "#sum" || s == "number":
		s = "number:0-100"
		fallthrough
	case strings.HasPrefix(s, "number:"):
		lo, hi, err := parseRange(strings.TrimPrefix(s, "number:"))
		if err != nil {
			return err
		}
		for n := lo; n <= hi; n++ {
			if c.numberLst[n] == "" {
				return fmt.Errorf("lexicon has no number word for %d", n)
			}
		}
	case len(c.lex.Category(s)) == 0:
		return fmt.Errorf("unknown lexicon category %q", s)
	}
	return nil
}

func (c *Composer) fill(r *rand.Rand, slot string) string {
	switch {
	case slot == "#sum":
		a := r.IntN(101)
		b := r.IntN(101 - a)
		return c.numberLst[a] + " आनी " + c.numberLst[b] + " मेळून " + c.numberLst[a+b]
	case slot == "number":
		return c.numberLst[r.IntN(101)]
	case strings.HasPrefix(slot, "number:"):
		lo, hi, _ := parseRange(strings.TrimPrefix(slot, "number:"))
		return c.numberLst[lo+r.IntN(hi-lo+1)]
	}
	es := c.lex.Category(slot)
	return es[r.IntN(len(es))].Word
}

// Compose draws one sentence from the given template set.
func (c *Composer) Compose(r *rand.Rand, set TemplateSet) Sentence {
	var ts []Template
	switch set {
	case SharedTemplates:
		ts = c.shared
	case HeldOutTemplates:
		ts = c.heldOut
	default:
		ts = append(append([]Template(nil), c.shared...), c.heldOut...)
	}
	if len(ts) == 0 {
		ts = c.shared
	}
	t := ts[r.IntN(len(ts))]
	toks := strings.Fields(t.Pattern)
	for i, tok := range toks {
		if isSlot(tok) {
			toks[i] = c.fill(r, tok[1:len(tok)-1])
		}
	}
	return Sentence{Text: strings.Join(toks, " "), Template: t.Name, HeldOut: t.HeldOut}
}

// Templates returns the composer's templates (shared first, then held out).
func (c *Composer) Templates() []Template {
	return append(append([]Template(nil), c.shared...), c.heldOut...)
}

// Split names a data split.
type Split string

const (
	Train Split = "train"
	Valid Split = "valid"
	Test  Split = "test"
)

// Splits lists the splits in manifest order.
var Splits = []Split{Train, Valid, Test}

// SentenceSplit assigns a sentence text to a split by a hash of the text
// alone (independent of any seed), so a sentence lands in the same split in
// every corpus: validFrac and testFrac of the sentence space are held out.
func SentenceSplit(text string, validFrac, testFrac float64) Split {
	h := fnv.New64a()
	h.Write([]byte(text))
	u := float64(h.Sum64()%1_000_000) / 1_000_000
	switch {
	case u < testFrac:
		return Test
	case u < testFrac+validFrac:
		return Valid
	}
	return Train
}

// SentencesFor returns n sentences for split, deterministic given seed.
// Sentences are unique where the template space allows (after many misses a
// repeat is accepted; a split with no sentence space yields fewer). Train and valid use shared templates whose text hashes
// to them (SentenceSplit); test also draws from held-out templates (about a
// third of its sentences when any exist).
func (c *Composer) SentencesFor(split Split, n int, seed uint64, validFrac, testFrac float64) []Sentence {
	r := rand.New(rand.NewPCG(seed, uint64(len(split))*0x9e3779b97f4a7c15^splitSalt(split)))
	seen := map[string]bool{}
	out := make([]Sentence, 0, n)
	for misses := 0; len(out) < n && misses < 1000; {
		var s Sentence
		found := false
		for try := 0; try < 200; try++ {
			if split == Test && len(c.heldOut) > 0 && r.IntN(3) == 0 {
				s = c.Compose(r, HeldOutTemplates)
			} else {
				s = c.Compose(r, SharedTemplates)
				if SentenceSplit(s.Text, validFrac, testFrac) != split {
					continue
				}
			}
			if !seen[s.Text] || try >= 100 {
				found = true
				break
			}
		}
		if !found {
			// The split's sentence space is too small for this fraction:
			// fall back to any held-out-compatible sentence for the split.
			if split == Test && len(c.heldOut) > 0 {
				s = c.Compose(r, HeldOutTemplates)
			} else if s.Text == "" || SentenceSplit(s.Text, validFrac, testFrac) != split {
				misses++ // a split with (almost) no sentence space: give up eventually
				continue
			}
		}
		seen[s.Text] = true
		out = append(out, s)
	}
	return out
}

func splitSalt(s Split) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
