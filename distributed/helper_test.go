package distributed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

// Multi-process tests start this test binary again as each rank: with
// TORCHFIT_DIST_HELPER=name set, TestMain runs helpers[name] instead of the
// tests, with torchrun's environment variables, and the helper prints its
// result as one JSON line on stdout.
const helperVar = "TORCHFIT_DIST_HELPER"

// helpers are the rank programs, registered by the test files.
var helpers = map[string]func() (any, error){}

func TestMain(m *testing.M) {
	if name := os.Getenv(helperVar); name != "" {
		os.Exit(runHelper(name))
	}
	os.Exit(m.Run())
}

func runHelper(name string) int {
	fn, ok := helpers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "no helper %q\n", name)
		return 2
	}
	torch.SetNumThreads(1)
	var res any
	var err error
	torch.Main().Do(func() {
		if perr := torch.Try(func() { res, err = fn() }); perr != nil {
			err = perr
		}
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", name, err)
		json.NewEncoder(os.Stdout).Encode(map[string]string{"error": err.Error()})
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// rankResult is one rank's outcome.
type rankResult struct {
	Rank     int
	Out      []byte // the JSON line
	Stderr   string
	Err      error // the process's exit error
	Duration time.Duration
}

func (r rankResult) decode(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, r.Err, "rank %d: %s", r.Rank, r.Stderr)
	require.NoError(t, json.Unmarshal(lastLine(r.Out), v), "rank %d output %q", r.Rank, r.Out)
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// job describes ranks to start on loopback.
type job struct {
	helper  string        // the Go helper every rank runs
	world   int           // ranks
	limit   time.Duration // for all of them together
	env     []string      // added to every rank's environment
	rankEnv func(rank int) []string
	// python, when set, says which ranks run pyref.Python with these
	// arguments instead of the Go helper.
	python func(rank int) []string
	port   int // MASTER_PORT (0: a free one)
}

// spawn runs j's ranks and waits (at most j.limit) for all of them.
func spawn(t *testing.T, j job) []rankResult {
	t.Helper()
	if j.port == 0 {
		j.port = freePort(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), j.limit)
	defer cancel()
	res := make([]rankResult, j.world)
	var wg sync.WaitGroup
	for r := 0; r < j.world; r++ {
		e := distributed.Env{Rank: r, World: j.world, LocalRank: r, LocalWorld: j.world, MasterAddr: "127.0.0.1", MasterPort: j.port}
		env := append(append(os.Environ(), helperVar+"="+j.helper), e.Vars()...)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		if j.python != nil {
			if args := j.python(r); args != nil {
				cmd = exec.CommandContext(ctx, pyref.Python, args...)
				// Python's Gloo binds to the host name's address by default.
				env = append(env, "GLOO_SOCKET_IFNAME=lo")
			}
		}
		env = append(env, j.env...)
		if j.rankEnv != nil {
			env = append(env, j.rankEnv(r)...)
		}
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := cmd.Run()
			res[r] = rankResult{Rank: r, Out: out.Bytes(), Stderr: errb.String(), Err: err, Duration: time.Since(start)}
		}()
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "ranks of %s did not finish within %v", j.helper, j.limit)
	return res
}

// envInt reads an integer helper parameter.
func envInt(name string, def int) int {
	if s := os.Getenv(name); s != "" {
		if v, err := strconv.Atoi(s); err == nil {
			return v
		}
	}
	return def
}

// initGroup joins the group the spawned environment describes.
func initGroup(timeout time.Duration) (*distributed.Group, error) {
	g, ok, err := distributed.InitFromEnv(distributed.Options{Timeout: timeout})
	if err == nil && !ok {
		err = fmt.Errorf("no WORLD_SIZE in the environment")
	}
	return g, err
}

func trimErr(s string) string { return strings.TrimSpace(s) }
