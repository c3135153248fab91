package tts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// runTTS runs one of the recipe's commands with its real action, as
// `torchfit tts NAME args...` would.
func runTTS(t *testing.T, cmd *cli.Command, args ...string) error {
	t.Helper()
	recipes.Underscores([]*cli.Command{cmd})
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	return app.Run(append([]string{"torchfit", cmd.Name}, args...))
}

// visible names the flags a command's help lists.
func visible(cmd *cli.Command) map[string]bool {
	out := map[string]bool{}
	for _, f := range cmd.VisibleFlags() {
		out[f.Names()[0]] = true
	}
	return out
}

// requireConfigError requires err to be a *recipes.ConfigError naming
// field, a user error (exit 2).
func requireConfigError(t *testing.T, err error, field string, msgAndArgs ...any) {
	t.Helper()
	var ce *recipes.ConfigError
	require.ErrorAs(t, err, &ce, msgAndArgs...)
	require.Equal(t, field, ce.Field, msgAndArgs...)
	require.True(t, recipes.IsUserError(err), msgAndArgs...)
}

// TestVRAMRefused: the seed has no per-GPU-size table, so --vram (any
// value: a row other recipes have, or none) is refused by every train
// command rather than ignored, and not listed in their help; from a
// --config file it is logged and unused, as the harness treats settings
// that cannot apply.
func TestVRAMRefused(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	for _, c := range []struct {
		name string
		cmd  func() *cli.Command
	}{
		{"train", trainCommand}, {"train-codec", trainCodecCommand}, {"memory-test", memoryTestCommand},
	} {
		require.False(t, visible(c.cmd())["vram"], c.name)
		for _, v := range []string{"8gb", "24GB", "banana"} {
			err := runTTS(t, c.cmd(), "--device", "cpu", "--data", missing, "--vram", v)
			requireConfigError(t, err, "vram", "%s --vram %s: %v", c.name, v, err)
		}
	}
	cfg, _, _, err := parseTrain(t, "--config", writeFile(t, "config.yaml", "vram: 8gb\ntraining:\n  batch_size: 3\n"))
	require.NoError(t, err, "a config file's --vram is logged, not refused")
	require.Equal(t, 3, cfg.MicroBatch)
}

// TestMemoryTestRefusesWhatItCannotDo: every training flag the memory
// test cannot honour is hidden from its help and refused when given —
// before the run's front end would create a --metrics or --tensorboard
// file — while a --config file's are logged and the test runs.
func TestMemoryTestRefusesWhatItCannotDo(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none")
	vis := visible(memoryTestCommand())
	for _, u := range memoryTestUnused {
		require.False(t, vis[u.Flag], "--%s is listed", u.Flag)
	}
	for _, name := range []string{"batch-sizes", "duration", "grad-accum", "mixed-precision", "memory-limit", "grad-checkpointing", "codec", "reference"} {
		require.True(t, vis[name], "--%s is not listed", name)
	}
	values := map[string]string{"checkpoint-dir": filepath.Join(dir, "ck"), "metrics": filepath.Join(dir, "m.jsonl"),
		"tensorboard": filepath.Join(dir, "tb"), "resume": filepath.Join(dir, "r.pt")}
	for _, u := range memoryTestUnused {
		args := []string{"--device", "cpu", "--data", missing, "--" + u.Flag}
		var f cli.Flag
		for _, g := range memoryTestCommand().Flags {
			if g.Names()[0] == u.Flag {
				f = g
			}
		}
		require.NotNil(t, f, u.Flag)
		if _, isBool := f.(*cli.BoolFlag); !isBool {
			v, ok := values[u.Flag]
			if !ok {
				v = "2"
			}
			args = append(args, v)
		}
		err := runTTS(t, memoryTestCommand(), args...)
		requireConfigError(t, err, u.Flag, "--%s: %v", u.Flag, err)
	}
	require.NoFileExists(t, values["metrics"])
	require.NoDirExists(t, values["tensorboard"])
	require.NoDirExists(t, values["checkpoint-dir"])

	// --reference reaches the test (it changes the sequences trained on).
	err := runTTS(t, memoryTestCommand(), "--device", "cpu", "--data", missing, "--reference", "other")
	requireConfigError(t, err, "reference", "%v", err)

	// The seed's run with a config file that also sets epochs and steps:
	// logged as unused, and the test runs.
	data, codec := tinyCorpus(t)
	config := writeFile(t, "config.yaml", "training:\n  batch_size: 4\n  epochs: 10\n  max_steps: 2\n")
	err = runTTS(t, memoryTestCommand(), "--device", "cpu", "--data", data, "--codec", codec, "--config", config,
		"--batch-sizes", "1", "--duration", "0.01", "--decoder-dim", "32", "--text-encoder-dim", "16", "--layers", "1", "--heads", "2",
		"--cond-latents", "4", "--ff", "64")
	require.NoError(t, err)
}

// TestDataRefusesEmptySplits: a corpus size whose valid or test split
// would be empty (speech's split: 10% each, rounded) is a
// *recipes.ConfigError naming --utterances before anything is written, as
// are --workers out of the shared flags' range; minUtterances is the
// boundary.
func TestDataRefusesEmptySplits(t *testing.T) {
	least := minUtterances()
	counts, err := splitCounts(least)
	require.NoError(t, err)
	require.Empty(t, emptySplits(counts), "%d utterances: %v", least, counts)
	counts, err = splitCounts(least - 1)
	require.NoError(t, err)
	require.NotEmpty(t, emptySplits(counts), "%d utterances: %v", least-1, counts)
	require.Equal(t, 5, least, "round(0.1 n) >= 1 from n = 5")

	for _, c := range []struct {
		utterances, workers int
		field               string
	}{
		{-1, 0, "utterances"}, {0, 0, "utterances"}, {3, 0, "utterances"}, {least - 1, 0, "utterances"},
		{speech.MaxUtterances + 1, 0, "utterances"},
		{40, -1, "workers"}, {40, 100_000, "workers"}, {40, recipes.MaxWorkers + 1, "workers"},
	} {
		name := fmt.Sprintf("utterances %d workers %d", c.utterances, c.workers)
		out := filepath.Join(t.TempDir(), "d")
		_, err := Generate(context.Background(), DataConfig{OutDir: out, Utterances: c.utterances, Workers: c.workers, Seed: 1})
		requireConfigError(t, err, c.field, "%s: %v", name, err)
		require.NoDirExists(t, out, name)
		err = runTTS(t, dataCommand(), "--out", out, "--utterances", fmt.Sprint(c.utterances), "--workers", fmt.Sprint(c.workers))
		requireConfigError(t, err, c.field, "%s: %v", name, err)
	}
}

// TestEmptyValidationSplitRefused: a corpus without validation utterances
// (from before `tts data` refused one) is the user's error for both
// train and train-codec — not a failure (exit 1), and not a codec
// "validation MSE 0.0000" scored on nothing.
func TestEmptyValidationSplitRefused(t *testing.T) {
	cfg := gptConfig(t, t.TempDir())
	cfg.Data = copyDir(t, cfg.Data)
	require.NoError(t, os.WriteFile(filepath.Join(cfg.Data, "valid.jsonl"), nil, 0o644))
	_, err := BuildFeatureCache(cfg.Data)
	require.NoError(t, err)

	_, err = Train(context.Background(), cfg)
	require.ErrorIs(t, err, ErrEmptySplit)
	require.True(t, recipes.IsUserError(err), "%v", err)
	require.NoDirExists(t, cfg.CheckpointDir)

	codec := cfg
	codec.CodecCfg, codec.CropFrames, codec.CheckpointDir = tinyCodecConfig(), 32, filepath.Join(t.TempDir(), "ck")
	_, err = TrainCodec(context.Background(), codec)
	require.ErrorIs(t, err, ErrEmptySplit)
	require.True(t, recipes.IsUserError(err), "%v", err)
	require.NoDirExists(t, codec.CheckpointDir)

	// Scoring nothing is an error, never a perfect score.
	_, err = scoreCodec(nil, data.DatasetFunc[data.Sample]{}, torch.CPU)
	require.ErrorIs(t, err, ErrEmptySplit)
}

// TestEvalRefusesEmptySplit: evaluating an empty split is the user's
// error, not an empty table that passes for a score.
func TestEvalRefusesEmptySplit(t *testing.T) {
	cfg := gptConfig(t, t.TempDir())
	cfg.MaxSteps, cfg.Events = 1, nil
	res, err := Train(context.Background(), cfg)
	require.NoError(t, err)
	data := copyDir(t, cfg.Data)
	require.NoError(t, os.WriteFile(filepath.Join(data, "test.jsonl"), nil, 0o644))
	_, err = BuildFeatureCache(data)
	require.NoError(t, err)
	heard := func(_ string, files []string, _ torch.Device) ([]string, error) {
		return make([]string, len(files)), nil
	}
	out := filepath.Join(t.TempDir(), "eval")
	_, err = Evaluate(context.Background(), EvalConfig{Checkpoint: res.Checkpoint, ASR: cfg.Codec, Transcribe: heard, Data: data,
		Out: out, Device: torch.CPU, Sample: DefaultSampleOptions(), GLIters: 4})
	require.ErrorIs(t, err, ErrEmptySplit)
	require.True(t, recipes.IsUserError(err), "%v", err)
	require.NoDirExists(t, out)
}

// TestSampleThreadsBounded: say and eval take --threads in the range the
// train commands do (recipes.Common.Validate), refusing it rather than
// ignoring it.
func TestSampleThreadsBounded(t *testing.T) {
	for _, c := range []struct {
		cmd     func() *cli.Command
		threads string
	}{
		{func() *cli.Command { return sayCommand(nil) }, "-1"},
		{func() *cli.Command { return sayCommand(nil) }, "1025"},
		{func() *cli.Command { return evalCommand(nil) }, "-1"},
		{func() *cli.Command { return evalCommand(nil) }, "100000"},
	} {
		cmd := c.cmd()
		err := runTTS(t, cmd, "--device", "cpu", "--threads", c.threads)
		requireConfigError(t, err, "threads", "%s --threads %s: %v", cmd.Name, c.threads, err)
	}
}

// TestSayRefusesOutThatIsAnInput: an --out that is the --speaker
// recording (under any name: the same path, another spelling, a link) is
// refused before anything is written, leaving the recording as it was.
func TestSayRefusesOutThatIsAnInput(t *testing.T) {
	dir := t.TempDir()
	speaker := filepath.Join(dir, "myvoice.wav")
	require.NoError(t, audio.WriteWAV(speaker, audio.FloatToInt16(chirp()), SampleRate))
	before, err := os.ReadFile(speaker)
	require.NoError(t, err)
	link := filepath.Join(dir, "link.wav")
	require.NoError(t, os.Symlink(speaker, link))
	hard := filepath.Join(dir, "hard.wav")
	require.NoError(t, os.Link(speaker, hard))
	for _, c := range []struct {
		name, out string
		refused   bool
	}{
		{"same path", speaker, true},
		{"another spelling", filepath.Join(dir, ".", "myvoice.wav"), true},
		{"a symlink", link, true},
		{"a hard link", hard, true},
		{"a new file", filepath.Join(dir, "out.wav"), false},
	} {
		cfg := SayConfig{Checkpoint: filepath.Join(dir, "none.pt"), Text: "नाचता", Speaker: speaker, Out: c.out,
			Device: torch.CPU, Sample: DefaultSampleOptions(), GLIters: 4}
		_, err := Say(context.Background(), cfg)
		require.Error(t, err, c.name)
		require.True(t, recipes.IsUserError(err), "%s: %v", c.name, err)
		var ue *recipes.UsageError
		refused := errors.As(err, &ue) && !errors.Is(err, os.ErrNotExist)
		require.Equal(t, c.refused, refused, "%s: %v", c.name, err)
		after, err := os.ReadFile(speaker)
		require.NoError(t, err)
		require.Equal(t, before, after, c.name)
	}
}

// TestLoadOutOfMemory: running out of memory while reading a checkpoint
// or building a model under the user's own cap is an out-of-memory error
// (exit 3) that says the cap is too small — not a user error blaming the
// file (exit 2).
func TestLoadOutOfMemory(t *testing.T) {
	_, codec := tinyCorpus(t)
	var err, buildErr error
	torch.Main().Do(func() {
		st := torch.MustMemoryStats(torch.CPU)
		require.NoError(t, torch.SetMemoryLimit(torch.CPU, st.Allocated+1024))
		defer torch.SetMemoryLimit(torch.CPU, 0)
		_, _, _, err = readCheckpoint(codec, "codec")
		var c *Codec
		if c, buildErr = NewCodec(tinyCodecConfig()); buildErr == nil {
			nn.Free(c)
		}
		buildErr = buildError(buildErr)
	})
	require.ErrorIs(t, err, torch.ErrOutOfMemory)
	require.False(t, recipes.IsUserError(err), "%v", err)
	require.ErrorContains(t, err, "too small to load the codec checkpoint")
	var ce *recipes.CheckpointError
	require.False(t, errors.As(err, &ce), "%v", err)

	require.ErrorIs(t, buildErr, torch.ErrOutOfMemory)
	require.False(t, recipes.IsUserError(buildErr), "%v", buildErr)

	oom := &torch.Error{Op: "aten::empty", Msg: "CPU out of memory", OOM: true}
	require.False(t, recipes.IsUserError(checkpointError(codec, oom)), "the file is not at fault")
	require.True(t, recipes.IsUserError(checkpointError(codec, errors.New("bad weights"))))
	require.True(t, recipes.IsUserError(buildError(errors.New("heads do not divide the width"))))
}
