package speech

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestErrorRates(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ref, hyp string
		cer, wer float64
	}{
		{"equal", "हांव घरा वता", "हांव घरा वता", 0, 0},
		{"matra substituted", "पाणी", "पाणि", 0.25, 1},                  // ी -> ि: 1 of 4 code points
		{"word deleted", "हांव घरा वता", "हांव वता", 4.0 / 12, 1.0 / 3}, // "घरा " is 4 of 12 code points
		{"word inserted", "आयज सोमार आसा", "आयज सोमार आसा रे", 3.0 / 13, 1.0 / 3},
		{"empty hyp", "आसा", "", 1, 1},
		{"empty both", "", "", 0, 0},
		{"empty ref", "", "आसा", 1, 1},
		{"spaces normalised", "a  b", " a b ", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.cer, CER(tc.ref, tc.hyp), 1e-12)
			require.InDelta(t, tc.wer, WER(tc.ref, tc.hyp), 1e-12)
		})
	}
	require.Equal(t, 3, EditDistance([]rune("kitten"), []rune("sitting")))
	var e ErrorRate
	e.Add("हांव घरा वता", "हांव घरा वता")
	e.Add("पाणी", "पाणि")
	require.InDelta(t, 1.0/16, e.CER(), 1e-12)
	require.InDelta(t, 1.0/4, e.WER(), 1e-12)
}
