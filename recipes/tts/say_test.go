package tts

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
)

func TestRepetitionPenalty(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    float64
		want []float32
	}{
		{"none (0)", 0, []float32{2, -1, 3, 0.5}},
		{"none (1)", 1, []float32{2, -1, 3, 0.5}},
		// codes 0 and 1 seen: positive divided, negative multiplied
		{"10", 10, []float32{0.2, -10, 3, 0.5}},
		{"below 1 favours", 0.5, []float32{4, -0.5, 3, 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logits := []float32{2, -1, 3, 0.5}
			penalise(logits, map[int64]bool{0: true, 1: true}, tc.p)
			require.InDeltaSlice(t, tc.want, logits, 1e-6)
		})
	}
}

func TestSampleOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     SampleOptions
		field string // the ConfigError's field; "" when valid
	}{
		{"defaults", DefaultSampleOptions(), ""},
		{"zero value", SampleOptions{}, ""},
		{"penalty 10", SampleOptions{RepetitionPenalty: 10}, ""},
		{"penalty negative", SampleOptions{RepetitionPenalty: -1}, "repetition-penalty"},
		{"penalty NaN", SampleOptions{RepetitionPenalty: math.NaN()}, "repetition-penalty"},
		{"penalty infinite", SampleOptions{RepetitionPenalty: math.Inf(1)}, "repetition-penalty"},
		{"top-p 2", SampleOptions{TopP: 2}, "top-p"},
		{"temperature NaN", SampleOptions{Temperature: math.NaN()}, "temperature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var ce *recipes.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.field, ce.Field)
		})
	}
}

// TestSampleWithPenaltyAvoidsRepeats draws from a distribution that
// favours code 0: a penalty of 10 on code 0 cuts its share from about 71 %
// to about 14 %.
func TestSampleWithPenaltyAvoidsRepeats(t *testing.T) {
	o := SampleOptions{Temperature: 1, TopK: 0, TopP: 1}
	count := func(p float64) int {
		r := rand.New(rand.NewPCG(1, 2))
		n := 0
		for range 1000 {
			logits := []float32{3, 1, 1, 1}
			penalise(logits, map[int64]bool{0: true}, p)
			if sample(logits, o, r) == 0 {
				n++
			}
		}
		return n
	}
	// p(0) = e^3 / (e^3 + 3e) ≈ 0.71 without the penalty; e^0.3 / (e^0.3 + 3e) ≈ 0.14 with 10
	require.InDelta(t, 710, count(1), 60)
	require.InDelta(t, 142, count(10), 40)
}
