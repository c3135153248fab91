package tts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
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

// samplingFixture is a tiny untrained model in eval mode, the latents of
// a random reference and a text (freed when the test ends).
func samplingFixture(t *testing.T) (*Model, *torch.Tensor, []int64) {
	m := newTinyModel(t, 10)
	t.Cleanup(func() { nn.Free(m) })
	nn.SetTraining(m, false)
	torch.ManualSeed(5)
	ref := torch.Randn([]int64{40, NMels})
	defer ref.Free()
	lat := m.Latents(ref)
	t.Cleanup(lat.Free)
	return m, lat, []int64{3, 4, 5, 6, 7, 8}
}

// TestTeacherForcedMatchesGreedy: the greedy sampler's codes are the
// GPT's likeliest at each step given the codes before them, so teacher
// forcing them (one pass over the whole sequence, no cache) gives them
// back, code for code; a prefix gives the same prefix.
func TestTeacherForcedMatchesGreedy(t *testing.T) {
	m, lat, text := samplingFixture(t)
	codes, _ := m.Generate(lat, text, SampleOptions{MaxCodes: 24})
	require.NotEmpty(t, codes)
	require.Equal(t, codes, m.TeacherForced(lat, text, codes))
	require.Equal(t, codes[:len(codes)/2], m.TeacherForced(lat, text, codes[:len(codes)/2]))
	require.Empty(t, m.TeacherForced(lat, text, nil))
}

// TestCandidatesKeepTheLikeliest: with Candidates n, Generate samples
// seeds Seed … Seed+n−1 and keeps the sequence of the highest mean log
// probability among those that stopped (all, if none did); one candidate
// is the plain sample of Seed.
func TestCandidatesKeepTheLikeliest(t *testing.T) {
	m, lat, text := samplingFixture(t)
	o := DefaultSampleOptions()
	o.Temperature, o.MaxCodes, o.Seed = 1.5, 24, 7 // hot enough for the candidates to differ
	type cand struct {
		codes   []int64
		stopped bool
		score   float64
	}
	var cs []cand
	for k := range 6 {
		one := o
		one.Seed += uint64(k)
		c, st, sc := m.generate(lat, text, one)
		require.False(t, math.IsNaN(sc))
		require.LessOrEqual(t, sc, 0.0, "a mean log probability")
		cs = append(cs, cand{c, st, sc})
	}
	plain, _ := m.Generate(lat, text, o)
	require.Equal(t, cs[0].codes, plain)
	// The score, kept step by step through the cache, is one pass's: the
	// log-softmax (audio start masked) at each code's place and the stop's.
	for _, c := range cs {
		n := len(c.codes) + btoi(c.stopped)
		var rows []float32
		torch.NoGrad(func() {
			torch.Tidy(func() {
				h := m.GPT.Forward(lat, m.embedPrompt(text, c.codes, torch.CPU), nil)
				at := h.Narrow(1, lat.Size(1)+int64(len(text))+2, int64(n))
				rows = m.GPT.AudioHead.Forward(at).Reshape(int64(n), -1).Float32s()
			})
		})
		width := len(rows) / n
		var sum float64
		for j := range n {
			row := rows[j*width : (j+1)*width]
			row[m.GPT.Cfg.audioStart()] = float32(math.Inf(-1))
			tok := m.GPT.Cfg.audioStop()
			if j < len(c.codes) {
				tok = c.codes[j]
			}
			sum += float64(row[tok]) - logSumExp(row)
		}
		require.InDelta(t, sum/float64(n), c.score, 1e-4)
		t.Logf("codes %d stopped %v score %.3f", len(c.codes), c.stopped, c.score)
	}
	for _, n := range []int{1, 2, 6} {
		want := cs[0]
		for _, c := range cs[1:n] {
			if c.stopped && !want.stopped || c.stopped == want.stopped && c.score > want.score {
				want = c
			}
		}
		o.Candidates = n
		got, stopped := m.Generate(lat, text, o)
		require.Equal(t, want.codes, got, "candidates %d", n)
		require.Equal(t, want.stopped, stopped)
	}
	// Sample returns all six, in that ranking's order.
	o.Candidates = 6
	all := m.Sample(lat, text, o)
	require.Len(t, all, 6)
	for k := 1; k < len(all); k++ {
		require.False(t, all[k].better(all[k-1]), "candidate %d ranks after %d", k, k-1)
	}
	got, _ := m.Generate(lat, text, o)
	require.Equal(t, all[0].Codes, got)
	distinct := map[string]bool{}
	for _, c := range cs {
		distinct[fmt.Sprint(c.codes)] = true
	}
	require.Greater(t, len(distinct), 1, "the candidates differ")
}

// TestLogSumExp: the normaliser of the sequence score, stable for large
// logits and blind to masked ones.
func TestLogSumExp(t *testing.T) {
	require.InDelta(t, math.Log(math.Exp(1)+math.Exp(2)+math.Exp(3)), logSumExp([]float32{1, 2, 3}), 1e-9)
	require.InDelta(t, 2.0, logSumExp([]float32{2, float32(math.Inf(-1))}), 1e-9)
	require.InDelta(t, 1000+math.Log(2), logSumExp([]float32{1000, 1000}), 1e-9, "no overflow")
}
