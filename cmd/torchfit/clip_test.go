package main

import (
	"bytes"
	be "encoding/binary"
	"hash/crc32"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClipFromTheCommandLine runs the CLIP recipe as a user does, on
// small data sets: data → pretrain → train --init → eval, the seed's
// command lines verbatim (with a data directory, a checkpoint directory
// and a step cap added), and bad inputs, each one line and exit status 2
// with nothing written.
func TestClipFromTheCommandLine(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	cars, shapes := filepath.Join(dir, "cars"), filepath.Join(dir, "shapes")
	for _, args := range [][]string{
		{"clip", "data", "--out", cars, "--images", "200", "--seed", "1", "--workers", "2"},
		{"clip", "data", "--out", shapes, "--kind", "shapes", "--images", "200", "--seed", "2", "--workers", "2"},
	} {
		r := runCLI(t, bin, args...)
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, "200 images drawn")
	}
	require.FileExists(t, filepath.Join(cars, "manifest.jsonl"))

	// Pretraining from random weights, then fine-tuning from its checkpoint.
	pre := filepath.Join(dir, "pre")
	r := runCLI(t, bin, "clip", "pretrain", "--data", shapes, "--max-steps", "1", "--checkpoint-dir", pre, "--device", "cpu")
	require.Zero(t, r.code, r.stderr)
	preCk := filepath.Join(pre, "checkpoint_step_000001.pt")
	require.Contains(t, r.stdout, "pretrain: 1 step (micro-batch 16 × 8, exact)")
	require.FileExists(t, preCk)

	ft := filepath.Join(dir, "ft")
	r = runCLI(t, bin, "clip", "train", "--data", cars, "--init", preCk, "--max-steps", "1", "--checkpoint-dir", ft, "--device", "cpu")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, "Effective batch size: 128")
	ftCk := filepath.Join(ft, "checkpoint_step_000001.pt")
	require.FileExists(t, ftCk)

	r = runCLI(t, bin, "clip", "eval", "--checkpoint", ftCk, "--data", cars)
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `test split \(20 images, \d+ classes, held-out templates\), cpu model: zero-shot accuracy [\d.]+ \(color [\d.]+, type [\d.]+, direction [\d.]+\), text→image R@1 [\d.]+`, r.stdout)

	// The seed's command lines, unchanged, and the lines its
	// "Verification" section looks for.
	memory := regexp.MustCompile(`GPU Memory - Allocated: \d+\.\d\d GB, Peak: \d+\.\d\d GB \(device cpu`)
	for k, tc := range []struct {
		line, effective, micro, accum string
	}{
		{"--epochs 20 --lr 2e-5", "128", "16", "8"},
		{"--batch_size 8 --gradient_accumulation 16", "128", "8", "16"},
		{"--batch_size 12 --gradient_accumulation 10", "120", "12", "10"},
		{"--batch_size 32 --gradient_accumulation 4", "128", "32", "4"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			ck := filepath.Join(dir, "seed", string(rune('a'+k)))
			args := append(append([]string{"clip", "train"}, strings.Fields(tc.line)...), "--data", cars, "--checkpoint-dir", ck, "--max-steps", "1")
			r := runCLI(t, bin, args...)
			require.Zero(t, r.code, r.stderr)
			require.Contains(t, r.stderr, "Effective batch size: "+tc.effective+"\n")
			require.Regexp(t, memory, r.stderr)
			require.Contains(t, r.stdout, "train: 1 step (micro-batch "+tc.micro+" × "+tc.accum+", exact)")
			require.FileExists(t, filepath.Join(ck, "checkpoint_step_000001.pt"))
		})
	}

	// Bad input: one line on stderr after the run's log, exit status 2,
	// no checkpoint directory.
	truncated := filepath.Join(dir, "truncated.pt")
	raw, err := os.ReadFile(preCk)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(truncated, raw[:len(raw)/2], 0o644))
	ck := filepath.Join(dir, "bad")
	trainOn := func(data string, extra ...string) []string {
		return append([]string{"clip", "train", "--data", data, "--checkpoint-dir", ck, "--max-steps", "1", "--device", "cpu"}, extra...)
	}
	// Every image of a copy of the data set claims 60000 × 60000 pixels.
	huge := filepath.Join(dir, "huge")
	require.NoError(t, os.CopyFS(huge, os.DirFS(cars)))
	images, err := filepath.Glob(filepath.Join(huge, "images", "*.png"))
	require.NoError(t, err)
	require.NotEmpty(t, images)
	for _, p := range images {
		require.NoError(t, os.WriteFile(p, pngClaiming(t, 60000, 60000), 0o644))
	}
	type badCase struct {
		name, want string
		args       []string
	}
	cases := []badCase{
		{name: "missing data", args: trainOn(filepath.Join(dir, "none")), want: "no manifest.jsonl: create a data set with `torchfit clip data"},
		{name: "eval on missing data", args: []string{"clip", "eval", "--checkpoint", ftCk, "--data", filepath.Join(dir, "none")}, want: "no manifest.jsonl"},
		{name: "missing checkpoint", args: trainOn(cars, "--init", filepath.Join(dir, "none.pt")), want: "no such file"},
		{name: "--gradient_accumulation 0", args: trainOn(cars, "--gradient_accumulation", "0"), want: "--grad-accum 0: must be at least 1"},
		{name: "another shape", args: trainOn(cars, "--init", preCk, "--preset", "vit-b32"), want: "is not preset vit-b32"},
		{name: "truncated checkpoint", args: trainOn(cars, "--init", truncated), want: "not a readable torch.save file"},
		{name: "eval of a truncated checkpoint", args: []string{"clip", "eval", "--checkpoint", truncated, "--data", cars}, want: "not a readable torch.save file"},
		{name: "unknown accumulation", args: trainOn(cars, "--contrastive-accumulation", "sometimes"), want: "contrastive-accumulation"},
		{name: "train on images claiming 60000 × 60000", args: trainOn(huge), want: "an image of 60000 × 60000 pixels: at most 67108864 pixels"},
		{name: "eval on images claiming 60000 × 60000", args: []string{"clip", "eval", "--checkpoint", ftCk, "--data", huge}, want: "an image of 60000 × 60000 pixels"},
		{name: "another run's checkpoints", args: []string{"clip", "train", "--data", cars, "--checkpoint-dir", ft, "--max-steps", "1"}, want: "written by another run"},
	}
	if _, err := exec.LookPath("sox"); err == nil {
		// A real ASR checkpoint, for the CLIP commands to refuse.
		asrCk := filepath.Join(dir, "asr")
		r := runCLI(t, bin, "asr", "train", "--data", toneCorpus(t), "--preset", "tiny", "--d-model", "32", "--encoder-layers", "1",
			"--decoder-layers", "1", "--batch-size", "2", "--grad-accum", "1", "--device", "cpu", "--max-steps", "1",
			"--checkpoint-dir", asrCk, "--valid-limit", "2", "--workers", "1", "--warmup", "1")
		require.Zero(t, r.code, r.stderr)
		asrFile := filepath.Join(asrCk, "checkpoint_step_000001.pt")
		cases = append(cases,
			badCase{name: "an ASR checkpoint for --init", args: trainOn(cars, "--init", asrFile), want: "asr recipe"},
			badCase{name: "an ASR checkpoint for --resume", args: trainOn(cars, "--resume", asrFile), want: "asr recipe"},
			badCase{name: "an ASR checkpoint for eval", args: []string{"clip", "eval", "--checkpoint", asrFile, "--data", cars}, want: "asr recipe"},
		)
	}
	before, err := os.ReadFile(ftCk)
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := runInProcess(c.args...)
			require.Equal(t, 2, code, out)
			requireOneLine(t, out, c.want)
			require.NoDirExists(t, ck, "nothing written")
		})
	}
	// Under a launcher every rank refuses (the exact loss is one process's).
	r = runCLI(t, bin, "launch", "--nproc", "2", "--", "clip", "train", "--data", cars, "--checkpoint-dir", ck, "--max-steps", "1", "--device", "cpu")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "the clip recipe trains in one process, not data parallel")
	require.NoDirExists(t, ck, "nothing written")

	after, err := os.ReadFile(ftCk)
	require.NoError(t, err)
	require.Equal(t, before, after, "another run's checkpoint not overwritten")
}

// pngClaiming is a 4 × 4 PNG whose header (IHDR, with its CRC) claims
// w × h pixels.
func pngClaiming(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 4, 4))))
	b := buf.Bytes()
	require.Equal(t, "IHDR", string(b[12:16]))
	be.BigEndian.PutUint32(b[16:], uint32(w))
	be.BigEndian.PutUint32(b[20:], uint32(h))
	be.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}
