package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
)

// binary builds the command once per test run.
func binary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "torchfit")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func TestUserErrorsExitTwoWithOneLine(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	badJSON := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(badJSON, []byte(`{"batch_size": 2,`), 0o644))
	unknownKey := filepath.Join(dir, "unknown.json")
	require.NoError(t, os.WriteFile(unknownKey, []byte(`{"batch_sise": 2}`), 0o644))
	notASR := filepath.Join(dir, "other.pt")
	require.NoError(t, torch.Save(notASR, torch.NewDict("step", int64(3))))
	wav22 := filepath.Join(dir, "x.wav")
	require.NoError(t, exec.Command("sox", "-n", "-r", "22050", "-c", "1", "-b", "16", wav22, "synth", "0.2", "sine", "440").Run())

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing data dir", []string{"asr", "train", "--data", filepath.Join(dir, "nope"), "--device", "cpu"}, "torchfit asr data"},
		{"bad config JSON", []string{"asr", "train", "--config", badJSON}, "not valid JSON"},
		{"unknown config key", []string{"asr", "train", "--config", unknownKey}, `unknown setting "batch_sise"`},
		{"unknown vram", []string{"asr", "train", "--vram", "10gb"}, "unknown --vram"},
		{"unknown preset", []string{"asr", "train", "--preset", "huge"}, "unknown model preset"},
		{"bad memory limit", []string{"asr", "train", "--memory-limit", "lots"}, "bad memory size"},
		{"bad device", []string{"asr", "train", "--device", "tpu"}, "unknown device"},
		{"unknown flag", []string{"asr", "train", "--batchsize", "2"}, "flag provided but not defined"},
		{"bad flag value", []string{"asr", "train", "--batch-size", "two"}, "invalid value"},
		{"missing checkpoint", []string{"asr", "eval", "--checkpoint", filepath.Join(dir, "none.pt")}, "no such file"},
		{"not an ASR checkpoint", []string{"asr", "eval", "--checkpoint", notASR}, "not an ASR checkpoint"},
		{"wav of another sample rate", []string{"asr", "transcribe", "--checkpoint", notASR, wav22}, "not an ASR checkpoint"},
		{"plot without metrics", []string{"plot", "--metrics", filepath.Join(dir, "none.jsonl")}, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, string(out))
			require.Equal(t, 2, ee.ExitCode(), string(out))
			text := strings.TrimSpace(string(out))
			lines := strings.Split(text, "\n")
			last := lines[len(lines)-1]
			require.Contains(t, last, c.want)
			require.NotContains(t, text, "goroutine", "no panic trace")
			require.NotContains(t, text, "panic:")
		})
	}
}

// tinyCheckpoint saves a small randomly initialised ASR model.
func tinyCheckpoint(t *testing.T, path string) {
	t.Helper()
	toks := []string{"<blank>", "<pad>", "<sos>", "<eos>", "<unk>", " "}
	for r := 'क'; len(toks) < 40; r++ {
		toks = append(toks, string(r))
	}
	v, err := asr.NewVocab(toks)
	require.NoError(t, err)
	cfg, err := asr.Preset("tiny", v.Size())
	require.NoError(t, err)
	cfg.DModel, cfg.EncoderLayers, cfg.DecoderLayers = 64, 2, 1
	torch.ManualSeed(1)
	m, err := asr.NewConformer(cfg)
	require.NoError(t, err)
	defer nn.Free(m)
	m.Vocab = v
	require.NoError(t, asr.SaveModel(path, m, "tiny"))
}

// TestTranscribeInputs: every bad audio input exits 2 with one line; the
// common WAV formats transcribe (exit 0).
func TestTranscribeInputs(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "model.pt")
	tinyCheckpoint(t, ckpt)
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	sox := func(name string, args ...string) string {
		p := filepath.Join(dir, name)
		cmd := append([]string{"-D", "-n"}, args...)
		cmd = append(cmd, p, "synth", "1.5", "pinknoise", "vol", "0.3")
		out, err := exec.Command("sox", cmd...).CombinedOutput()
		require.NoError(t, err, string(out))
		return p
	}
	good := sox("good.wav", "-r", "16000", "-c", "1", "-b", "16")
	raw, err := os.ReadFile(good)
	require.NoError(t, err)
	empty := append(append([]byte(nil), raw[:40]...), 0, 0, 0, 0) // data chunk of 0 bytes
	copy(empty[4:8], []byte{36, 0, 0, 0})

	for _, c := range []struct {
		name string
		file string
		want string // in the one line of stderr
	}{
		{"missing file", filepath.Join(dir, "none.wav"), "none.wav: no such file or directory"},
		{"not RIFF", file("notes.wav", []byte("just some text, not audio\n")), "notes.wav: not a RIFF/WAVE file"},
		{"empty audio", file("empty.wav", empty), "empty.wav: no audio samples"},
		{"truncated header", file("trunc.wav", raw[:30]), "trunc.wav: truncated fmt chunk"},
		{"directory", dir, "is a directory"},
		{"too short", file("short.wav", asr.EncodeWAV(make([]int16, 400), 16000)), "short.wav: 0.025 s of audio is too short to transcribe"},
		{"a-law", sox("alaw.wav", "-r", "8000", "-c", "1", "-e", "a-law"), "format code 6 (A-law)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, "asr", "transcribe", "--checkpoint", ckpt, "--device", "cpu", c.file)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, stdout.String()+stderr.String())
			require.Equal(t, 2, ee.ExitCode(), stderr.String())
			text := strings.TrimSpace(stderr.String())
			require.NotContains(t, text, "\n", "one line")
			require.Contains(t, text, c.want)
			require.True(t, strings.HasPrefix(text, "torchfit: "+c.file), text)
			require.Empty(t, stdout.String())
		})
	}

	// The common formats transcribe: one line per file, exit 0.
	files := []string{
		good,
		sox("u8.wav", "-r", "16000", "-c", "1", "-b", "8", "-e", "unsigned-integer"),
		sox("s24.wav", "-r", "16000", "-c", "1", "-b", "24"),
		sox("f32.wav", "-r", "16000", "-c", "1", "-b", "32", "-e", "floating-point"),
		sox("f64.wav", "-r", "16000", "-c", "1", "-b", "64", "-e", "floating-point"),
		sox("cd.wav", "-r", "44100", "-c", "2", "-b", "16"),
		sox("tel.wav", "-r", "8000", "-c", "1", "-b", "16"),
		sox("dat.wav", "-r", "48000", "-c", "1", "-b", "24"),
	}
	cmd := exec.Command(bin, append([]string{"asr", "transcribe", "--checkpoint", ckpt, "--device", "cpu"}, files...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, len(files), stdout.String())
	for k, f := range files {
		require.True(t, strings.HasPrefix(lines[k], f+"\t"), lines[k])
	}
}
