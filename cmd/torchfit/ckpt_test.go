package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// toneCorpus writes a corpus of sine tones (sox) with short texts: enough
// for a few training steps and an evaluation, without espeak-ng.
func toneCorpus(t *testing.T) string {
	dir := t.TempDir()
	texts := []string{"का", "की", "कू", "के", "को", "कं"}
	for _, split := range []string{"train", "valid", "test"} {
		var lines []string
		for k, text := range texts {
			name := fmt.Sprintf("%s_%d.wav", split, k)
			out, err := exec.Command("sox", "-n", "-r", "16000", "-c", "1", "-b", "16", filepath.Join(dir, name),
				"synth", "0.4", "sine", fmt.Sprint(300+80*k)).CombinedOutput()
			require.NoError(t, err, string(out))
			b, _ := json.Marshal(map[string]any{"id": name, "path": name, "text": text, "duration": 0.4, "split": split})
			lines = append(lines, string(b))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, split+".jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	}
	return dir
}

// result is a finished command: its exit status and output.
type result struct {
	code           int
	stdout, stderr string
}

// both returns the exit status and everything printed.
func (r result) both() (int, string) { return r.code, r.stdout + r.stderr }

func runCLI(t *testing.T, bin string, args ...string) result { return runCLIIn(t, "", bin, args...) }

// runCLIIn is runCLI in working directory dir ("": the test's), where a
// command's default relative paths (data/asr, checkpoints/...) resolve.
func runCLIIn(t *testing.T, dir, bin string, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a command that is not refused may run long
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	require.NotContains(t, r.stderr, "goroutine", "no panic trace")
	return r
}

// lastLine is the error line a failed command prints.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// editCheckpoint rewrites a checkpoint with edit applied to its top dict.
func editCheckpoint(t *testing.T, src, dst string, edit func(*ptfile.Dict)) {
	torch.Tidy(func() {
		v, err := ptfile.Load(src)
		require.NoError(t, err)
		d := v.(*ptfile.Dict)
		edit(d)
		require.NoError(t, ptfile.Save(dst, d))
	})
}

func TestCheckpointsOfRunsAndBadCheckpoints(t *testing.T) {
	if _, err := exec.LookPath("sox"); err != nil {
		t.Skip("sox missing: run 'make deps'")
	}
	bin := binary(t)
	data := toneCorpus(t)
	ck := filepath.Join(t.TempDir(), "ck")
	train := []string{"asr", "train", "--data", data, "--preset", "tiny", "--d-model", "32", "--encoder-layers", "1",
		"--decoder-layers", "1", "--batch-size", "2", "--grad-accum", "1", "--device", "cpu", "--max-steps", "2",
		"--checkpoint-every", "1", "--checkpoint-dir", ck, "--valid-limit", "2", "--workers", "1", "--warmup", "1"}

	r := runCLI(t, bin, train...)
	require.Zero(t, r.code, r.stderr)
	step2 := filepath.Join(ck, "checkpoint_step_000002.pt")
	require.Contains(t, r.stdout, "checkpoint "+step2)

	t.Run("another run's checkpoints in the way", func(t *testing.T) {
		before, err := os.ReadFile(step2)
		require.NoError(t, err)
		r := runCLI(t, bin, train...)
		require.Equal(t, 2, r.code, r.stderr)
		line := lastLine(r.stderr)
		require.Contains(t, line, "checkpoint_step_000001.pt and checkpoint_step_000002.pt written by another run")
		require.Contains(t, line, "pass --resume FILE to continue that run, choose another --checkpoint-dir, or pass --overwrite")
		after, err := os.ReadFile(step2)
		require.NoError(t, err)
		require.Equal(t, before, after, "nothing overwritten")

		r = runCLI(t, bin, append(train, "--overwrite")...)
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, "checkpoint "+step2)
	})

	t.Run("eval of NaN weights warns", func(t *testing.T) {
		r := runCLI(t, bin, "asr", "eval", "--checkpoint", step2, "--data", data, "--device", "cpu")
		require.Zero(t, r.code, r.stderr)
		require.NotContains(t, r.stderr, "warning")

		nan := filepath.Join(t.TempDir(), "nan.pt")
		editCheckpoint(t, step2, nan, func(d *ptfile.Dict) {
			x, _ := d.Get("model")
			torch.NoGrad(func() {
				x.(*ptfile.Dict).Tensor("ctc_head.weight").FillIn(math.NaN())
				x.(*ptfile.Dict).Tensor("decoder.norm.bias").FillIn(math.Inf(1))
			})
		})
		r = runCLI(t, bin, "asr", "eval", "--checkpoint", nan, "--data", data, "--device", "cpu")
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, "test split (6 utterances)")
		require.Contains(t, r.stderr, "torchfit: warning: "+nan+" holds NaN or infinite values in 2 weight tensor(s) (ctc_head.weight, decoder.norm.bias)")
	})

	// The ASR seed's advice when memory runs out: resume with
	// --batch_size 1 --gradient_accumulation_steps 8 (here 1 × 2 for the
	// run's 2 × 1), or a smaller model (which a resume cannot be).
	t.Run("resume with the seed's recovery flags", func(t *testing.T) {
		resume := func(flags ...string) []string {
			args := []string{"asr", "train", "--data", data, "--device", "cpu", "--max-steps", "3", "--checkpoint-every", "1",
				"--checkpoint-dir", filepath.Join(t.TempDir(), "ck"), "--valid-limit", "2", "--workers", "1", "--warmup", "1", "--resume", step2}
			return append(args, flags...)
		}
		r := runCLI(t, bin, resume("--batch_size", "1", "--gradient_accumulation_steps", "2")...)
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stderr, "effective batch 2 = micro-batch 1 × 2 (the checkpoint's run stepped in micro-batches of 2)")
		require.Contains(t, r.stdout, "micro-batch 1 × 2")

		r = runCLI(t, bin, resume("--batch_size", "1", "--gradient_accumulation_steps", "4")...)
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stderr, "the effective batch changes from the checkpoint's 2 (micro-batch 2 × 1) to 4 (micro-batch 1 × 4)")

		r = runCLI(t, bin, resume("--d_model", "48", "--encoder_layers", "2", "--decoder_layers", "1", "--preset", "tiny")...)
		require.Equal(t, 2, r.code, r.stderr)
		requireOneLine(t, r.stderr, "--d-model 48 (it has 32), --encoder-layers 2 (it has 1)")
	})

	t.Run("absurd model description", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.pt")
		editCheckpoint(t, step2, bad, func(d *ptfile.Dict) {
			x, _ := d.Get("meta")
			meta := x.(*ptfile.Dict)
			s, _ := meta.Get("model")
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(s.(string)), &m))
			m["config"].(map[string]any)["DModel"] = 1e7
			b, _ := json.Marshal(m)
			meta.Set("model", string(b))
		})
		for _, args := range [][]string{
			{"asr", "eval", "--checkpoint", bad, "--data", data, "--device", "cpu"},
			{"asr", "transcribe", "--checkpoint", bad, "--device", "cpu", filepath.Join(data, "test_0.wav")},
			append(append([]string(nil), train...), "--resume", bad, "--max-steps", "3"),
		} {
			r := runCLI(t, bin, args...)
			require.Equal(t, 2, r.code, "%v: %s", args[:2], r.stderr)
			require.Contains(t, lastLine(r.stderr), "d_model 10000000 outside [2, 4096]")
		}
	})
}
