package distributed_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/torch"
)

type collectivesOut struct {
	Sum, Max, Bcast, Gather, Scatter, Recv, Floats, Strided []float64
}

func init() {
	helpers["collectives"] = func() (any, error) {
		g, err := initGroup(20 * time.Second)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		r, w := float64(g.Rank()), g.Size()
		var out collectivesOut
		err = torch.TidyErr(func() error {
			x := torch.FromSlice([]float32{float32(r + 1), float32(2 * (r + 1))}, nil)
			if err := g.AllReduce(distributed.Sum, x); err != nil {
				return err
			}
			out.Sum = toF64(x)
			m := torch.FromSlice([]float64{r}, nil)
			if err := g.AllReduce(distributed.Max, m); err != nil {
				return err
			}
			out.Max = toF64(m)
			b := torch.FromSlice([]int64{int64(r * 10), 7}, nil)
			if err := g.Broadcast(w-1, b); err != nil {
				return err
			}
			out.Bcast = toF64(b)
			parts := make([]*torch.Tensor, w)
			for k := range parts {
				parts[k] = torch.Zeros([]int64{2})
			}
			if err := g.AllGather(parts, torch.FromSlice([]float32{float32(r), float32(-r)}, nil)); err != nil {
				return err
			}
			for _, p := range parts {
				out.Gather = append(out.Gather, toF64(p)...)
			}
			ins := make([]*torch.Tensor, w)
			for k := range ins {
				ins[k] = torch.FromSlice([]float32{float32(r) + float32(k)}, nil)
			}
			sc := torch.Zeros([]int64{1})
			if err := g.ReduceScatter(sc, ins, distributed.Sum); err != nil {
				return err
			}
			out.Scatter = toF64(sc)
			if err := g.Barrier(); err != nil {
				return err
			}
			if w > 1 {
				switch g.Rank() {
				case 0:
					if err := g.Send(torch.FromSlice([]float32{42, 43}, nil), 1, 5); err != nil {
						return err
					}
				case 1:
					t := torch.Zeros([]int64{2})
					if err := g.Recv(t, 0, 5); err != nil {
						return err
					}
					out.Recv = toF64(t)
				}
			}
			fs := []float64{r, 1}
			if err := g.SumFloats(fs); err != nil {
				return err
			}
			out.Floats = fs
			// A non-contiguous tensor: a transposed view, reduced in place.
			base := torch.FromSlice([]float32{1, 2, 3, 4, 5, 6}, []int64{2, 3})
			tv := base.Transpose(0, 1)
			if err := g.AllReduce(distributed.Sum, tv); err != nil {
				return err
			}
			out.Strided = toF64(base)
			return nil
		})
		return out, err
	}
}

func toF64(t *torch.Tensor) []float64 {
	return torch.ToSlice[float64](t.ToDType(torch.Float64).Contiguous())
}

// Every collective on 1, 2 and 3 ranks as separate processes on loopback.
func TestCollectives(t *testing.T) {
	for _, w := range []int{1, 2, 3} {
		res := spawn(t, job{helper: "collectives", world: w, limit: 60 * time.Second})
		ww := float64(w)
		for _, r := range res {
			var out collectivesOut
			r.decode(t, &out)
			rk := float64(r.Rank)
			require.Equal(t, []float64{ww * (ww + 1) / 2, ww * (ww + 1)}, out.Sum, "world %d rank %d", w, r.Rank)
			require.Equal(t, []float64{ww - 1}, out.Max)
			require.Equal(t, []float64{(ww - 1) * 10, 7}, out.Bcast)
			var gather []float64
			for k := 0; k < w; k++ {
				gather = append(gather, float64(k), -float64(k))
			}
			require.Equal(t, gather, out.Gather)
			require.Equal(t, []float64{ww*rk + ww*(ww-1)/2}, out.Scatter)
			if w > 1 && r.Rank == 1 {
				require.Equal(t, []float64{42, 43}, out.Recv)
			}
			require.Equal(t, []float64{ww * (ww - 1) / 2, ww}, out.Floats)
			require.Equal(t, []float64{ww, 2 * ww, 3 * ww, 4 * ww, 5 * ww, 6 * ww}, out.Strided)
		}
	}
}

// Configuration mistakes are *UsageError (ErrUsage), found before any
// connection is made.
func TestReadEnvErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"rank missing", map[string]string{"WORLD_SIZE": "2", "MASTER_PORT": "1"}},
		{"rank too large", map[string]string{"WORLD_SIZE": "2", "RANK": "2", "MASTER_PORT": "1"}},
		{"world not a number", map[string]string{"WORLD_SIZE": "two", "RANK": "0", "MASTER_PORT": "1"}},
		{"port missing", map[string]string{"WORLD_SIZE": "2", "RANK": "0"}},
		{"port too large", map[string]string{"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "70000"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, ok, err := distributed.ReadEnv(func(k string) string { return c.env[k] })
			require.True(t, ok)
			require.ErrorIs(t, err, distributed.ErrUsage)
		})
	}
	env, ok, err := distributed.ReadEnv(func(string) string { return "" })
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, distributed.Env{}, env)
	env, ok, err = distributed.ReadEnv(func(k string) string {
		return map[string]string{"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
			"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "2"}[k]
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, distributed.Env{Rank: 3, World: 4, LocalRank: 1, LocalWorld: 4, MasterAddr: "10.0.0.1", MasterPort: 29500, AgentStore: true, Attempt: 2}, env)
	_, err = distributed.OptionsFromEnv(distributed.Options{}, func(k string) string { return map[string]string{"TORCHFIT_DIST_TIMEOUT": "soon"}[k] })
	require.ErrorIs(t, err, distributed.ErrUsage)
}

// Rank 0 must host the store on MASTER_ADDR: an address of another machine
// is a usage error, not a hang.
func TestInitRefusesForeignMasterAddr(t *testing.T) {
	_, err := distributed.Init(distributed.Env{Rank: 0, World: 2, MasterAddr: "192.0.2.1", MasterPort: 29999}, distributed.Options{Timeout: 2 * time.Second})
	require.ErrorIs(t, err, distributed.ErrUsage)
	var ue *distributed.UsageError
	require.True(t, errors.As(err, &ue))
}
