package speech

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func isDevanagariText(s string) bool {
	for _, r := range s {
		if r != ' ' && (r < 0x0900 || r > 0x097F) {
			return false
		}
	}
	return utf8.ValidString(s)
}

func TestDefaultLexicon(t *testing.T) {
	l := DefaultLexicon()
	require.GreaterOrEqual(t, len(l.Entries), 300)
	for _, c := range []string{"greeting", "kin", "food", "number", "day", "colour", "verb", "place", "place_to", "animal"} {
		require.NotEmpty(t, l.Category(c), c)
	}
	for _, e := range l.Entries {
		require.Truef(t, isDevanagariText(e.Word), "%s %q is not Devanagari", e.Category, e.Word)
	}
	seen := map[string]bool{}
	for n := 0; n <= 100; n++ {
		w, ok := l.NumberWord(n)
		require.True(t, ok, n)
		require.False(t, seen[w], "number word %q repeated", w)
		seen[w] = true
	}
	require.Len(t, l.Category("number"), 101)
	w, _ := l.NumberWord(5)
	require.Equal(t, "पांच", w)
	require.Contains(t, words(l.Category("place")), "गोंय")
	require.Contains(t, words(l.Category("place")), "मडगांव")
}

func words(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Word)
	}
	return out
}

func TestParseLexiconErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"two fields", "food\tशीत\n", "line 1"},
		{"empty word", "# c\nfood\t \trice\n", "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseLexicon(tc.in)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestNewComposerErrors(t *testing.T) {
	l := DefaultLexicon()
	for _, tc := range []struct {
		name    string
		pattern string
		want    string
	}{
		{"unknown category", "{nosuch} आसा", "unknown lexicon category"},
		{"bad range", "{number:5-2} आसा", "bad number range"},
		{"range past 100", "{number:0-101} आसा", "bad number range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewComposer(l, []Template{{Name: "x", Pattern: tc.pattern}})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestComposerDeterministic(t *testing.T) {
	c := DefaultComposer()
	gen := func(seed uint64) []string {
		r := rand.New(rand.NewPCG(seed, 7))
		var out []string
		for i := 0; i < 200; i++ {
			out = append(out, c.Compose(r, AllTemplates).Text)
		}
		return out
	}
	a, b, other := gen(1), gen(1), gen(2)
	require.Equal(t, a, b)
	require.NotEqual(t, a, other)
	for _, s := range a {
		n := len(strings.Fields(s))
		require.True(t, n >= 3 && n <= 6, "%q has %d words", s, n)
		require.True(t, isDevanagariText(s), s)
	}
}

func TestSumTemplateArithmetic(t *testing.T) {
	c := DefaultComposer()
	l := DefaultLexicon()
	value := map[string]int{}
	for _, e := range l.Category("number") {
		v, _ := strconv.Atoi(e.Gloss)
		value[e.Word] = v
	}
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 50; i++ {
		f := strings.Fields(c.fill(r, "#sum"))
		require.Len(t, f, 5)
		require.Equal(t, value[f[0]]+value[f[2]], value[f[4]], f)
	}
}

func TestSentencesForSplits(t *testing.T) {
	c := DefaultComposer()
	got := map[Split][]Sentence{}
	for _, sp := range Splits {
		got[sp] = c.SentencesFor(sp, 150, 42, 0.1, 0.1)
		require.Len(t, got[sp], 150)
		require.Equal(t, got[sp], c.SentencesFor(sp, 150, 42, 0.1, 0.1), "deterministic")
	}
	texts := func(sp Split) map[string]bool {
		m := map[string]bool{}
		for _, s := range got[sp] {
			m[s.Text] = true
		}
		return m
	}
	train, valid := texts(Train), texts(Valid)
	for s := range valid {
		require.False(t, train[s], "valid sentence %q in train", s)
	}
	heldOut := 0
	for _, s := range got[Test] {
		require.False(t, train[s.Text] || valid[s.Text], "test sentence %q in train/valid", s.Text)
		if s.HeldOut {
			heldOut++
		}
	}
	require.Positive(t, heldOut, "test has held-out-template sentences")
	for _, sp := range []Split{Train, Valid} {
		for _, s := range got[sp] {
			require.False(t, s.HeldOut, "%s uses held-out template %s", sp, s.Template)
		}
	}
	require.Greater(t, len(train), 140, "train sentences are mostly unique")
}
