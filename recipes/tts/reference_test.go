package tts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
)

// styleCorpus is a corpus of two speakers whose utterances have the
// speeds and pitches given, without features (RefIndex reads only the
// manifest).
func styleCorpus(speaker []string, speed, pitch []int) *Corpus {
	c := &Corpus{BySpeaker: map[string][]int{}, seed: 3}
	for i := range speaker {
		c.Utts = append(c.Utts, speech.Utterance{Speaker: speaker[i], Speed: speed[i], Pitch: pitch[i]})
		c.BySpeaker[speaker[i]] = append(c.BySpeaker[speaker[i]], i)
	}
	return c
}

// TestReferenceStyle: under RefStyle a reference is one of the speaker's
// four utterances closest in speed and pitch (never the utterance
// itself, never another speaker's), each of the four drawn in some epoch;
// under RefSpeaker any of the speaker's other utterances is.
func TestReferenceStyle(t *testing.T) {
	var spk []string
	var speed, pitch []int
	for k := range 40 {
		spk = append(spk, []string{"a", "b"}[k%2])
		speed = append(speed, 130+(k*7)%56)
		pitch = append(pitch, 30+(k*13)%41)
	}
	c := styleCorpus(spk, speed, pitch)
	dist := func(i, k int) int { return abs(speed[i]-speed[k]) + abs(pitch[i]-pitch[k]) }
	for _, mode := range []string{RefStyle, RefSpeaker} {
		c.RefMode = mode
		for i := range spk {
			var others []int
			for _, k := range c.BySpeaker[spk[i]] {
				if k != i {
					others = append(others, k)
				}
			}
			sort.SliceStable(others, func(a, b int) bool { return dist(i, others[a]) < dist(i, others[b]) })
			allowed := others
			if mode == RefStyle {
				allowed = others[:styleCandidates]
			}
			drawn := map[int]bool{}
			for e := range 64 {
				c.SetEpoch(e)
				k := c.RefIndex(i)
				require.Contains(t, allowed, k, "%s: utterance %d (speed %d, pitch %d) conditioned on %d", mode, i, speed[i], pitch[i], k)
				drawn[k] = true
			}
			if mode == RefStyle {
				require.Len(t, drawn, styleCandidates, "utterance %d: every close utterance is drawn in some epoch", i)
			} else {
				require.Greater(t, len(drawn), styleCandidates, "utterance %d: RefSpeaker draws beyond the closest", i)
			}
		}
	}
	// Conditioned on another corpus (validation on training clips), the
	// utterance with the same index there may be drawn.
	tr := styleCorpus([]string{"a", "a", "a", "a", "a"}, []int{130, 150, 160, 170, 185}, []int{30, 40, 50, 60, 70})
	va := styleCorpus([]string{"a"}, []int{130}, []int{30})
	va.Ref, va.RefMode = tr, RefStyle
	for e := range 32 {
		va.SetEpoch(e)
		require.Contains(t, []int{0, 1, 2, 3}, va.RefIndex(0))
	}
}

// TestReferenceSelf: under RefSelf the reference is a slice of the
// utterance itself (XTTS's get_prompt_slice: 3–6 s, or half an utterance
// shorter than that), and Collate leaves its codes out of the loss: their
// target kind is 0, every other code's kindAudio.
func TestReferenceSelf(t *testing.T) {
	c := &Corpus{seed: 5}
	s0, e0 := c.selfSlice(0, 1)
	require.Equal(t, []int{0, 1}, []int{s0, e0}, "one frame: all of it")
	for _, n := range []int{2, 3, 9, 100, 187, 400, 1000} {
		for e := range 16 {
			c.SetEpoch(e)
			s, end := c.selfSlice(e, n)
			require.True(t, 0 <= s && s < end && end <= n, "%d frames: slice [%d, %d)", n, s, end)
			if n >= condFrames {
				require.True(t, end-s >= condFrames/2 && end-s <= condFrames, "%d frames: a slice of %d", n, end-s)
			} else if end-s != max(n/2, 1) {
				require.True(t, n >= condFrames/2 && end-s >= condFrames/2, "%d frames: a slice of %d", n, end-s)
			}
		}
	}

	g := tinyGPTConfig(10)
	samples := randomSamples(3, 10, 2)
	spans := [][]int64{{1, 3}, {0, 0}, {5, 12}}
	for k, s := range samples {
		s["cond_span"] = torch.FromSlice(spans[k], nil)
	}
	b, err := Collate(g)(samples)
	require.NoError(t, err)
	defer b.Free()
	require.NotContains(t, b.Fields, "cond_span")
	l := b.Fields["ids"].Size(1)
	cidx, tk := b.Fields["code_idx"].Int64s(), b.Fields["tk"].Int64s()
	melLens := b.Lengths["mel"].Int64s()
	for k := range samples {
		scored := 0
		for j := int64(0); j < l; j++ {
			ci := cidx[int64(k)*l+j]
			if ci < 0 {
				continue
			}
			want := int64(kindAudio)
			if ci >= spans[k][0] && ci < spans[k][1] {
				want = 0
			} else {
				scored++
			}
			require.Equal(t, want, tk[int64(k)*l+j], "sample %d code %d", k, ci)
		}
		m := CodeLen(melLens[k])
		require.Equal(t, int(m-min(spans[k][1], m)+spans[k][0]), scored, "sample %d", k)
	}
	for _, s := range samples {
		for _, x := range s {
			x.Free()
		}
	}
}

// TestReferenceFlag: --reference takes the three modes; anything else is
// a *recipes.ConfigError naming it.
func TestReferenceFlag(t *testing.T) {
	for _, c := range []struct {
		mode string
		ok   bool
	}{{"", true}, {RefSpeaker, true}, {RefStyle, true}, {RefSelf, true}, {"other", false}, {"Style", false}} {
		cfg := gptConfig(t, t.TempDir())
		cfg.Reference = c.mode
		err := cfg.check()
		if c.ok {
			require.NoError(t, err, c.mode)
			continue
		}
		var ce *recipes.ConfigError
		require.ErrorAs(t, err, &ce, c.mode)
		require.Equal(t, "reference", ce.Field)
	}
}

// TestReferenceStyleNeedsSpeedAndPitch: a manifest without the
// utterances' speed and pitch cannot choose by them, and `--reference
// style` on it is the user's error, naming the split.
func TestReferenceStyleNeedsSpeedAndPitch(t *testing.T) {
	cfg := gptConfig(t, t.TempDir())
	cfg.Data = copyDir(t, cfg.Data)
	cfg.Reference = RefStyle
	store, tr, va, err := openData(&cfg, nil)
	require.NoError(t, err, "the generated corpus has them")
	require.Equal(t, RefStyle, tr.RefMode)
	require.Equal(t, RefStyle, va.RefMode)
	store.Close()

	path := filepath.Join(cfg.Data, "valid.jsonl")
	utts, err := speech.ReadManifest(path)
	require.NoError(t, err)
	var b strings.Builder
	for _, u := range utts {
		u.Speed, u.Pitch = 0, 0
		line, err := json.Marshal(u)
		require.NoError(t, err)
		b.Write(append(line, '\n'))
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	_, _, _, err = openData(&cfg, nil)
	require.True(t, recipes.IsUserError(err), "%v", err)
	require.ErrorContains(t, err, "valid.jsonl")
	cfg.Reference = RefSpeaker
	store, _, _, err = openData(&cfg, nil)
	require.NoError(t, err, "the other modes do not need them")
	store.Close()
}
