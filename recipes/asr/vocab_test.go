package asr

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

func TestVocab(t *testing.T) {
	v := BuildVocab([]string{"पाणी हाड", "नुस्तें आनी शीत"})
	require.Equal(t, []string{Blank, Pad, SOS, EOS, UNK}, v.Tokens()[:5])
	for _, ch := range []string{" ", "प", "ा", "ण", "ी", "्", "ं", "े"} {
		_, ok := v.ID(ch)
		require.True(t, ok, "%q in vocab", ch)
	}
	ids := v.Encode("  पाणी  आनी ")
	require.Equal(t, "पाणी आनी", v.Decode(ids))
	require.Equal(t, []int64{UNKID}, v.Encode("x"))
	require.Equal(t, "\uFFFD", v.Decode([]int64{UNKID, BlankID, PadID, SOSID, EOSID}))

	path := filepath.Join(t.TempDir(), "vocab.json")
	require.NoError(t, v.Save(path))
	w, err := LoadVocab(path)
	require.NoError(t, err)
	require.Equal(t, v.Tokens(), w.Tokens())
	require.Equal(t, ids, w.Encode("पाणी आनी"))
}

func TestNewVocabErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tokens []string
		want   string
	}{
		{"too short", []string{Blank}, "specials"},
		{"wrong order", []string{Pad, Blank, SOS, EOS, UNK}, "want"},
		{"multi-char", []string{Blank, Pad, SOS, EOS, UNK, "ab"}, "single character"},
		{"duplicate", []string{Blank, Pad, SOS, EOS, UNK, "a", "a"}, "duplicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewVocab(tc.tokens)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCTCCollapse(t *testing.T) {
	for _, tc := range []struct {
		in, want []int64
	}{
		{nil, []int64{}},
		{[]int64{0, 0, 0}, []int64{}},
		{[]int64{5, 5, 0, 5, 6, 6, 0}, []int64{5, 5, 6}},
		{[]int64{0, 7, 7, 7, 0, 0, 8, 0, 8}, []int64{7, 8, 8}},
		{[]int64{1, 2, 3}, []int64{1, 2, 3}},
	} {
		require.Equal(t, tc.want, cTCCollapse(tc.in, 0), "%v", tc.in)
	}
}

func TestGreedyCTC(t *testing.T) {
	v := BuildVocab([]string{"पाणी"})
	p, _ := v.ID("प")
	a, _ := v.ID("ा")
	// Best path: प प <blank> ा ा <blank> (then 2 padded frames of प).
	path := []int64{p, p, BlankID, a, a, BlankID, p, p}
	V := int64(v.Size())
	logits := make([]float32, len(path)*int(V))
	for i, id := range path {
		logits[i*int(V)+int(id)] = 5
	}
	x := torch.FromSlice(logits, []int64{1, int64(len(path)), V})
	defer x.Free()
	got, err := GreedyCTC(x, []int64{6}, BlankID)
	require.NoError(t, err)
	require.Equal(t, [][]int64{{p, a}}, got)
	require.Equal(t, "पा", v.Decode(got[0]))
	require.Equal(t, "पाप", v.DecodeCTC(path))

	_, err = GreedyCTC(x, []int64{1, 2}, BlankID)
	require.ErrorContains(t, err, "lengths")
}
