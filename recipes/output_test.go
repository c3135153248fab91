package recipes

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// An output path may be new, empty or a file of the kind written; a
// directory or a file of another kind (metrics, a checkpoint) is refused.
func TestCheckOutput(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	png := file("old.png", "\x89PNG\r\n\x1a\nrest")
	wav := file("old.wav", "RIFF\x24\x00\x00\x00WAVEfmt ")
	metrics := file("m.jsonl", `{"step":1,"loss":2}`+"\n")
	ckpt := file("checkpoint_step_000001.pt", "PK\x03\x04zip")
	empty := file("empty.png", "")
	for _, tc := range []struct {
		path string
		kind OutputKind
		ok   bool
	}{
		{filepath.Join(dir, "new.png"), PNG, true},
		{png, PNG, true},
		{empty, PNG, true},
		{wav, WAV, true},
		{metrics, PNG, false},
		{ckpt, WAV, false},
		{png, WAV, false},
		{dir, PNG, false},
	} {
		err := CheckOutput("out", tc.path, tc.kind)
		if tc.ok {
			require.NoError(t, err, tc.path)
			continue
		}
		require.Error(t, err, tc.path)
		require.True(t, IsUserError(err), "%v", err)
	}
}

// A data command refuses a directory that holds a data set unless
// --overwrite, and then says what it replaces.
func TestCheckDataOut(t *testing.T) {
	dir := t.TempDir()
	line, err := CheckDataOut(dir, false, "manifest.jsonl", "meta.json")
	require.NoError(t, err)
	require.Empty(t, line)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta.json"), []byte("{}"), 0o644))
	_, err = CheckDataOut(dir, false, "manifest.jsonl", "meta.json")
	require.ErrorContains(t, err, "already holds a data set (meta.json)")
	require.True(t, IsUserError(err))
	line, err = CheckDataOut(dir, true, "manifest.jsonl", "meta.json")
	require.NoError(t, err)
	require.Contains(t, line, "replacing the data set in "+dir)
}

// Off a terminal (stderr piped to a file or CI), the front end writes a
// step line at a steady cadence: step, epoch, loss, lr, samples/s and
// memory; the other log lines as ever.
func TestFrontEndStepLinesOffTerminal(t *testing.T) {
	tty, err := os.CreateTemp(t.TempDir(), "stderr") // a file: not a terminal
	require.NoError(t, err)
	defer tty.Close()
	var log bytes.Buffer
	fe, err := newFrontEnd(report.NewLogger(&log), tty, Outputs{})
	require.NoError(t, err)
	fe.events(train.Message{Text: "precision fp32"})
	fe.events(train.EpochEvent{Epoch: 1, Epochs: 1, Batches: 25})
	for step := 1; step <= 25; step++ {
		fe.events(train.StepEvent{StepInfo: train.StepInfo{Step: step, Loss: 2, LR: 1e-3, Samples: 4, Duration: time.Second,
			Memory: torch.MemStats{Allocated: 1 << 20, PeakAllocated: 2 << 20}}})
	}
	require.NoError(t, fe.done())
	lines := regexp.MustCompile(`step (\d+) \| epoch 1/1 \| loss 2\.0000 \| lr 1\.00e-03 \| 4\.0 samples/s \| memory 1\.00 MiB \(peak 2\.00 MiB\)`).
		FindAllStringSubmatch(log.String(), -1)
	var steps []string
	for _, l := range lines {
		steps = append(steps, l[1])
	}
	require.Equal(t, []string{"1", "10", "20"}, steps, log.String())
	require.Contains(t, log.String(), "] precision fp32\n")

	r := &Run{steps: fe.steps}
	r.LogSteps(0) // a recipe with its own step lines
	log.Reset()
	fe.events(train.StepEvent{StepInfo: train.StepInfo{Step: 30}})
	require.Empty(t, log.String())
}
