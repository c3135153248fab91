package mamba

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes"
)

// resolve parses a train command line with the real flags, config file
// and presets, and returns the settings Train would get.
func resolve(t *testing.T, line string) TrainConfig {
	t.Helper()
	cmd := trainCommand()
	var got TrainConfig
	cmd.Action = func(c *cli.Context) error {
		run, err := recipes.Prepare(c, spec)
		if err != nil {
			return err
		}
		defer run.Close()
		got, err = trainConfigFrom(c, run)
		return err
	}
	recipes.Underscores([]*cli.Command{cmd})
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	require.NoError(t, app.Run(append([]string{"torchfit", "train"}, strings.Fields(line)...)), line)
	return got
}

// The Mamba guide's command lines and its two config files, verbatim,
// with a data directory and a step cap added, resolve to what the guide
// says they mean.
func TestSeedCommandLinesResolve(t *testing.T) {
	const extra = " --data_dir your_data --max_steps 3"
	safe := filepath.Join("testdata", "config_16gb_safe.json")
	balanced := filepath.Join("testdata", "config_balanced_16gb.json")
	for _, tc := range []struct {
		line          string
		dModel        int64
		layers        int
		batch, accum  int
		seq           int
		precision     string
		checkpointing bool
		lr            float64
		warmup        int
		evalEvery     int
	}{
		{"--model_size small --vram 8gb", 512, 8, 1, 16, 256, "auto", true, 3e-4, 2000, 1000},
		{"--model_size medium --vram 16gb", 768, 24, 2, 8, 512, "auto", true, 3e-4, 2000, 1000},
		{"--model_size small --vram 12gb", 512, 8, 2, 8, 512, "auto", true, 3e-4, 2000, 1000},
		{"--model_size medium --vram 24gb", 768, 24, 4, 4, 1024, "auto", false, 3e-4, 2000, 1000},
		{"--config " + safe, 512, 8, 1, 16, 256, "auto", true, 3e-4, 2000, 1000},
		{"--config " + balanced, 512, 8, 2, 8, 512, "auto", true, 3e-4, 2000, 1000},
		{"--config " + safe + " --training_preset fast", 512, 8, 1, 16, 256, "auto", true, 3e-4, 5, 10}, // fast's schedule wins over the file's
		{"--training_preset fast --vram 8gb --model_size small", 512, 8, 1, 16, 256, "auto", true, 3e-4, 5, 10},
		{"--vram cpu", 128, 2, 8, 1, 128, "", false, 6e-3, 30, 50}, // the CPU preset and its schedule ("": the fp32 default)
		{"--vram cpu --training_preset default", 128, 2, 8, 1, 128, "", false, 3e-4, 2000, 1000},
	} {
		cfg := resolve(t, tc.line+extra)
		require.Equal(t, tc.dModel, cfg.Model.DModel, tc.line)
		require.Equal(t, tc.layers, cfg.Model.NLayers, tc.line)
		require.Equal(t, int64(16), cfg.Model.DState, tc.line)
		require.Equal(t, int64(VocabSize), cfg.Model.VocabSize, tc.line)
		require.Equal(t, tc.batch, cfg.MicroBatch, tc.line)
		require.Equal(t, tc.accum, cfg.Accum, tc.line)
		require.Equal(t, tc.seq, cfg.SeqLen, tc.line)
		require.Equal(t, tc.precision, cfg.Precision, tc.line)
		require.Equal(t, tc.checkpointing, cfg.GradCheckpointing, tc.line)
		require.Equal(t, tc.lr, cfg.LR, tc.line)
		require.Equal(t, tc.warmup, cfg.Warmup, tc.line)
		require.Equal(t, tc.evalEvery, cfg.Optim.EvalInterval, tc.line)
		require.Equal(t, 3, cfg.MaxSteps, "the step cap overrides the file: "+tc.line)
		require.Equal(t, "your_data", cfg.Data, tc.line)
		require.Equal(t, 0.9, cfg.Optim.Beta1)
		require.Equal(t, 0.95, cfg.Optim.Beta2)
		require.Equal(t, 0.1, cfg.Optim.WeightDecay)
		require.Equal(t, 1.0, cfg.ClipNorm)
		require.Equal(t, "fused", cfg.Scan)
	}
	// The file's own sections: dropout, the model's max_seq_len and the
	// optimizer's epsilon.
	cfg := resolve(t, "--config "+safe+extra)
	require.Equal(t, 0.1, cfg.Model.Dropout)
	require.Equal(t, 256, cfg.Model.MaxSeqLen)
	require.Equal(t, 1e-8, cfg.Optim.Eps)
	require.Equal(t, 5000, cfg.CheckpointEvery)
	require.Equal(t, 10, cfg.Optim.LoggingSteps)
	require.False(t, cfg.CPUOffload)
	// use_cpu_offload in a file, and flags overriding a file.
	dir := t.TempDir()
	raw, err := os.ReadFile(safe)
	require.NoError(t, err)
	off := filepath.Join(dir, "offload.json")
	require.NoError(t, os.WriteFile(off, []byte(strings.Replace(string(raw), `"use_cpu_offload": false`, `"use_cpu_offload": true`, 1)), 0o644))
	cfg = resolve(t, "--config "+off+" --batch_size 2 --scan chunked"+extra)
	// On CUDA the file's use_cpu_offload applies; with the CPU as the
	// device (where the state already is) it is logged as unused.
	require.Equal(t, cfg.Device.IsCUDA(), cfg.CPUOffload)
	require.Equal(t, 2, cfg.MicroBatch)
	require.Equal(t, "chunked", cfg.Scan)
}

// cliRun runs `torchfit mamba ARGS...` in this process and returns what
// it printed on stdout.
func cliRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := &cli.App{Commands: []*cli.Command{recipes.Command(Recipe{})}, ExitErrHandler: func(*cli.Context, error) {}}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		done <- b.String()
	}()
	runErr := app.Run(append([]string{"torchfit", "mamba"}, args...))
	os.Stdout = stdout
	w.Close()
	out := <-done
	r.Close()
	return out, runErr
}

// The five verbs from the command line: the Bible tokenised, a few steps
// of the CPU preset (held-out loss falls), the optimizer's offload refused
// on the CPU, evaluation and generation from the checkpoint, and the
// estimate measured against a dry step.
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "kjv")
	out, err := cliRun(t, "data", "--out", data)
	require.NoError(t, err)
	require.Contains(t, out, "training tokens")
	m, err := ReadMeta(data)
	require.NoError(t, err)
	require.Greater(t, m.TrainTokens, int64(900_000), "the whole Bible: about a million GPT-2 tokens")
	require.InDelta(t, 0.05, float64(m.ValidChars)/float64(m.TrainChars+m.ValidChars), 0.005)
	_, err = cliRun(t, "data", "--out", data)
	require.True(t, recipes.IsUserError(err), "a second data run does not overwrite: %v", err)

	ck := filepath.Join(dir, "ck")
	out, err = cliRun(t, "train", "--vram", "cpu", "--data_dir", data, "--max_steps", "6", "--learning_rate", "3e-3",
		"--warmup", "0", "--eval-tokens", "2048", "--checkpoint-dir", ck)
	require.NoError(t, err)
	require.Contains(t, out, "trained 6 steps")
	ckpt := filepath.Join(ck, "checkpoint_step_000006.pt")
	require.FileExists(t, ckpt)

	// A resume trains the checkpoint's model: flags asking for another
	// are refused, each named; those that agree are fine.
	mc := ModelSizes[VRAMPresets["cpu"].Model]
	_, err = cliRun(t, "train", "--vram", "cpu", "--data_dir", data, "--max_steps", "7", "--eval-tokens", "1024",
		"--checkpoint-dir", filepath.Join(dir, "ck2"), "--resume", ckpt, "--d-model", fmt.Sprint(mc.DModel+8), "--n-layers", fmt.Sprint(mc.NLayers),
		"--model_size", "small")
	var conflict *recipes.ResumeConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, []string{"model-size", "d-model"}, []string{conflict.Conflicts[0].Flag, conflict.Conflicts[1].Flag})
	require.Len(t, conflict.Conflicts, 2)
	require.NoDirExists(t, filepath.Join(dir, "ck2"))

	r, err := Evaluate(EvalConfig{Checkpoint: ckpt, Data: data, MaxTokens: 2048, Batch: 8})
	require.NoError(t, err)
	require.Less(t, r.Loss, 10.0, "six steps at 3e-3 move the held-out loss from ln 50257 = 10.8")
	out, err = cliRun(t, "eval", "--checkpoint", ckpt, "--data_dir", data, "--max-tokens", "2048")
	require.NoError(t, err)
	require.Contains(t, out, "nats/token")

	out, err = cliRun(t, "generate", "--checkpoint", ckpt, "--prompt", "And God said", "--max-new-tokens", "8", "--temperature", "0")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "And God said"), out)
	require.Greater(t, len(out), len("And God said"))

	// The seed's last resort moves AdamW's state off the GPU: on the CPU
	// it cannot apply (it would only add host copies), and is refused.
	// Training with the state offloaded is the library's Offload
	// (TestEntryPointsFreeEverything; on CUDA, make gpu-check's cpu-offload).
	off := filepath.Join(dir, "off")
	_, err = cliRun(t, "train", "--vram", "cpu", "--use_cpu_offload", "--data_dir", data, "--max_steps", "2",
		"--eval-tokens", "1024", "--checkpoint-dir", off)
	var ce *recipes.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "cpu-offload", ce.Field)
	require.NoDirExists(t, off)

	out, err = cliRun(t, "estimate", "--vram", "cpu", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "measured total")
	require.Contains(t, out, "--vram cpu")
	out, err = cliRun(t, "estimate", "--config", filepath.Join("testdata", "config_16gb_safe.json"))
	require.NoError(t, err)
	require.Contains(t, out, "config_16gb_safe.json")
}
