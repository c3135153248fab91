package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/recipes/tts"
)

// TestTTSEvalTranscribes: the registry gives `tts eval` the ASR recipe's
// transcriber (package tts does not import package asr).
func TestTTSEvalTranscribes(t *testing.T) {
	for _, r := range registry {
		if r, ok := r.(tts.Recipe); ok {
			require.NotNil(t, r.Transcribe)
			return
		}
	}
	t.Fatal("no tts recipe in the registry")
}

// checkpointOf is the checkpoint a training command's last line names.
func checkpointOf(t *testing.T, stdout string) string {
	t.Helper()
	m := regexp.MustCompile(`checkpoint (\S+)\s*$`).FindStringSubmatch(strings.TrimSpace(stdout))
	require.NotNil(t, m, stdout)
	return m[1]
}

// TestTTSFromTheCommandLine runs the recipe as a user does, at toy size:
// data, train-codec, train, say and memory-test, then the inputs that
// must be refused with one line and exit status 2 (empty text, a
// reference clip that is not audio or is 0.1 s long, a YAML value of the
// wrong type), none of which touches the WAV already written.
func TestTTSFromTheCommandLine(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	d := filepath.Join(dir, "data")
	ok := func(args ...string) string {
		t.Helper()
		r := runCLI(t, bin, args...)
		require.Equal(t, 0, r.code, "%v\n%s%s", args, r.stdout, r.stderr)
		return r.stdout
	}
	out := ok("tts", "data", "--out", d, "--utterances", "24", "--seed", "3", "--workers", "2")
	require.Contains(t, out, "24 synthesised")
	out = ok("tts", "train-codec", "--data", d, "--max-steps", "3", "--channels", "16", "--codes", "32", "--code-dim", "8",
		"--batch-size", "4", "--crop-frames", "32", "--checkpoint-dir", filepath.Join(dir, "codec"), "--threads", "1")
	codec := checkpointOf(t, out)
	tiny := []string{"--decoder-dim", "32", "--text-encoder-dim", "16", "--layers", "1", "--heads", "2", "--cond-latents", "4", "--threads", "1"}
	out = ok(append([]string{"tts", "train", "--data", d, "--codec", codec, "--max-steps", "3", "--batch-size", "2", "--grad-accum", "2",
		"--checkpoint-dir", filepath.Join(dir, "gpt")}, tiny...)...)
	require.Contains(t, out, "trained 3 steps (micro-batch 2 × 2)")
	gpt := checkpointOf(t, out)
	// Resumed with the flags it was trained with (the codec named again):
	// the checkpoint's model, one step more.
	out = ok(append([]string{"tts", "train", "--data", d, "--codec", codec, "--max-steps", "4", "--batch-size", "2", "--grad-accum", "2",
		"--checkpoint-dir", filepath.Join(dir, "gpt"), "--resume", gpt}, tiny...)...)
	require.Contains(t, out, "trained 4 steps")

	var first struct{ Path string }
	line, _, _ := bytes.Cut(must(os.ReadFile(filepath.Join(d, "train.jsonl"))), []byte("\n"))
	require.NoError(t, json.Unmarshal(line, &first))
	ref := filepath.Join(d, first.Path)
	wav := filepath.Join(dir, "out.wav")
	out = ok("tts", "say", "--checkpoint", gpt, "--text", "मावशी खूब नाचता", "--speaker", ref, "--out", wav, "--max-codes", "20", "--griffin-lim-iters", "2")
	require.Contains(t, out, "wrote "+wav)
	x, err := audio.ReadWAV(wav, tts.SampleRate)
	require.NoError(t, err, "a 16 kHz WAV")
	require.NotEmpty(t, x)
	written := must(os.ReadFile(wav))

	out = ok(append([]string{"tts", "memory-test", "--data", d, "--codec", codec, "--batch-sizes", "1,2", "--duration", "0.5"}, tiny...)...)
	require.Contains(t, out, "OOM")
	require.Len(t, regexp.MustCompile(`(?m)^\s*[12]\s`).FindAllString(out, -1), 2, out)

	notAudio := filepath.Join(dir, "notes.wav")
	require.NoError(t, os.WriteFile(notAudio, []byte("these are notes, not audio\n"), 0o644))
	short := filepath.Join(dir, "short.wav")
	require.NoError(t, exec.Command("sox", "-n", "-r", "16000", "-c", "1", "-b", "16", short, "synth", "0.1", "sine", "440").Run())
	badYAML := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(badYAML, []byte("training:\n  batch_size: four\n"), 0o644))
	say := func(text, speaker string) []string {
		return []string{"tts", "say", "--checkpoint", gpt, "--text", text, "--speaker", speaker, "--out", wav}
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"empty text", say("", ref), "--text is empty"},
		{"blank text", say("  \t", ref), "--text is empty"},
		{"reference not audio", say("नाचता", notAudio), "reference clip " + notAudio + ": not a RIFF/WAVE file"},
		{"reference of 0.1 s", say("नाचता", short), "0.10 s long; a speaker needs at least 0.5 s"},
		{"no reference", say("नाचता", filepath.Join(dir, "none.wav")), "none.wav"},
		{"YAML of the wrong type", append([]string{"tts", "train", "--config", badYAML, "--data", d, "--codec", codec}, tiny...), `training.batch_size: must be an integer, not "four"`},
		{"not a TTS checkpoint", []string{"tts", "say", "--checkpoint", codec, "--text", "नाचता", "--speaker", ref, "--out", wav}, codec},
		{"resume the codec as another", []string{"tts", "train-codec", "--data", d, "--resume", codec, "--channels", "16", "--codes", "64",
			"--checkpoint-dir", filepath.Join(dir, "codec2")}, "--codes 64 (it has 32)"},
		{"resume the GPT as another", append(append([]string{"tts", "train", "--data", d, "--resume", gpt, "--checkpoint-dir", filepath.Join(dir, "gpt2")}, tiny...),
			"--layers", "2", "--codec", notAudio), "--layers 2 (it has 1), --codec " + notAudio},
		{"a ranker without candidates", append(say("नाचता", ref), "--rank-asr", codec), "--rank-asr ranks the candidates: it needs --candidates 2 or more"},
		{"a ranker that is not there", append(say("नाचता", ref), "--rank-asr", filepath.Join(dir, "none.pt"), "--candidates", "2"), "none.pt"},
		{"memory-test sizes", []string{"tts", "memory-test", "--data", d, "--codec", codec, "--batch-sizes", "2,x"}, "batch-sizes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, bin, c.args...)
			require.Equal(t, 2, r.code, r.stdout+r.stderr)
			requireOneLine(t, r.stderr, c.want)
			require.Equal(t, written, must(os.ReadFile(wav)), "the WAV written before is untouched")
		})
	}

	// A batch no epoch can fill: refused after the set-up lines, not
	// "trained 0 steps".
	r := runCLI(t, bin, append([]string{"tts", "train", "--data", d, "--codec", codec, "--batch-size", "16", "--grad-accum", "2",
		"--checkpoint-dir", filepath.Join(dir, "big")}, tiny...)...)
	require.Equal(t, 2, r.code, r.stdout+r.stderr)
	require.Contains(t, lastLine(r.stderr), "effective batch 32 (× 2 accumulation steps) is more than the 20 training examples")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
