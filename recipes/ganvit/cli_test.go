package ganvit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
)

// parseTrain parses a train command line with the real flags (and
// --config file) and returns the run's configuration as the train
// command builds it; device forces the device the preset is chosen for.
func parseTrain(t *testing.T, device, line string) (TrainConfig, error) {
	t.Helper()
	cmd := trainCommand()
	var got TrainConfig
	var perr error
	cmd.Action = func(c *cli.Context) error {
		from, err := recipes.ApplyConfig(c, configKeys)
		if err != nil {
			perr = err
			return nil
		}
		require.NoError(t, c.Set("device", "cpu"))
		cm, err := recipes.ReadCommon(c)
		if err != nil {
			perr = err
			return nil
		}
		dev, err := torch.ParseDevice(device)
		require.NoError(t, err)
		cm.Device = dev
		got, perr = trainConfigFrom(c, &recipes.Run{Common: cm, FromFile: from})
		return nil
	}
	recipes.Underscores([]*cli.Command{cmd})
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	require.NoError(t, app.Run(append([]string{"torchfit", "train"}, strings.Fields(line)...)))
	return got, perr
}

// The seed's settings: its default batch sizes, the "Tuning for Your
// GPU" table, its Python names in a config file, the cache cadence.
func TestSeedSettings(t *testing.T) {
	for _, c := range []struct {
		device, line          string
		gan, batch, synthetic int
		mels, frames          int64
		vit                   string
	}{
		{"cuda", "", 24, 12, 3000, 128, 1292, "b16"},
		{"cuda", "--vram 16gb", 24, 12, 3000, 128, 1292, "b16"},
		{"cuda", "--vram 12gb", 16, 8, 2000, 128, 1292, "b16"},
		{"cuda", "--vram 8gb", 12, 6, 1500, 96, 1292, "b16"},
		{"cuda", "--vram 24gb", 48, 24, 5000, 128, 1292, "b16"},
		{"cuda", "--vram 24GB+", 48, 24, 5000, 128, 1292, "b16"},
		{"cpu", "", 16, 12, 400, 64, 130, "cpu"},
		{"cpu", "--preset gpu", 24, 12, 3000, 128, 1292, "b16"},
		{"cuda", "--vram 12gb --batch-size 4 --gan_batch_size 6 --num_synthetic 7", 6, 4, 7, 128, 1292, "b16"},
		{"cpu", "--n-mels 96 --frames 400 --vit google/vit-base-patch16-224", 16, 12, 400, 96, 400, "b16"},
	} {
		cfg, err := parseTrain(t, c.device, c.line)
		require.NoError(t, err, c.line)
		p := cfg.Preset
		require.Equal(t, c.gan, p.GANBatch, c.line)
		require.Equal(t, c.batch, p.MicroBatch, c.line)
		require.Equal(t, c.synthetic, cfg.NumSynthetic, c.line)
		require.Equal(t, Shape{c.mels, c.frames}, Shape{p.Mels, p.Frames}, c.line)
		require.Equal(t, c.vit, p.ViT, c.line)
		require.Equal(t, int64(100), p.Latent)
	}
	cfg, err := parseTrain(t, "cuda", "--mixed_precision --unfreeze {8:[11]}")
	require.NoError(t, err)
	require.Equal(t, "auto", cfg.Precision)
	require.Equal(t, Schedule{8: {11}}, cfg.Unfreeze)
	require.Equal(t, 10, Defaults.EmptyCacheEvery, "the seed's `if i % 10 == 0: torch.cuda.empty_cache()` (on CUDA; the CPU has no cache)")
	require.Equal(t, "auto", Defaults.Precision, "mixed precision (already enabled)")

	// A config file with the seed's Python names.
	path := filepath.Join(t.TempDir(), "seed.yaml")
	require.NoError(t, os.WriteFile(path, []byte("GAN_BATCH_SIZE: 16\nBATCH_SIZE: 8\nNUM_SYNTHETIC: 2000\nN_MELS: 96\nLATENT_DIM: 64\n"+
		"VIT_MODEL_NAME: google/vit-base-patch16-224\nunfreezing_schedule: \"{8: [11]}\"\nACCUMULATION_STEPS: 4\n"), 0o644))
	cfg, err = parseTrain(t, "cuda", "--config "+path)
	require.NoError(t, err)
	require.Equal(t, 16, cfg.Preset.GANBatch)
	require.Equal(t, 8, cfg.MicroBatch)
	require.Equal(t, 2000, cfg.NumSynthetic)
	require.Equal(t, int64(96), cfg.Preset.Mels)
	require.Equal(t, int64(64), cfg.Preset.Latent)
	require.Equal(t, "b16", cfg.Preset.ViT)
	require.Equal(t, Schedule{8: {11}}, cfg.Unfreeze)
	require.Equal(t, 4, cfg.Accum)

	// The seed's unfreezing_schedule = {8: [11]} written as a mapping, as
	// a config file would hold it, in YAML (block and flow) and JSON.
	for name, body := range map[string]string{
		"block.yaml": "unfreezing_schedule:\n  8: [11]\n  12: [9, 10]\n",
		"flow.yaml":  "unfreezing_schedule: {8: [11], 12: [9, 10]}\n",
		"seed.json":  `{"unfreezing_schedule": {"8": [11], "12": [9, 10]}}`,
	} {
		path := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		cfg, err = parseTrain(t, "cuda", "--config "+path)
		require.NoError(t, err, name)
		require.Equal(t, Schedule{8: {11}, 12: {9, 10}}, cfg.Unfreeze, name)
	}

	for _, c := range []struct{ line, want string }{
		{"--vram 10gb", `want 8gb, 12gb, 16gb or 24gb`},
		{"--preset huge", `--preset "huge": want auto, 12gb`},
		{"--preset cpu --vram 8gb", "disagree"},
		{"--vit vit-huge", `--vit "vit-huge"`},
		{"--unfreeze {8:[x]}", "layer x is not an integer"},
		{"--n-mels 3", "--n-mels 3: must be in [16, 1024]"},
		// The discriminator's 4 halvings need 16 (a kernel larger than
		// its input in libtorch, after the data was read, before).
		{"--n-mels 8", "--n-mels 8: must be in [16, 1024]"},
		{"--frames 15", "--frames 15: must be in [16, 65536]"},
		{"--gan-grad-accum 0", "--gan-grad-accum 0"},
		{"--num-synthetic -5", "--num-synthetic -5"},
		{"--gan-lr 0", "--gan-lr 0"},
	} {
		_, err := parseTrain(t, "cpu", c.line)
		require.ErrorContains(t, err, c.want, c.line)
		require.True(t, recipes.IsUserError(err), c.line)
	}
}
