package recipes

import (
	"path/filepath"
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
		cmd := &cli.Command{Name: "x", Flags: fs, Action: func(c *cli.Context) error { got = refuseUnused(c, us); return nil }}
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

// Prepare refuses a command's unused flag from the command line before
// anything is opened, and from a --config file logs it and leaves its
// output unopened.
func TestPrepareUnused(t *testing.T) {
	us := []Unused{{Flag: "metrics", Why: "writes no metrics"}}
	m := filepath.Join(t.TempDir(), "m.jsonl")
	conf := writeFile(t, "c.yaml", "metrics: "+m+"\n")
	for _, tc := range []struct {
		name   string
		args   []string
		refuse bool
	}{
		{"command line", []string{"--metrics", m}, true},
		{"config file", []string{"--config", conf}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got error
			cmd := &cli.Command{Name: "x", Flags: Flags(Defaults{MicroBatch: 1, Accum: 1, Epochs: 1, LR: 1e-3}),
				Action: func(c *cli.Context) error {
					var r *Run
					if r, got = Prepare(c, Spec{Name: "x", DataParallel: true}, us...); got == nil {
						require.Empty(t, r.Metrics)
						r.Close()
					}
					return nil
				}}
			app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
			require.NoError(t, app.Run(append([]string{"t", "x"}, tc.args...)))
			if tc.refuse {
				var ce *ConfigError
				require.ErrorAs(t, got, &ce)
				require.Equal(t, "metrics", ce.Field)
			} else {
				require.NoError(t, got)
			}
			require.NoFileExists(t, m, "no output opened")
		})
	}
}
