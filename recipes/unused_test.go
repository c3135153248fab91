package recipes

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// A flag a command cannot honour is hidden from its help, refused from the
// command line with its reason, and a name the flags lack is a programming
// error.
func TestUnusedFlags(t *testing.T) {
	us := []Unused{{Flag: "metrics", Why: "writes no metrics"}, {Flag: "max-steps", Why: "runs one step"}}
	fs := HideFlags(Flags(Defaults{MicroBatch: 1, Accum: 1, Epochs: 1, LR: 1e-3}), Names(us)...)
	for _, f := range fs {
		if vf, ok := f.(cli.VisibleFlag); ok {
			n := f.Names()[0]
			require.Equal(t, n == "metrics" || n == "max-steps", !vf.IsVisible(), n)
		}
	}
	require.Panics(t, func() { HideFlags(Flags(Defaults{}), "no-such-flag") })

	for _, tc := range []struct {
		args  []string
		field string
	}{
		{nil, ""},
		{[]string{"--lr", "0.1"}, ""},
		{[]string{"--max-steps", "3"}, "max-steps"},
		{[]string{"--metrics", "m.jsonl"}, "metrics"},
	} {
		var got error
		cmd := &cli.Command{Name: "x", Flags: fs, Action: func(c *cli.Context) error { got = RefuseUnused(c, us); return nil }}
		app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
		require.NoError(t, app.Run(append([]string{"t", "x"}, tc.args...)))
		if tc.field == "" {
			require.NoError(t, got, "%v", tc.args)
			continue
		}
		var ce *ConfigError
		require.ErrorAs(t, got, &ce, "%v", tc.args)
		require.Equal(t, tc.field, ce.Field)
		require.True(t, IsUserError(got))
	}
}
