package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
