package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// script runs one of the quality scripts (scripts/) with env added,
// the binary named by TORCHFIT, and returns its combined output.
func script(t *testing.T, bin, name string, args []string, env ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join("..", "..", "scripts", name)}, args...)...)
	cmd.Env = append(append(os.Environ(), "TORCHFIT="+bin, "CHECK=0"), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return f
}

// TestQualitySmoke runs each make quality-… script (issue 28's targets)
// for a few steps, with CHECK=0 so that the unmet target prints its
// verdict without failing, and holds each to a loose bound that a broken
// pipeline misses: the script's stages run and its verdict line is
// there, the Mamba model's held-out loss falls from ln 50257 = 10.86 to
// below 7.5 in 20 steps, CLIP's fine-tuned model learns colours (chance:
// 1/8) and improves on its pretrained start, and TTS's whole chain —
// corpus, judge, ranker, codec, GPT, synthesis of two candidates, their
// ranking, transcription — gives finite figures for every group and
// stage.
func TestQualitySmoke(t *testing.T) {
	bin := binary(t)
	t.Run("mamba", func(t *testing.T) {
		out := script(t, bin, "quality_mamba.sh", nil, "OUT="+t.TempDir(), "STEPS=20")
		m := regexp.MustCompile(`quality-mamba: NOT met: ([0-9.]+) nats/token after ([0-9.]+) CPU minutes`).FindStringSubmatch(out)
		require.NotNil(t, m, out)
		require.Less(t, atof(t, m[1]), 7.5)
		require.Contains(t, out, "| 20 |")
	})
	t.Run("clip", func(t *testing.T) {
		dir := t.TempDir()
		out := script(t, bin, "clip_quality.sh", []string{dir, "10m", "1e-3"},
			"IMAGES=600", "PRE_BUDGET=10m", "PRE_STEPS=10", "STEPS=20", "LAYOUTS=exact", "MEASURE=0", "THREADS=1")
		require.Regexp(t, `quality-clip: NOT met: exact 16×8 after 10m of CPU time: zero-shot [0-9.]+, text→image R@1 [0-9.]+`, out)
		eval := regexp.MustCompile(`zero-shot accuracy [0-9.]+ \(color ([0-9.]+), .*loss ([0-9.]+)`)
		read := func(name string) (color, loss float64) {
			raw, err := os.ReadFile(filepath.Join(dir, name))
			require.NoError(t, err)
			m := eval.FindStringSubmatch(string(raw))
			require.NotNil(t, m, string(raw))
			return atof(t, m[1]), atof(t, m[2])
		}
		_, pre := read("eval-pretrained.txt")
		color, loss := read("eval-exact.txt")
		require.GreaterOrEqual(t, color, 0.3, "colours learnt in 20 steps (chance 1/8)")
		require.Less(t, loss, pre, "fine-tuning improves on the pretrained model")
	})
	t.Run("tts", func(t *testing.T) {
		dir := t.TempDir()
		out := script(t, bin, "tts_intelligibility.sh", nil, "OUT="+dir, "UTTERANCES=40", "ASR_STEPS=3", "CODEC_STEPS=3", "GPT_STEPS=3", "LIMIT=1",
			"RANK_STEPS=3", "EVAL_FLAGS=--candidates 2",
			"ASR_FLAGS=--valid-limit 4", "CODEC_FLAGS=--channels 16 --codes 32 --code-dim 8 --batch-size 4",
			"GPT_FLAGS=--decoder-dim 32 --text-encoder-dim 16 --layers 1 --heads 2 --cond-latents 4 --valid-limit 4")
		for _, stage := range []string{"data", "judge", "ranker", "codec", "gpt", "eval"} {
			require.Regexp(t, "quality-tts: "+stage+": [0-9.]+ CPU seconds", out)
		}
		require.Regexp(t, `quality-tts: NOT met: CER TTS [0-9.]+ \(seen voices\) and [0-9.]+ \(unseen voice\) after [0-9.]+ CPU minutes`, out)
		var res struct {
			Rows []struct {
				Group                                     string
				N                                         int
				CEROriginal, CERVocoder, CERCodec, CERTTS float64
				MelL1Codec, MelL1TTS, SecondsSynthesised  float64
			}
		}
		raw, err := os.ReadFile(filepath.Join(dir, "eval", "eval.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &res))
		require.Len(t, res.Rows, 2)
		for _, r := range res.Rows {
			require.Equal(t, 1, r.N, r.Group)
			for _, v := range []float64{r.CEROriginal, r.CERVocoder, r.CERCodec, r.CERTTS, r.MelL1Codec, r.MelL1TTS} {
				require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "%s: %+v", r.Group, r)
				require.GreaterOrEqual(t, v, 0.0)
			}
			require.Positive(t, r.SecondsSynthesised)
		}
		wavs, err := filepath.Glob(filepath.Join(dir, "eval", "tts", "*.wav"))
		require.NoError(t, err)
		require.Len(t, wavs, 2)
		cands, err := filepath.Glob(filepath.Join(dir, "eval", "candidates", "*.wav"))
		require.NoError(t, err)
		require.Len(t, cands, 4, "two candidates a sentence, ranked by the ranker")
	})
}
