package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/torchfit/torchfit/torch"
)

// indexDataset: sample i is {"x": [i]} (float32), created by Get.
func indexDataset(n int) DatasetFunc[Sample] {
	return DatasetFunc[Sample]{N: n, F: func(i int) (Sample, error) {
		return Sample{"x": torch.FromSlice([]float32{float32(i)}, nil)}, nil
	}}
}

// ids reads a batch's sample indices back and frees the batch.
func ids(t *testing.T, b *Batch) []int {
	t.Helper()
	v := torch.ToSlice[float32](b.Fields["x"])
	b.Free()
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// epoch reads the rest of the current epoch.
func epoch(t *testing.T, l *Loader[Sample, *Batch]) [][]int {
	t.Helper()
	var out [][]int
	for b, err := range l.Epoch(context.Background()) {
		require.NoError(t, err)
		out = append(out, ids(t, b))
	}
	return out
}

func newLoader(t *testing.T, ds Dataset[Sample], opt Options) *Loader[Sample, *Batch] {
	t.Helper()
	l, err := NewLoader(ds, Collate, opt)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// settle waits for the goroutine count to drop back to base.
func settle(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), base, "goroutines leaked")
}

func TestOrderNoShuffle(t *testing.T) {
	const n = 23
	for _, tc := range []struct {
		bs       int
		dropLast bool
		wantLen  int
	}{
		{1, false, 23}, {4, false, 6}, {4, true, 5}, {5, false, 5}, {5, true, 4}, {23, true, 1}, {30, true, 0}, {30, false, 1},
	} {
		for _, workers := range []int{0, 1, 3} {
			t.Run(fmt.Sprintf("bs%d_drop%v_w%d", tc.bs, tc.dropLast, workers), func(t *testing.T) {
				l := newLoader(t, indexDataset(n), Options{BatchSize: tc.bs, DropLast: tc.dropLast, Workers: workers})
				require.Equal(t, tc.wantLen, l.Len())
				var want [][]int
				for lo := 0; lo < n; lo += tc.bs {
					hi := min(lo+tc.bs, n)
					if hi-lo < tc.bs && tc.dropLast {
						break
					}
					b := []int{}
					for i := lo; i < hi; i++ {
						b = append(b, i)
					}
					want = append(want, b)
				}
				for e := 0; e < 2; e++ { // the second epoch is the same
					require.Equal(t, want, epoch(t, l))
				}
				require.Equal(t, State{Epoch: 2}, l.State())
			})
		}
	}
}

func TestShuffle(t *testing.T) {
	const n, bs = 50, 7
	run := func(seed uint64, workers int) [][][]int {
		l := newLoader(t, indexDataset(n), Options{BatchSize: bs, Shuffle: true, Seed: seed, Workers: workers})
		return [][][]int{epoch(t, l), epoch(t, l)}
	}
	a := run(1, 0)
	require.Equal(t, a, run(1, 0), "same seed, same order")
	require.Equal(t, a, run(1, 3), "workers do not change the order")
	require.NotEqual(t, a, run(2, 2), "another seed, another order")
	require.NotEqual(t, a[0], a[1], "each epoch has its own permutation")
	for e, ep := range a {
		all := slices.Concat(ep...)
		require.NotEqual(t, slices.Sorted(slices.Values(all)), all, "epoch %d is shuffled", e)
		slices.Sort(all)
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, all, "epoch %d: every index exactly once", e)
	}
}

func TestDropLastShuffle(t *testing.T) {
	l := newLoader(t, indexDataset(10), Options{BatchSize: 4, DropLast: true, Shuffle: true, Seed: 3, Workers: 2})
	got := epoch(t, l)
	require.Len(t, got, 2)
	seen := map[int]bool{}
	for _, b := range got {
		require.Len(t, b, 4)
		for _, i := range b {
			require.False(t, seen[i], "index %d twice", i)
			seen[i] = true
		}
	}
	// The dropped samples are the tail of the permutation.
	perm := l.Permutation(0)
	require.Equal(t, perm[:8], slices.Concat(got...))
}

// counter counts batches whose collate has started.
type counter struct{ started atomic.Int64 }

func TestBoundedInFlight(t *testing.T) {
	for _, tc := range []struct{ workers, prefetch int }{{1, 1}, {2, 2}, {3, 1}, {2, 4}} {
		t.Run(fmt.Sprintf("w%d_p%d", tc.workers, tc.prefetch), func(t *testing.T) {
			var c counter
			collate := func(s []Sample) (*Batch, error) {
				c.started.Add(1)
				return Collate(s)
			}
			l, err := NewLoader[Sample](indexDataset(64), collate, Options{BatchSize: 2, Workers: tc.workers, Prefetch: tc.prefetch})
			require.NoError(t, err)
			defer l.Close()
			limit := int64(tc.workers * tc.prefetch)
			var delivered, maxAhead int64
			for k := 0; ; k++ {
				if k%8 == 1 { // a slow consumer: let the workers fill the pipeline (started by the first Next)
					deadline := time.Now().Add(2 * time.Second)
					for c.started.Load()-delivered < min(limit, int64(l.Len())-delivered) && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					time.Sleep(20 * time.Millisecond)
				}
				ahead := c.started.Load() - delivered
				maxAhead = max(maxAhead, ahead)
				require.LessOrEqual(t, ahead, limit, "batch %d: %d batches in flight", k, ahead)
				b, err := l.Next(context.Background())
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				delivered++
				b.Free()
			}
			require.Equal(t, limit, maxAhead, "the pipeline fills up to workers×prefetch")
		})
	}
}

var errBoom = errors.New("boom")

func TestErrors(t *testing.T) {
	const n, bs, bad = 40, 4, 13 // index 13 is in batch 3
	getErr := func(i int) (Sample, error) {
		if i == bad {
			return nil, fmt.Errorf("reading %d: %w", i, errBoom)
		}
		return indexDataset(n).F(i)
	}
	getPanic := func(i int) (Sample, error) {
		x := torch.FromSlice([]float32{float32(i)}, nil)
		if i == bad {
			x.Free()
			_ = x.Shape() // *torch.Error: used after Free
		}
		return Sample{"x": x}, nil
	}
	collateErr := func(s []Sample) (*Batch, error) {
		b, err := Collate(s)
		for _, x := range s {
			if v := torch.ToSlice[float32](x["x"]); v[0] == bad {
				b.Free()
				return nil, errBoom
			}
		}
		return b, err
	}
	collatePanic := func(s []Sample) (*Batch, error) {
		for _, x := range s {
			if v := torch.ToSlice[float32](x["x"]); v[0] == bad {
				torch.Stack(nil, 0) // *torch.Error
			}
		}
		return Collate(s)
	}
	for _, tc := range []struct {
		name      string
		get       func(int) (Sample, error)
		collate   func([]Sample) (*Batch, error)
		wantIndex int
		is        error
		msg       string
	}{
		{"get error", getErr, Collate, bad, errBoom, "sample 13: reading 13: boom"},
		{"get panic", getPanic, Collate, bad, torch.ErrFreed, "sample 13"},
		{"collate error", indexDataset(n).F, collateErr, -1, errBoom, "collate: boom"},
		{"collate panic", indexDataset(n).F, collatePanic, -1, nil, "collate"},
	} {
		for _, workers := range []int{0, 2} {
			t.Run(fmt.Sprintf("%s_w%d", tc.name, workers), func(t *testing.T) {
				torch.CollectGarbage()
				base, gbase := torch.LiveTensors(), runtime.NumGoroutine()
				l, err := NewLoader[Sample](DatasetFunc[Sample]{N: n, F: tc.get}, tc.collate,
					Options{BatchSize: bs, Workers: workers, Prefetch: 3})
				require.NoError(t, err)
				var got int
				var last error
				for b, err := range l.Epoch(context.Background()) {
					if err != nil {
						last = err
						break
					}
					b.Free()
					got++
				}
				require.Equal(t, bad/bs, got, "the batches before the failing one arrive")
				var be *BatchError
				require.ErrorAs(t, last, &be)
				require.Equal(t, BatchError{Epoch: 0, Batch: bad / bs, Index: tc.wantIndex, Err: be.Err}, *be)
				require.ErrorContains(t, last, fmt.Sprintf("epoch 0 batch %d", bad/bs))
				require.ErrorContains(t, last, tc.msg)
				if tc.is != nil {
					require.ErrorIs(t, last, tc.is)
				}
				if tc.name == "collate panic" {
					var te *torch.Error
					require.ErrorAs(t, last, &te)
				}
				require.Equal(t, State{Epoch: 0, Batch: bad / bs}, l.State(), "the position stays at the failing batch")
				_, err = l.Next(context.Background())
				require.Equal(t, last, err, "the error is sticky")
				require.NoError(t, l.Close())
				settle(t, gbase)
				require.Equal(t, base, torch.LiveTensors(), "no tensor leaks")
			})
		}
	}
}

func TestWorkerPanicReraised(t *testing.T) {
	for _, workers := range []int{0, 2} {
		ds := DatasetFunc[Sample]{N: 8, F: func(i int) (Sample, error) {
			if i == 5 {
				panic("not a torch error")
			}
			return indexDataset(8).F(i)
		}}
		l := newLoader(t, ds, Options{BatchSize: 2, Workers: workers})
		for k := 0; k < 2; k++ {
			b, err := l.Next(context.Background())
			require.NoError(t, err)
			b.Free()
		}
		func() {
			defer func() {
				r := recover()
				require.NotNil(t, r)
				require.Contains(t, fmt.Sprint(r), "not a torch error")
				require.Contains(t, fmt.Sprint(r), "epoch 0 batch 2")
			}()
			_, _ = l.Next(context.Background())
		}()
		_, err := l.Next(context.Background())
		require.ErrorContains(t, err, "panicked")
	}
}

func TestCloseWithBlockedWorkers(t *testing.T) {
	for _, slow := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("get_%v", slow), func(t *testing.T) {
			torch.CollectGarbage()
			base, gbase := torch.LiveTensors(), runtime.NumGoroutine()
			var started atomic.Int64
			ds := DatasetFunc[Sample]{N: 1000, F: func(i int) (Sample, error) {
				started.Add(1)
				time.Sleep(slow)
				return indexDataset(1000).F(i)
			}}
			l, err := NewLoader(ds, Collate, Options{BatchSize: 2, Workers: 3, Prefetch: 2})
			require.NoError(t, err)
			b, err := l.Next(context.Background())
			require.NoError(t, err)
			// Let the workers fill the pipeline and block on it (or sit in a slow Get).
			for started.Load() < 6 {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(30 * time.Millisecond)
			require.Greater(t, runtime.NumGoroutine(), gbase)
			done := make(chan struct{})
			go func() { l.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Close hangs")
			}
			require.NoError(t, l.Close(), "Close twice")
			_, err = l.Next(context.Background())
			require.ErrorIs(t, err, ErrClosed)
			settle(t, gbase)
			require.Equal(t, base+1, torch.LiveTensors(), "only the delivered batch is alive")
			b.Free()
			require.Equal(t, base, torch.LiveTensors())
		})
	}
}

func TestContextCancel(t *testing.T) {
	release := make(chan struct{})
	ds := DatasetFunc[Sample]{N: 4, F: func(i int) (Sample, error) {
		<-release
		return indexDataset(4).F(i)
	}}
	l := newLoader(t, ds, Options{BatchSize: 2, Workers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := l.Next(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	require.Equal(t, [][]int{{0, 1}, {2, 3}}, epoch(t, l), "a cancelled wait loses no batch")
}

func TestResume(t *testing.T) {
	const n, bs, epochs = 30, 4, 3
	opt := Options{BatchSize: bs, Shuffle: true, Seed: 42, Workers: 2}
	straight := newLoader(t, indexDataset(n), opt)
	var all [][]int
	for e := 0; e < epochs; e++ {
		all = append(all, epoch(t, straight)...)
		all = append(all, nil) // epoch boundary
	}
	nb := straight.Len() + 1
	for _, k := range []int{0, 1, 5, nb - 2, nb - 1, nb, nb + 3, 2*nb - 1} {
		for _, workers := range []int{0, 2} {
			t.Run(fmt.Sprintf("k%d_w%d", k, workers), func(t *testing.T) {
				first := newLoader(t, indexDataset(n), opt)
				var got [][]int
				for len(got) < k {
					b, err := first.Next(context.Background())
					if err == io.EOF {
						got = append(got, nil)
						continue
					}
					require.NoError(t, err)
					got = append(got, ids(t, b))
				}
				st := first.State()
				require.NoError(t, first.Close())

				ropt := opt
				ropt.Seed, ropt.Workers, ropt.Resume = 0, workers, &st // the state carries the seed
				second := newLoader(t, indexDataset(n), ropt)
				require.Equal(t, st, second.State())
				for len(got) < len(all) {
					b, err := second.Next(context.Background())
					if err == io.EOF {
						got = append(got, nil)
						continue
					}
					require.NoError(t, err)
					got = append(got, ids(t, b))
				}
				require.Equal(t, all, got)
			})
		}
	}
	_, err := NewLoader(indexDataset(n), Collate, Options{BatchSize: bs, Resume: &State{Batch: 99}})
	require.ErrorContains(t, err, "resume state")
}

func TestNoTensorLeaks(t *testing.T) {
	x := torch.Randn([]int64{37, 5})
	y := torch.Arange(0, 37, 1)
	ds, err := NewTensorDataset(map[string]*torch.Tensor{"x": x, "y": y})
	require.NoError(t, err)
	defer ds.Free()
	for _, workers := range []int{0, 2} {
		torch.CollectGarbage()
		base, gbase := torch.LiveTensors(), runtime.NumGoroutine()
		l, err := NewLoader[Sample](ds, Collate, Options{BatchSize: 8, Shuffle: true, Workers: workers})
		require.NoError(t, err)
		torch.Tidy(func() { // a caller's scope does not adopt (and free) delivered batches
			for e := 0; e < 2; e++ {
				for b, err := range l.Epoch(context.Background()) {
					require.NoError(t, err)
					require.Equal(t, []int64{5}, b.Fields["x"].Shape()[1:])
					yy := torch.ToSlice[int64](b.Fields["y"])
					for j, i := range yy { // rows travel together
						row := x.Select(0, i)
						require.True(t, row.Equal(b.Fields["x"].Select(0, int64(j))))
					}
					b.Free()
				}
			}
		})
		require.NoError(t, l.Close())
		settle(t, gbase)
		require.Equal(t, base, torch.LiveTensors(), "workers=%d", workers)
	}
}

func TestBatchesOutliveCallerScope(t *testing.T) {
	l := newLoader(t, indexDataset(4), Options{BatchSize: 2, Workers: 0})
	var b *Batch
	torch.Tidy(func() {
		var err error
		b, err = l.Next(context.Background())
		require.NoError(t, err)
	})
	require.False(t, b.Fields["x"].Freed(), "delivered batches belong to the caller, not to its Tidy")
	require.Equal(t, []int{0, 1}, ids(t, b))
}

func TestDevice(t *testing.T) {
	if !torch.CUDAAvailable() {
		_, err := NewLoader(indexDataset(4), Collate, Options{Device: torch.CUDA(0)})
		require.ErrorContains(t, err, "CUDA is not available")
		return
	}
	torch.CollectGarbage()
	base := torch.LiveTensors()
	l := newLoader(t, indexDataset(10), Options{BatchSize: 4, Workers: 2, Device: torch.CUDA(0)})
	var got [][]int
	for b, err := range l.Epoch(context.Background()) {
		require.NoError(t, err)
		require.True(t, b.Fields["x"].Device().IsCUDA())
		got = append(got, ids(t, b))
	}
	require.Equal(t, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}, got)
	require.NoError(t, l.Close())
	require.Equal(t, base, torch.LiveTensors())
}

// TestResident: while the caller holds a batch, the CPU memory a loader
// holds never passes Options.Resident batches, and once the workers have
// filled the pipeline it is the caller's batch and the Workers×Prefetch
// built ahead.
func TestResident(t *testing.T) {
	for _, tc := range []struct{ workers, prefetch, want, full int }{
		{0, 0, 1, 1}, {0, 3, 1, 1}, {1, 0, 4, 3}, {1, 2, 4, 3}, {2, 1, 5, 3}, {2, 3, 9, 7},
	} {
		t.Run(fmt.Sprintf("w%d_p%d", tc.workers, tc.prefetch), func(t *testing.T) {
			o := Options{BatchSize: 4, Workers: tc.workers, Prefetch: tc.prefetch}
			require.Equal(t, tc.want, o.Resident())
			ds := DatasetFunc[Sample]{N: 64, F: func(i int) (Sample, error) {
				return Sample{"x": torch.Full([]int64{256}, float64(i), torch.Float32, torch.CPU)}, nil
			}}
			const batch = 4 * 256 * 4
			held := func() int64 { return torch.MustMemoryStats(torch.CPU).Allocated }
			base := held()
			l := newLoader(t, ds, o)
			var peak int64
			for k := 0; k < 6; k++ { // the pipeline refills while the caller holds each batch
				b, err := l.Next(context.Background())
				require.NoError(t, err)
				require.NoError(t, torch.ResetPeakMemory(torch.CPU))
				deadline := time.Now().Add(5 * time.Second)
				for held()-base < int64(tc.full)*batch && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(5 * time.Millisecond) // a worker over the limit would show here
				require.Equal(t, int64(tc.full)*batch, held()-base, "the caller's batch and %d built ahead", tc.full-1)
				peak = max(peak, torch.MustMemoryStats(torch.CPU).PeakAllocated-base)
				b.Free()
			}
			require.LessOrEqual(t, peak, int64(o.Resident())*batch)
			t.Logf("peak %d batches' worth (bound %d)", peak/batch, o.Resident())
		})
	}
}
