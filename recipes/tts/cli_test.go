package tts

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes"
)

// seedYAML is the seed's "Memory-Optimized Configuration", verbatim.
const seedYAML = `training:
  batch_size: 4              # Reduced from 8+ to prevent OOM
  gradient_accumulation_steps: 8  # Simulate batch_size=32
  enable_memory_cleanup: true
  max_memory_fraction: 0.9

data:
  batch_size: 4              # Match training batch size
  prefetch_buffer_size: 2    # Reduced to save memory
  enable_memory_mapping: false  # Disable to save GPU memory
`

// troubleYAML is the seed's troubleshooting guide's settings as a file.
const troubleYAML = `training:
  batch_size: 2
  gradient_accumulation_steps: 16
model:
  enable_gradient_checkpointing: true
  text_encoder_dim: 128  # Reduced from 256
  decoder_dim: 256       # Reduced from 512
`

// parseTrain runs `tts train` with the real flags up to the point where it
// would train, and returns what it would train with.
func parseTrain(t *testing.T, args ...string) (TrainConfig, GPTConfig, *cli.Context, error) {
	t.Helper()
	cmd := trainCommand()
	var cfg TrainConfig
	var g GPTConfig
	var ctx *cli.Context
	cmd.Action = func(c *cli.Context) error {
		run, err := recipes.Prepare(c, spec)
		if err != nil {
			return err
		}
		defer run.Close()
		ctx = c
		if cfg, err = trainConfigFrom(c, run); err != nil {
			return err
		}
		g, err = gptConfigFrom(c)
		return err
	}
	recipes.Underscores([]*cli.Command{cmd})
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append([]string{"torchfit", "train", "--device", "cpu"}, args...))
	return cfg, g, ctx, err
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

// TestSeedConfigLoads: the seed's YAML block loads unchanged and sets the
// micro-batch, accumulation, memory cap, prefetch and cache reading; the
// troubleshooting settings set checkpointing and the widths; flags
// override the file.
func TestSeedConfigLoads(t *testing.T) {
	cfg, g, c, err := parseTrain(t, "--config", writeFile(t, "config.yaml", seedYAML))
	require.NoError(t, err)
	require.Equal(t, 4, cfg.Common.MicroBatch)
	require.Equal(t, 8, cfg.Common.Accum)
	require.Equal(t, 32, cfg.Common.EffectiveBatch())
	require.InDelta(t, 0.9, cfg.Common.MemoryFraction, 1e-12)
	require.True(t, c.Bool("memory-cleanup"))
	require.Equal(t, 4, c.Int("data-batch-size"))
	require.Equal(t, 2, cfg.Common.Prefetch)
	require.False(t, cfg.MemoryMapping)
	require.False(t, cfg.Common.GradCheckpointing)
	require.Equal(t, DefaultGPTConfig().DecoderDim, g.DecoderDim)

	cfg, g, _, err = parseTrain(t, "--config", writeFile(t, "config.yaml", troubleYAML), "--grad-accum", "4")
	require.NoError(t, err)
	require.Equal(t, 2, cfg.Common.MicroBatch)
	require.Equal(t, 4, cfg.Common.Accum, "the flag overrides the file")
	require.True(t, cfg.Common.GradCheckpointing)
	require.Equal(t, int64(128), g.TextEncoderDim)
	require.Equal(t, int64(256), g.DecoderDim)
	require.Equal(t, int64(4*256), g.FF)
}

// TestBadConfig: an unknown key, a value of the wrong type and a data
// batch that differs from the training batch are user errors naming the
// key.
func TestBadConfig(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"unknown key", "training:\n  batch_sise: 4\n", "batch_sise"},
		{"wrong type", "training:\n  batch_size: four\n", "batch_size"},
		{"wrong type bool", "data:\n  enable_memory_mapping: sometimes\n", "enable_memory_mapping"},
		{"fraction out of range", "training:\n  max_memory_fraction: 1.5\n", "config.yaml: memory-fraction 1.5"},
		{"data batch differs", "training:\n  batch_size: 4\ndata:\n  batch_size: 8\n", "data.batch_size"},
		{"not YAML", "training: [batch_size: 4\n", "config"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, err := parseTrain(t, "--config", writeFile(t, "config.yaml", c.yaml))
			require.Error(t, err)
			require.True(t, recipes.IsUserError(err), "%T %v", err, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

func TestParseSizesAndDuration(t *testing.T) {
	s, err := parseSizes("2,4, 6,8")
	require.NoError(t, err)
	require.Equal(t, []int{2, 4, 6, 8}, s)
	for _, bad := range []string{"", "2,,4", "0", "-2", "two"} {
		_, err := parseSizes(bad)
		var ce *recipes.ConfigError
		require.ErrorAs(t, err, &ce, bad)
	}
	d, err := parseDuration("60")
	require.NoError(t, err)
	require.Equal(t, 60.0, d.Seconds())
	d, err = parseDuration("90s")
	require.NoError(t, err)
	require.Equal(t, 90.0, d.Seconds())
	for _, bad := range []string{"0", "-1", "soon", "NaN"} {
		_, err := parseDuration(bad)
		var ce *recipes.ConfigError
		require.ErrorAs(t, err, &ce, bad)
	}
}
