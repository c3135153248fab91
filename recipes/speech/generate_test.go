package speech

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/audio"
)

func needSynth(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"espeak-ng", "sox"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (run 'make deps'): skipping corpus generation", bin)
		}
	}
}

// TestEspeakKonkaniVoice documents why the Marathi voice is used.
func TestEspeakKonkaniVoice(t *testing.T) {
	needSynth(t)
	ver, _ := exec.Command("espeak-ng", "--version").Output()
	if !strings.Contains(string(ver), "1.51") {
		t.Skipf("checked on espeak-ng 1.51, have %s", ver)
	}
	phonemes := func(voice string) string {
		out, err := exec.Command("espeak-ng", "-q", "-v", voice, "-x", "पाणी").Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	require.Equal(t, "p,@a:k'a:rn.@ik'a:r", phonemes("kok"), "kok spells the letters out")
	require.Equal(t, "p'a:n.i", phonemes("mr"))
	require.Equal(t, "p'a:n.i", phonemes("hi"))
}

func TestGenerateTinyCorpus(t *testing.T) {
	needSynth(t)
	dir := t.TempDir()
	cfg := GenerateConfig{OutDir: dir, Utterances: 12, Seed: 7, Workers: 2, NoiseFraction: 0.5, ValidFraction: 0.25, TestFraction: 0.25}
	st, err := Generate(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 12, st.Synthesised)
	require.Equal(t, map[Split]int{Train: 6, Valid: 3, Test: 3}, st.Counts)
	t.Logf("12 utterances, %.1f s of audio, in %v", st.Seconds, st.Elapsed)

	heldOut := map[string]bool{}
	for _, v := range DefaultHeldOutVoices {
		heldOut[v] = true
	}
	texts := map[Split]map[string]bool{}
	noisy, heldOutInTest := 0, 0
	manifests := map[Split][]byte{}
	for _, sp := range Splits {
		path := filepath.Join(dir, string(sp)+".jsonl")
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		manifests[sp] = raw
		require.Contains(t, string(raw), `"path":"wav/`+string(sp)+`/`)
		utts, err := ReadManifest(path)
		require.NoError(t, err)
		require.Len(t, utts, st.Counts[sp])
		texts[sp] = map[string]bool{}
		for _, u := range utts {
			texts[sp][u.Text] = true
			require.Equal(t, sp, u.Split)
			require.True(t, isDevanagariText(u.Text), u.Text)
			require.NotEmpty(t, u.Voice)
			require.Equal(t, u.Voice, u.Speaker)
			if heldOut[u.Voice] {
				require.Equal(t, Test, sp, "held-out voice %s outside test", u.Voice)
				heldOutInTest++
			} else {
				require.Contains(t, DefaultVoices, u.Voice)
			}
			if u.SNR > 0 {
				noisy++
			}
			info, err := audio.ReadWAVInfo(filepath.Join(dir, u.Path))
			require.NoError(t, err)
			require.Equal(t, 16000, info.SampleRate)
			require.Equal(t, 1, info.Channels)
			require.Equal(t, 16, info.BitsPerSample)
			require.InDelta(t, info.Duration(), u.Duration, 1e-3)
			words := len(strings.Fields(u.Text))
			require.True(t, u.Duration > 0.25*float64(words) && u.Duration < 1.5*float64(words)+1,
				"%q (%d words) lasts %.2f s", u.Text, words, u.Duration)
		}
	}
	require.Positive(t, heldOutInTest)
	require.Positive(t, noisy)
	for s := range texts[Test] {
		require.False(t, texts[Train][s] || texts[Valid][s], "test sentence %q seen in train/valid", s)
	}
	for s := range texts[Valid] {
		require.False(t, texts[Train][s], "valid sentence %q seen in train", s)
	}
	_, err = os.Stat(filepath.Join(dir, "tmp"))
	require.ErrorIs(t, err, os.ErrNotExist, "temporary directory removed")

	// Resume: nothing to do, same manifests, whatever the worker count.
	cfg.Workers = 1
	st2, err := Generate(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 0, st2.Synthesised)
	require.Equal(t, 12, st2.Skipped)
	for _, sp := range Splits {
		raw, err := os.ReadFile(filepath.Join(dir, string(sp)+".jsonl"))
		require.NoError(t, err)
		require.Equal(t, string(manifests[sp]), string(raw))
	}

	// A missing and a truncated file are made again; nothing else.
	utts, err := ReadManifest(filepath.Join(dir, "train.jsonl"))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(dir, utts[0].Path)))
	require.NoError(t, os.WriteFile(filepath.Join(dir, utts[1].Path), []byte("RIFF"), 0o644))
	st3, err := Generate(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 2, st3.Synthesised)
	require.Equal(t, 10, st3.Skipped)
}

func TestPlanDeterministic(t *testing.T) {
	cfg := GenerateConfig{OutDir: "x", Utterances: 200, Seed: 11, Workers: 1}
	a, err := Plan(cfg)
	require.NoError(t, err)
	cfg.Workers = 8
	b, err := Plan(cfg)
	require.NoError(t, err)
	require.Equal(t, a, b)
	cfg.Seed = 12
	c, err := Plan(cfg)
	require.NoError(t, err)
	require.NotEqual(t, a, c)
	voices := map[string]bool{}
	for _, u := range a {
		voices[u.Voice] = true
	}
	require.GreaterOrEqual(t, len(voices), 8, "voices vary")
	ids := make([]string, len(a))
	for i, u := range a {
		ids[i] = u.ID
	}
	slices.Sort(ids)
	require.Len(t, slices.Compact(ids), 200, "unique ids")
}

func TestGenerateConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  GenerateConfig
		want string
	}{
		{"no dir", GenerateConfig{Utterances: 1}, "OutDir"},
		{"no utterances", GenerateConfig{OutDir: "x"}, "Utterances"},
		{"fractions", GenerateConfig{OutDir: "x", Utterances: 5, ValidFraction: 0.5, TestFraction: 0.5}, "fractions"},
		{"noise", GenerateConfig{OutDir: "x", Utterances: 5, NoiseFraction: 2}, "NoiseFraction"},
		{"voice overlap", GenerateConfig{OutDir: "x", Utterances: 5, Voices: []string{"mr", "hi"}}, "both"},
		{"no espeak", GenerateConfig{OutDir: "x", Utterances: 5, Espeak: "/nonexistent/espeak-ng"}, "make deps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.OutDir = filepath.Join(t.TempDir(), tc.cfg.OutDir)
			if tc.name == "no dir" {
				tc.cfg.OutDir = ""
			}
			_, err := Generate(context.Background(), tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestGenerateCancelled(t *testing.T) {
	needSynth(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Generate(ctx, GenerateConfig{OutDir: t.TempDir(), Utterances: 20, Workers: 2})
	require.ErrorIs(t, err, context.Canceled)
}
