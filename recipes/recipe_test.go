package recipes

import (
	"bytes"
	"net"
	"strconv"
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
			cmd := &cli.Command{Name: "train", Flags: Flags(Defaults{MicroBatch: 4, Accum: 1, Epochs: 1, LR: 1e-3}),
				Action: func(c *cli.Context) error {
					r, err := Prepare(c, Spec{Name: "x", DataParallel: true})
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

// A recipe that trains in one process (its Spec says why) refuses a
// launcher's group and the data-parallel flags with a user error (exit 2)
// before joining any group; one that trains data parallel joins it.
func TestOneProcessRefusesDataParallel(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	launcher := map[string]string{"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port)}
	one := Spec{Name: "x", OneProcess: "it does not all-reduce"}
	for _, tc := range []struct {
		name   string
		spec   Spec
		env    map[string]string
		args   []string
		refuse bool
	}{
		{"one process", one, nil, nil, false},
		{"all-reduce flag", one, nil, []string{"--allreduce-after-backward"}, true},
		{"zero flag", one, nil, []string{"--zero"}, true},
		{"under a launcher", one, launcher, nil, true},
		{"data parallel under a launcher", Spec{Name: "x", DataParallel: true}, launcher, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got error
			cmd := &cli.Command{Name: "train", Flags: Flags(Defaults{MicroBatch: 4, Accum: 1, Epochs: 1, LR: 1e-3}),
				Action: func(c *cli.Context) error {
					r, err := Prepare(c, tc.spec)
					if err == nil {
						require.Equal(t, tc.env != nil, r.Group != nil)
						r.Close()
					}
					got = err
					return nil
				}}
			app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
			require.NoError(t, app.Run(append([]string{"x", "train"}, tc.args...)))
			if !tc.refuse {
				require.NoError(t, got)
				return
			}
			require.Error(t, got)
			require.True(t, IsUserError(got), "%v", got)
			require.Contains(t, got.Error(), "it does not all-reduce")
		})
	}
}

// A Spec that declares neither data parallelism nor why the recipe trains
// in one process is a programming error.
func TestSpecMustDeclareDataParallelism(t *testing.T) {
	cmd := &cli.Command{Name: "train", Flags: Flags(Defaults{MicroBatch: 4, Accum: 1, Epochs: 1, LR: 1e-3}),
		Action: func(c *cli.Context) error {
			require.Panics(t, func() { _, _ = Prepare(c, Spec{Name: "x"}) })
			return nil
		}}
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	require.NoError(t, app.Run([]string{"x", "train"}))
}
