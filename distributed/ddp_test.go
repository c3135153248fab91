package distributed_test

import (
	"context"
	"errors"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// The data-parallel runs of these tests: an MLP trained with AdamW,
// clipping and accumulation on 22 samples — so the last global batch of
// each epoch is short and split unevenly — by one process with the whole
// global batch, or by World ranks with BatchSize each.

const ddpSamples = 22

type ddpOut struct {
	Params map[string][]float64
	Losses []float64
	// OptBytes is the growth of the CPU allocator's count over the
	// optimizer's first update, when it creates its state (the memory
	// counter);
	// count over the run (the memory counter); StateBytes the state
	// tensors' sizes.
	OptBytes, StateBytes int64
	Buckets              []int64
	Stats                distributed.ReduceStats
	Checkpoint           string
	Err                  string
	Kind                 string
	Elapsed              float64
}

func ddpModel() *nn.Sequential {
	torch.ManualSeed(3)
	return nn.NewSequential(nn.NewLinear(8, 32, true), nn.NewTanh(), nn.NewLinear(32, 16, true), nn.NewTanh(), nn.NewLinear(16, 1, true))
}

func ddpData() *data.TensorDataset {
	torch.ManualSeed(11)
	x := torch.Randn([]int64{ddpSamples, 8}).Keep()
	y := x.Narrow(1, 0, 1).Mul(x.Narrow(1, 1, 1)).Sin().Keep()
	ds, err := data.NewTensorDataset(map[string]*torch.Tensor{"x": x, "y": y})
	if err != nil {
		panic(err)
	}
	return ds
}

func params(m nn.Module) map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range nn.Parameters(m) {
		out[p.Name] = toF64(p.T)
	}
	return out
}

// ddpRun is the rank program. Its parameters come from the environment:
// DDP_SINGLE=1 (one process, no group), DDP_MICRO and DDP_ACCUM (per
// rank), DDP_ZERO=1, DDP_BUCKET (bytes), DDP_AFTER=1 (all-reduce after
// backward), DDP_EPOCHS, DDP_MAXSTEPS, DDP_CKPT (directory), DDP_RESUME,
// DDP_KILL_AT / DDP_STALL_AT (rank 1 dies / stops answering in that step's
// loss), DDP_TIMEOUT (seconds).
func ddpRun() (any, error) {
	single := os.Getenv("DDP_SINGLE") == "1"
	micro, accum := envInt("DDP_MICRO", 2), envInt("DDP_ACCUM", 2)
	var g *distributed.Group
	if !single {
		var err error
		if g, err = initGroup(time.Duration(envInt("DDP_TIMEOUT", 30)) * time.Second); err != nil {
			return nil, err
		}
		defer g.Close()
	}
	ds := ddpData()
	m := ddpModel()
	counted := &countedOpt{Optimizer: nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.05), nn.AdamWDefaults(2e-2))}
	var opt nn.Optimizer = counted
	cfg := train.Config{MicroBatch: micro, Accum: accum, Device: torch.CPU, ClipNorm: 0.5}
	var dp *distributed.DataParallel
	rank, world := 0, 1
	if g != nil {
		rank, world = g.Rank(), g.Size()
		var err error
		dp, err = distributed.NewDataParallel(g, m, distributed.DataParallelOptions{BucketBytes: int64(envInt("DDP_BUCKET", 0)),
			AfterBackward: os.Getenv("DDP_AFTER") == "1"})
		if err != nil {
			return nil, err
		}
		defer dp.Close()
		cfg.Parallel = dp
		if os.Getenv("DDP_ZERO") == "1" {
			if opt, err = distributed.NewZeRO(g, opt); err != nil {
				return nil, err
			}
		}
	}
	var out ddpOut
	step := 0
	killAt, stallAt := envInt("DDP_KILL_AT", -1), envInt("DDP_STALL_AT", -1)
	loss := func(b *data.Batch) *torch.Tensor {
		if rank == 1 && step+1 == killAt {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if rank == 1 && step+1 == stallAt {
			// Stops answering, long past the others' timeout, then leaves.
			time.Sleep(time.Duration(envInt("DDP_STALL_SECS", 20)) * time.Second)
			os.Exit(3)
		}
		return torch.MSELoss(m.Forward(b.Fields["x"]), b.Fields["y"], torch.ReduceMean)
	}
	tr, err := train.New(m, opt, loss, cfg)
	if err != nil {
		return nil, err
	}
	tr.OnStep = func(i train.StepInfo) {
		step = i.Step
		out.Losses = append(out.Losses, i.Loss)
	}
	newLoader := func(st *data.State) (train.Loader, error) {
		return data.NewLoader[data.Sample, *data.Batch](ds, data.Collate, data.Options{BatchSize: micro * accum, Shuffle: true, Seed: 5,
			Resume: st, Shard: data.Shard{Rank: rank, World: world}})
	}
	start := time.Now()
	res, err := train.Fit(context.Background(), tr, newLoader, train.FitConfig{Epochs: envInt("DDP_EPOCHS", 2),
		MaxSteps: envInt("DDP_MAXSTEPS", 0), CheckpointDir: os.Getenv("DDP_CKPT"), Resume: os.Getenv("DDP_RESUME")})
	out.Elapsed = time.Since(start).Seconds()
	if err != nil {
		// The fault tests want the error's kind and how long it took.
		out.Err = err.Error()
		switch {
		case errors.Is(err, distributed.ErrTimeout):
			out.Kind = "timeout"
		case errors.Is(err, distributed.ErrPeer):
			out.Kind = "peer"
		case errors.Is(err, distributed.ErrBroken):
			out.Kind = "broken"
		default:
			out.Kind = "other"
		}
		return out, nil
	}
	out.Checkpoint = res.Checkpoint
	out.OptBytes = counted.grew
	for _, s := range opt.State() {
		// The step counts are floats in Go; State makes 0-d tensors of them.
		if strings.HasPrefix(s.Name, "state.") && !strings.HasSuffix(s.Name, ".step") {
			out.StateBytes += s.T.NBytes()
		}
	}
	out.Params = params(m)
	if dp != nil {
		out.Buckets = dp.Buckets()
		out.Stats = dp.Stats()
	}
	return out, nil
}

func init() { helpers["ddp"] = ddpRun }

// countedOpt measures the CPU allocator's growth over the wrapped
// optimizer's first Step: the state it creates (its temporaries are freed
// by the end of the step). Under ZeRO it is the inner optimizer, which
// steps this rank's parameters only.
type countedOpt struct {
	nn.Optimizer
	steps int
	grew  int64
}

func (c *countedOpt) Step() {
	var before int64
	if c.steps == 0 {
		before = quietAllocated()
	}
	c.Optimizer.Step()
	if c.steps++; c.steps == 1 {
		c.grew = torch.MustMemoryStats(torch.CPU).Allocated - before
	}
}

// quietAllocated is the CPU allocator's count once it has stopped moving
// (two reads 2 ms apart agree, or 200 ms have passed): the count is the
// process's, and Gloo's worker thread may still be dropping its last
// references to a finished all-reduce's tensors as the step begins.
func quietAllocated() int64 {
	prev := torch.MustMemoryStats(torch.CPU).Allocated
	for range 100 {
		time.Sleep(2 * time.Millisecond)
		cur := torch.MustMemoryStats(torch.CPU).Allocated
		if cur == prev {
			return cur
		}
		prev = cur
	}
	return prev
}

func runDDP(t *testing.T, world int, env ...string) []ddpOut {
	t.Helper()
	if world == 0 {
		env = append(env, "DDP_SINGLE=1")
		world = 1
	}
	res := spawn(t, job{helper: "ddp", world: world, limit: 120 * time.Second, env: env})
	outs := make([]ddpOut, len(res))
	for k, r := range res {
		r.decode(t, &outs[k])
		require.Empty(t, outs[k].Err, "rank %d: %s", k, r.Stderr)
	}
	return outs
}

func maxDiff(a, b map[string][]float64) float64 {
	d := 0.0
	for k, x := range a {
		for i := range x {
			d = max(d, math.Abs(x[i]-b[k][i]))
		}
	}
	return d
}

// 2 and 3 ranks, as separate processes on loopback, train to the
// parameters of one process with the combined batch (within 1e-5 in
// float32): accumulation (no sync on a window's first micro-batch), global
// gradient clipping, AdamW, two epochs whose last batch is short and split
// unevenly over the ranks (3 ranks: 4/3/3 samples), gradients all-reduced
// during backward in several buckets or after backward. ZeRO-1 gives the
// unsharded run's parameters (within 1e-6; they are bitwise equal) with
// each rank holding its part of the optimizer state, measured by the CPU
// allocator's counter.
func TestDataParallelEqualsOneProcess(t *testing.T) {
	for _, world := range []int{2, 3} {
		micro, accum := 2, 2
		ref := runDDP(t, 0, "DDP_MICRO="+strconv.Itoa(micro), "DDP_ACCUM="+strconv.Itoa(accum*world))[0]
		require.Len(t, ref.Losses, 2*((ddpSamples+micro*accum*world-1)/(micro*accum*world)))
		byVariant := map[string]ddpOut{}
		for _, variant := range []struct {
			name string
			env  []string
		}{
			{"bucketed", []string{"DDP_BUCKET=512"}},
			{"after backward", []string{"DDP_AFTER=1"}},
			{"ZeRO-1", []string{"DDP_ZERO=1", "DDP_BUCKET=512"}},
		} {
			outs := runDDP(t, world, append(variant.env, "DDP_MICRO="+strconv.Itoa(micro), "DDP_ACCUM="+strconv.Itoa(accum))...)
			byVariant[variant.name] = outs[0]
			for r, o := range outs {
				require.Equal(t, outs[0].Params, o.Params, "%d ranks %s: rank %d differs from rank 0", world, variant.name, r)
				require.InDeltaSlice(t, ref.Losses, o.Losses, 1e-5)
			}
			d := maxDiff(ref.Params, outs[0].Params)
			t.Logf("%d ranks, %s: max |Δ parameter| vs one process %.2e; %d buckets %v; %d of %d bucket all-reduces started in backward",
				world, variant.name, d, len(outs[0].Buckets), outs[0].Buckets, outs[0].Stats.InBackward, outs[0].Stats.Steps*outs[0].Stats.Buckets)
			require.Less(t, d, 1e-5, "%d ranks %s", world, variant.name)
			if variant.name == "bucketed" {
				require.Greater(t, len(outs[0].Buckets), 2)
				require.Equal(t, outs[0].Stats.Steps*outs[0].Stats.Buckets, outs[0].Stats.InBackward, "every bucket starts during backward")
			}
			if variant.name == "after backward" {
				require.Zero(t, outs[0].Stats.InBackward)
			}
			if variant.name == "ZeRO-1" {
				var sum int64
				for r, o := range outs {
					t.Logf("  ZeRO-1 rank %d: optimizer state %d B by the allocator's count (%d B of moment tensors); unsharded: %d B",
						r, o.OptBytes, o.StateBytes, ref.OptBytes)
					// The counter sees exactly the state tensors, but for one
					// gradient bucket's buffer that Gloo's worker thread may
					// release during the step (it holds the last reference
					// until its work object goes; seen once in CI: 3072 B
					// counted, 4096 B of state, a 1024 B bucket).
					gap := o.StateBytes - o.OptBytes
					require.True(t, gap == 0 || slices.Contains(o.Buckets, gap),
						"rank %d: the counter saw %d B, the state is %d B; buckets %v", r, o.OptBytes, o.StateBytes, o.Buckets)
					require.Less(t, o.StateBytes, ref.OptBytes*2/int64(world), "rank %d keeps about 1/%d of the state", r, world)
					sum += o.StateBytes
				}
				require.Equal(t, ref.OptBytes, sum, "the shards add up to the whole state")
				dz := maxDiff(byVariant["bucketed"].Params, outs[0].Params)
				t.Logf("  ZeRO-1 vs unsharded data parallel: max |Δ parameter| %.2e", dz)
				require.LessOrEqual(t, dz, 1e-6)
				require.Equal(t, ref.StateBytes, ref.OptBytes)
			}
		}
	}
}

// A rank that dies mid-step (SIGKILL in its forward) makes the others fail
// with ErrPeer at once, and a rank that stops answering (asleep in its
// forward) makes them fail with ErrTimeout once the group's timeout has
// passed — an error returned, never a hang or an abort.
func TestDeadOrStalledRankFailsTheOthers(t *testing.T) {
	for _, c := range []struct {
		name, env, kind string
		timeout         int
	}{
		{"killed", "DDP_KILL_AT=3", "peer", 20},
		{"stalled", "DDP_STALL_AT=3", "timeout", 5}, // also the rendezvous's: not shorter on a busy machine
	} {
		t.Run(c.name, func(t *testing.T) {
			res := spawn(t, job{helper: "ddp", world: 2, limit: 60 * time.Second,
				env: []string{c.env, "DDP_TIMEOUT=" + strconv.Itoa(c.timeout), "DDP_BUCKET=512"},
				rankEnv: func(r int) []string {
					if r == 1 && c.name == "stalled" {
						// The sleeping rank leaves by itself after 3 timeouts.
						return []string{"DDP_TIMEOUT=60", "DDP_STALL_SECS=" + strconv.Itoa(3*c.timeout)}
					}
					return nil
				}})
			var out ddpOut
			require.NoError(t, res[0].Err, res[0].Stderr)
			res[0].decode(t, &out)
			t.Logf("rank 0: %s after %.1f s of training: %s", out.Kind, out.Elapsed, out.Err)
			require.Equal(t, c.kind, out.Kind, out.Err)
			require.Less(t, out.Elapsed, float64(c.timeout)+5)
			if c.name == "stalled" {
				require.GreaterOrEqual(t, out.Elapsed, float64(c.timeout)*0.9)
			}
		})
	}
}

// A checkpoint written by 3 ranks with ZeRO-1 (rank 0 gathers the sharded
// optimizer state) in the middle of an epoch resumes on 2 ranks without
// ZeRO and on one process — the same global batch of 12, split 2 × 2 × 3,
// 2 × 3 × 2 and 2 × 6 — and each ends at the parameters of one process
// that was never stopped (within 1e-5): the loader continues at the same
// sample over another number of ranks, the optimizer state is whole.
func TestCheckpointResumesOnOtherWorldSizes(t *testing.T) {
	ref := runDDP(t, 0, "DDP_MICRO=2", "DDP_ACCUM=6")[0]
	dir := t.TempDir()
	saved := runDDP(t, 3, "DDP_ZERO=1", "DDP_MICRO=2", "DDP_ACCUM=2", "DDP_MAXSTEPS=1", "DDP_CKPT="+dir)
	ck := saved[0].Checkpoint
	require.FileExists(t, ck)
	require.Greater(t, maxDiff(ref.Params, saved[0].Params), 1e-3, "stopped early: not yet at the end")
	for _, c := range []struct {
		name  string
		world int
		env   []string
	}{
		{"2 ranks", 2, []string{"DDP_ACCUM=3", "DDP_BUCKET=512"}},
		{"1 process", 0, []string{"DDP_ACCUM=6"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			outs := runDDP(t, c.world, append(c.env, "DDP_MICRO=2", "DDP_RESUME="+ck)...)
			d := maxDiff(ref.Params, outs[0].Params)
			t.Logf("3 ranks (ZeRO-1) → %s: max |Δ parameter| vs one process never stopped %.2e; losses %v", c.name, d, outs[0].Losses)
			require.Less(t, d, 1e-5)
			require.InDeltaSlice(t, ref.Losses[1:], outs[0].Losses, 1e-5)
		})
	}
}
