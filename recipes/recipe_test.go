package recipes

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/train"
)

// A command that fails on bad input after Prepare prints only its error:
// Prepare's memory-cap line waits for the recipe's first output.
func TestPrepareHoldsItsLinesUntilTheRecipeWrites(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(r *Run)
		want  string
	}{
		{"nothing written", func(*Run) {}, ""},
		{"a log line", func(r *Run) { r.Logf("training") }, "memory limit on cpu: 0.50 of the device\n"},
		{"an event", func(r *Run) { r.Events(train.Message{Text: "step"}) }, "memory limit on cpu: 0.50 of the device\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			cmd := &cli.Command{Name: "train", Flags: Flags(Defaults{BatchSize: 4, GradAccum: 1, Epochs: 1, LR: 1e-3}),
				Action: func(c *cli.Context) error {
					r, err := Prepare(c, nil)
					require.NoError(t, err)
					defer r.Close()
					r.Log = report.NewLogger(&out)
					tc.write(r)
					return nil
				}}
			app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
			require.NoError(t, app.Run([]string{"x", "train", "--memory-fraction", "0.5"}))
			if tc.want == "" {
				require.Empty(t, out.String())
				return
			}
			require.Contains(t, out.String(), tc.want)
		})
	}
}
