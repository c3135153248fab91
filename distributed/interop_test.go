package distributed_test

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

type interopOut struct {
	Sum    []float64 `json:"sum"`
	Max    []float64 `json:"max"`
	Bcast  []float64 `json:"bcast"`
	Gather []float64 `json:"gather"`
}

func init() {
	// The Go half of testdata/pyrank.py: the same collectives in the same
	// order.
	helpers["interop"] = func() (any, error) {
		g, err := initGroup(60 * time.Second)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		r, w := float64(g.Rank()), g.Size()
		var out interopOut
		err = torch.TidyErr(func() error {
			x := torch.FromSlice([]float32{float32(r + 1), float32(10 * (r + 1)), 0.5}, nil)
			if err := g.AllReduce(distributed.Sum, x); err != nil {
				return err
			}
			m := torch.FromSlice([]float64{r}, nil)
			if err := g.AllReduce(distributed.Max, m); err != nil {
				return err
			}
			b := torch.FromSlice([]float32{float32(r*3 + 1), 2}, nil)
			if err := g.Broadcast(w-1, b); err != nil {
				return err
			}
			parts := make([]*torch.Tensor, w)
			for k := range parts {
				parts[k] = torch.Zeros([]int64{2})
			}
			if err := g.AllGather(parts, torch.FromSlice([]float32{float32(r), float32(-r)}, nil)); err != nil {
				return err
			}
			if err := g.Barrier(); err != nil {
				return err
			}
			out = interopOut{Sum: toF64(x), Max: toF64(m), Bcast: toF64(b)}
			for _, p := range parts {
				out.Gather = append(out.Gather, toF64(p)...)
			}
			return nil
		})
		return out, err
	}
}

// A Go rank and a Python rank (torch.distributed, Gloo, the same libtorch)
// in one process group all-reduce, broadcast and all-gather, and agree —
// with the Go rank hosting the store (distributed.StoreServer, Python a TCPStore
// client) and with Python's rank 0 hosting it (c10d's server, Go a client).
func TestGoAndPythonRanks(t *testing.T) {
	script, err := filepath.Abs("testdata/pyrank.py")
	require.NoError(t, err)
	for _, pyRank := range []int{1, 0} {
		res := spawn(t, job{helper: "interop", world: 2, limit: 90 * time.Second, python: func(r int) []string {
			if r == pyRank {
				return []string{script}
			}
			return nil
		}})
		want := interopOut{Sum: []float64{3, 30, 1}, Max: []float64{1}, Bcast: []float64{4, 2}, Gather: []float64{0, 0, 1, -1}}
		for _, r := range res {
			var out interopOut
			r.decode(t, &out)
			require.Equal(t, want, out, "python rank %d; rank %d", pyRank, r.Rank)
		}
	}
}

// distributed.StoreServer answers every query of the TCPStore client of the
// libtorch under test (Python's; 1.13 or 2.x) as c10d's own server does,
// including a wait that a later set by another client (Go's c10d client,
// which on 2.x opens with VALIDATE and PING too) releases, and a wait that
// times out.
func TestStoreServerSpeaksTCPStore(t *testing.T) {
	srv, err := distributed.ListenStore("127.0.0.1:0")
	require.NoError(t, err)
	defer srv.Close()
	require.Equal(t, "127.0.0.1", srv.Addr().(*net.TCPAddr).IP.String())
	cmd := exec.Command(pyref.Python, "testdata/pystore.py", strconv.Itoa(srv.Port()))
	cmd.Stderr = os.Stderr
	done := make(chan struct{})
	var out []byte
	var perr error
	go func() {
		defer close(done)
		out, perr = cmd.Output()
	}()
	st, serr := distributed.NewTCPStore("127.0.0.1", srv.Port(), 0, 10*time.Second)
	require.NoError(t, serr)
	defer st.Close()
	// Python sets "c" before it waits for "from_go": Get waits for it.
	_, err = st.Get("c")
	require.NoError(t, err)
	require.NoError(t, st.Set("from_go", []byte("gopher")))
	<-done
	require.NoError(t, perr, "%s", out)
	var got map[string]any
	require.NoError(t, json.Unmarshal(lastLine(out), &got))
	want := map[string]any{
		"get": "hello", "add1": 5.0, "add2": 3.0, "n": "3",
		"cas_absent": "first", "cas_match": "second", "cas_mismatch": "second",
		"num_keys": got["num_keys"],
		"delete":   true, "delete_again": false,
		"from_go": "gopher", "wait_timeout": true,
	}
	if major, _, _ := torch.LibtorchVersion(); major >= 2 {
		want["after_timeout"] = "second"
		want["append"] = "abcd"
		want["multi_get"] = []any{"x", "y"}
		want["check"] = []any{true, false}
		want["queue_len"] = 2.0
		want["queue_pop"] = []any{"v1", "v2"}
		want["queue_empty"] = true
		want["list_keys"] = []any{"ap", "c", "from_go", "m1", "m2", "n"}
	}
	require.Equal(t, want, got)
	require.GreaterOrEqual(t, got["num_keys"], 3.0)
	v, err := st.Get("c")
	require.NoError(t, err)
	require.Equal(t, "second", string(v))
}
