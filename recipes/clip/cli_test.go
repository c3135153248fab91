package clip

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes"
)

// parseTrain parses a train command line with the real flags and returns
// the configuration the train command would run with.
func parseTrain(t *testing.T, line string) (TrainConfig, recipes.Common, error) {
	t.Helper()
	cmd := trainCommand("train")
	var got TrainConfig
	var cm recipes.Common
	var cfgErr error
	cmd.Action = func(c *cli.Context) error {
		fromFile, err := recipes.ApplyConfig(c, nil)
		if err != nil {
			return err
		}
		require.NoError(t, c.Set("device", "cpu"))
		if cm, err = recipes.ReadCommon(c); err != nil {
			cfgErr = err
			return nil
		}
		got, cfgErr = trainConfigFrom(c, &recipes.Run{Common: cm, FromFile: fromFile}, "train")
		return nil
	}
	recipes.Underscores([]*cli.Command{cmd})
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	require.NoError(t, app.Run(append([]string{"torchfit", "train"}, strings.Fields(line)...)))
	return got, cm, cfgErr
}

// The seed's command lines, verbatim, with a data directory and a step
// cap added, and its settings table.
func TestSeedCommandLines(t *testing.T) {
	const extra = " --data data/clip-cars --max-steps 5"
	cfg, cm, err := parseTrain(t, "--epochs 20 --lr 2e-5"+extra)
	require.NoError(t, err)
	require.Equal(t, 16, cfg.MicroBatch)
	require.Equal(t, 8, cfg.Accum)
	require.Equal(t, 128, cm.EffectiveBatch())
	require.Equal(t, 20, cfg.Epochs)
	require.Equal(t, 2e-5, cfg.LR)
	require.Equal(t, "auto", cfg.Precision, "mixed precision on by default")
	require.Equal(t, 1.0, cfg.ClipNorm)
	require.Equal(t, 0.95, cm.MemoryFraction)
	require.Equal(t, 2, cfg.Prefetch, "the seed's prefetch factor 2")
	require.Equal(t, Exact, cfg.Mode)
	require.Equal(t, 5, cfg.MaxSteps)
	for _, tc := range []struct {
		line         string
		batch, accum int
	}{
		{"--batch_size 8 --gradient_accumulation 16", 8, 16},
		{"--batch_size 12 --gradient_accumulation 10", 12, 10},
		{"--batch_size 32 --gradient_accumulation 4", 32, 4},
	} {
		cfg, _, err := parseTrain(t, tc.line+extra)
		require.NoError(t, err, tc.line)
		require.Equal(t, tc.batch, cfg.MicroBatch, tc.line)
		require.Equal(t, tc.accum, cfg.Accum, tc.line)
	}
	// The seed's configuration keys in a file; flags override it.
	conf := filepath.Join(t.TempDir(), "c.json")
	require.NoError(t, os.WriteFile(conf, []byte(`{"batch_size": 16, "gradient_accumulation_steps": 8, "empty_cache_frequency": 5, "mixed_precision": true, "learning_rate": 1e-4}`), 0o644))
	cfg, cm, err = parseTrain(t, "--config "+conf+" --lr 3e-5"+extra)
	require.NoError(t, err)
	require.Equal(t, 128, cm.EffectiveBatch())
	require.Equal(t, 3e-5, cfg.LR)
	require.Equal(t, "auto", cfg.Precision)
	// Read from the file; on the CPU, Prepare leaves it unused with a line
	// (recipes.TestNotHereSettings).
	require.Equal(t, 5, cfg.EmptyCacheEvery)

	cfg, _, err = parseTrain(t, "--contrastive-accumulation naive"+extra)
	require.NoError(t, err)
	require.Equal(t, Naive, cfg.Mode)

	// --vram: ViT-B/32 at the seed's micro-batches, effective batch 128.
	for _, tc := range []struct {
		vram         string
		batch, accum int
	}{{"8gb", 16, 8}, {"12gb", 32, 4}, {"16GB", 32, 4}, {"24gb", 64, 2}} {
		cfg, _, err := parseTrain(t, "--vram "+tc.vram+extra)
		require.NoError(t, err)
		require.Equal(t, "vit-b32", cfg.Preset)
		require.Equal(t, tc.batch*tc.accum, 128)
		require.Equal(t, tc.batch, cfg.MicroBatch, tc.vram)
		require.Equal(t, tc.accum, cfg.Accum, tc.vram)
	}
	cfg, _, err = parseTrain(t, "--vram 12gb --batch_size 8 --gradient_accumulation 16"+extra)
	require.NoError(t, err)
	require.Equal(t, 8, cfg.MicroBatch, "the command line wins over --vram")
	require.Equal(t, 16, cfg.Accum)

	// Bad settings are the user's (exit status 2).
	for _, line := range []string{"--gradient_accumulation 0", "--contrastive-accumulation sometimes", "--vram 10gb",
		"--lr -1", "--batch_size 1 --gradient_accumulation 1",
		"--batch_size 4096 --gradient_accumulation 8192", "--epochs 0", "--auto-batch", "--cpu-budget -1s", "--init a.pt --resume b.pt"} {
		_, _, err := parseTrain(t, line+extra)
		require.Error(t, err, line)
		require.True(t, recipes.IsUserError(err), "%s: %v", line, err)
	}
	// Each names the flag given: --dry-run, not the --auto-batch it implies.
	for _, flag := range []string{"auto-batch", "dry-run"} {
		_, _, err := parseTrain(t, "--"+flag+extra)
		var ce *recipes.ConfigError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, flag, ce.Field)
	}
	// --zero, --allreduce-after-backward and a launcher are refused by
	// recipes.Prepare, for the reason the recipe declares.
	require.Contains(t, spec.OneProcess, "contrastive loss")
}

// TrainConfig.Validate checks what the library's callers set too (the
// command line's shared flags are checked before it): the harness's
// bounds on batch sizes and steps, and the recipe's own settings.
func TestValidate(t *testing.T) {
	ok := TrainConfig{Common: recipes.Common{MicroBatch: 16, Accum: 8, Epochs: 1, LR: 2e-5, ClipNorm: 1}, Mode: Exact}
	require.NoError(t, ok.Validate())
	for _, tc := range []struct {
		field string
		edit  func(*TrainConfig)
	}{
		{"micro-batch", func(c *TrainConfig) { c.MicroBatch = recipes.MaxBatch + 1 }},
		{"grad-accum", func(c *TrainConfig) { c.MicroBatch, c.Accum = 4096, 8192 }},
		{"grad-accum", func(c *TrainConfig) { c.Accum = 0 }},
		{"grad-accum", func(c *TrainConfig) { c.MicroBatch, c.Accum = 1, 1 }},
		{"epochs", func(c *TrainConfig) { c.Epochs = 0 }},
		{"lr", func(c *TrainConfig) { c.LR = math.NaN() }},
		{"clip-norm", func(c *TrainConfig) { c.ClipNorm = math.Inf(1) }},
		{"weight-decay", func(c *TrainConfig) { c.WeightDecay = -1 }},
		{"contrastive-accumulation", func(c *TrainConfig) { c.Mode = "both" }},
	} {
		c := ok
		tc.edit(&c)
		var ce *recipes.ConfigError
		require.ErrorAs(t, c.Validate(), &ce, tc.field)
		require.Equal(t, tc.field, ce.Field)
	}
}
