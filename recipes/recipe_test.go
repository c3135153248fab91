package recipes

import (
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
)

// Begin is every recipe's start: it validates the shared settings, refuses
// CUDA where there is none, resolves the precision, caps the device's
// memory until End, and seeds the generator; its lines (the precision and
// why, the cap) come out before the run's first.
func TestBegin(t *testing.T) {
	ok := Common{MicroBatch: 4, Accum: 2, Epochs: 1, LR: 1e-3, Device: torch.CPU, Seed: 5}
	for _, tc := range []struct {
		name  string
		edit  func(*Common)
		field string // the refused setting ("": none)
		limit int64  // the cap while the session runs
		line  string
	}{
		{"plain", func(*Common) {}, "", 0, "precision fp32 (the default)"},
		{"memory limit", func(c *Common) { c.MemoryLimit = "64MiB" }, "", 64 << 20, "memory limit on cpu: 64MiB"},
		{"memory fraction", func(c *Common) { c.MemoryFraction = 0.5 }, "", -1, "memory limit on cpu: 0.50 of the device"},
		{"bad limit", func(c *Common) { c.MemoryLimit = "lots" }, "memory-limit", 0, ""},
		{"bad precision", func(c *Common) { c.Precision = "fp12" }, "mixed-precision", 0, ""},
		{"no CUDA", func(c *Common) { c.Device = torch.CUDA(0) }, "device", 0, ""},
		{"bad lr", func(c *Common) { c.LR = 0 }, "lr", 0, ""},
		{"subnormal lr", func(c *Common) { c.LR = 1e-320 }, "lr", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no CUDA" && torch.CUDAAvailable() {
				t.Skip("this machine has CUDA")
			}
			cm := ok
			tc.edit(&cm)
			var lines []string
			s, err := Begin(cm, report.Lines(&lines))
			if tc.field != "" {
				var ce *ConfigError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, tc.field, ce.Field)
				require.True(t, IsUserError(err))
				require.Zero(t, torch.MustMemoryStats(torch.CPU).Limit, "nothing capped")
				return
			}
			require.NoError(t, err)
			s.Logf("model")
			require.Empty(t, lines, "the set-up's lines wait for the run to start: bad input found next prints one line")
			s.Started()
			require.Contains(t, lines, tc.line)
			require.Equal(t, "model", lines[len(lines)-1])
			limit := torch.MustMemoryStats(torch.CPU).Limit
			switch {
			case tc.limit < 0:
				require.Positive(t, limit)
			default:
				require.Equal(t, tc.limit, limit)
			}
			a := torch.Rand([]int64{3})
			torch.ManualSeed(cm.Seed)
			b := torch.Rand([]int64{3})
			require.True(t, a.Equal(b), "seeded with Seed")
			a.Free()
			b.Free()
			s.End()
			require.Zero(t, torch.MustMemoryStats(torch.CPU).Limit, "End lifts the cap")
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

// A setting that cannot apply to the run is refused when the command line
// gives it (exit 2), logged and unused when the --config file does, and
// the recipe's own default passes silently: a CUDA lever on the CPU, the
// data-parallel all-reduce settings without a launcher.
func TestNotHereSettings(t *testing.T) {
	if torch.CUDAAvailable() {
		t.Skip("this machine has CUDA: empty-cache-every applies")
	}
	dp := Spec{Name: "x", DataParallel: true}
	for _, tc := range []struct {
		name  string
		args  []string
		field string // refused ("": accepted)
		line  string // logged
	}{
		{"recipe's default", nil, "", ""},
		{"empty cache on the command line", []string{"--empty-cache-every", "5"}, "empty-cache-every", ""},
		{"the seed's spelling", []string{"--empty_cache_frequency", "5"}, "empty-cache-every", ""},
		{"0 is never", []string{"--empty-cache-every", "0"}, "", ""},
		{"empty cache from the file", []string{"--config", writeFile(t, "c.yaml", "empty_cache_frequency: 5\n")}, "", "empty-cache-every 5 empties the CUDA cache"},
		{"all-reduce after backward", []string{"--allreduce-after-backward"}, "allreduce-after-backward", ""},
		{"bucket size", []string{"--bucket-mb", "50"}, "bucket-mb", ""},
		{"bucket size from the file", []string{"--config", writeFile(t, "c.yaml", "bucket_mb: 50\n")}, "", "bucket-mb 50 sets the data-parallel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got error
			var run *Run
			var logged strings.Builder
			cmd := &cli.Command{Name: "train", Flags: Flags(Defaults{MicroBatch: 4, Accum: 1, Epochs: 1, LR: 1e-3, EmptyCacheEvery: 10}),
				Action: func(c *cli.Context) error {
					run, got = Prepare(c, dp)
					if got == nil {
						run.Close()
					}
					return nil
				}}
			app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
			stderr := os.Stderr
			r, w, err := os.Pipe()
			require.NoError(t, err)
			os.Stderr = w
			done := make(chan struct{})
			go func() { io.Copy(&logged, r); close(done) }()
			err = app.Run(append([]string{"x", "train"}, tc.args...))
			os.Stderr = stderr
			w.Close()
			<-done
			require.NoError(t, err)
			if tc.field != "" {
				var ce *ConfigError
				require.ErrorAs(t, got, &ce, "%v", got)
				require.Equal(t, tc.field, ce.Field)
				require.True(t, IsUserError(got))
				return
			}
			require.NoError(t, got)
			require.Zero(t, run.EmptyCacheEvery, "no CUDA cache on the CPU")
			if tc.line != "" {
				require.Contains(t, logged.String(), tc.line)
				require.Contains(t, logged.String(), "not used")
			} else {
				require.NotContains(t, logged.String(), "not used")
			}
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

// Every recipe's --vram table is read one way: any case, with or without
// "gb", 24gb+ as 24gb; an unknown row is the user's error naming the rows.
func TestLookupVRAM(t *testing.T) {
	table := map[string]Preset{"8gb": {Name: "8gb", MicroBatch: 1}, "24gb": {Name: "24gb", MicroBatch: 4}, "cpu": {Name: "cpu"}}
	for _, in := range []string{"24gb", "24GB", " 24gb+ ", "24"} {
		p, err := LookupVRAM(in, table)
		require.NoError(t, err, in)
		require.Equal(t, "24gb", p.Name, in)
	}
	p, err := LookupVRAM("CPU", table)
	require.NoError(t, err)
	require.Equal(t, "cpu", p.Name)
	_, err = LookupVRAM("10gb", table)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "vram", ce.Field)
	require.Contains(t, err.Error(), "want 8gb, 24gb or cpu")
	require.True(t, IsUserError(err))
}
