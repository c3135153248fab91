package asr

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes"
)

// parseTrain parses a train command line with the real flags and returns
// the shared settings and the recipe's own, as the train command reads
// them (the device check aside: the seed's lines say --device cuda).
func parseTrain(t *testing.T, line string) (recipes.Common, *cli.Context) {
	t.Helper()
	cmd := trainCommand()
	var got recipes.Common
	var ctx *cli.Context
	cmd.Action = func(c *cli.Context) error {
		if _, err := recipes.ApplyConfig(c, nil); err != nil {
			return err
		}
		require.NoError(t, c.Set("device", "cpu"))
		cm, err := recipes.ReadCommon(c)
		got, ctx = cm, c
		return err
	}
	recipes.Underscores([]*cli.Command{cmd})
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	require.NoError(t, app.Run(append([]string{"torchfit", "train"}, strings.Fields(line)...)))
	return got, ctx
}

// The KonkaniVani guide's command lines, verbatim, with a data directory
// and a step cap added.
func TestSeedCommandLinesParse(t *testing.T) {
	const extra = " --data testdata/corpus --max-steps 5"
	for _, tc := range []struct {
		line             string
		batch, accum     int
		dModel, enc, dec int
	}{
		{`--batch_size 1 --gradient_accumulation_steps 8 --mixed_precision --device cuda --d_model 192 --encoder_layers 8 --decoder_layers 4 --resume checkpoints/checkpoint_epoch_15.pt`, 1, 8, 192, 8, 4},
		{`--batch_size 2 --gradient_accumulation_steps 4 --mixed_precision --device cuda --d_model 128 --encoder_layers 6 --decoder_layers 3 --resume checkpoints/checkpoint_epoch_15.pt`, 2, 4, 128, 6, 3},
		{`--batch_size 1 --gradient_accumulation_steps 8 --mixed_precision --device cuda --resume checkpoints/checkpoint_epoch_15.pt`, 1, 8, 0, 0, 0},
	} {
		cm, c := parseTrain(t, tc.line+extra)
		require.Equal(t, tc.batch, cm.MicroBatch, tc.line)
		require.Equal(t, tc.accum, cm.Accum, tc.line)
		require.Equal(t, "auto", cm.Precision, "--mixed_precision alone is auto")
		require.Equal(t, "checkpoints/checkpoint_epoch_15.pt", cm.Resume)
		require.Equal(t, "testdata/corpus", cm.Data)
		require.Equal(t, 5, cm.MaxSteps)
		require.Equal(t, int64(tc.dModel), c.Int64("d-model"))
		require.Equal(t, tc.enc, c.Int("encoder-layers"))
		require.Equal(t, tc.dec, c.Int("decoder-layers"))
	}
	// The other spellings of the seeds (the Mamba and CLIP guides').
	cm, c := parseTrain(t, "--data_dir d --gradient_accumulation 10 --batch_size 12 --model_size tiny --mixed_precision=bf16 --learning_rate 2e-5")
	require.Equal(t, "d", cm.Data)
	require.Equal(t, 120, cm.EffectiveBatch())
	require.Equal(t, "tiny", c.String("preset"))
	require.Equal(t, "bf16", cm.Precision)
	require.Equal(t, 2e-5, cm.LR)
	cm, _ = parseTrain(t, "--mixed-precision fp32 --batch-size 3")
	require.Equal(t, "fp32", cm.Precision)
	require.Equal(t, 3, cm.MicroBatch)
}
