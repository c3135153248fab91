package data

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/torchfit/torchfit/torch"
)

// BenchmarkLoader feeds a consumer doing fixed work per batch (a
// [64,64]×[64,4096] matmul) from a cheap in-memory dataset, and reports how
// long Next waited for a batch: with workers the loader should keep up, i.e.
// the compute never waits. One iteration is one batch.
//
//	go test -run '^$' -bench BenchmarkLoader -benchtime 300x ./torch/data/
func BenchmarkLoader(b *testing.B) {
	x := torch.Randn([]int64{4096, 64})
	y := torch.Arange(0, 4096, 1)
	ds, err := NewTensorDataset(map[string]*torch.Tensor{"x": x, "y": y})
	if err != nil {
		b.Fatal(err)
	}
	defer ds.Free()
	w := torch.Randn([]int64{64, 4096})
	defer w.Free()
	// One intra-op thread: the consumer takes one core, leaving the other
	// to the workers (the test machine has two).
	threads := torch.NumThreads()
	torch.SetNumThreads(1)
	defer torch.SetNumThreads(threads)
	for _, workers := range []int{0, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			l, err := NewLoader[Sample](ds, Collate, Options{BatchSize: 64, Shuffle: true, Workers: workers, Prefetch: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			var compute time.Duration
			stalls := 0 // Next calls that took over 100µs: the consumer waited
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				bt, err := l.Next(ctx)
				if err == io.EOF {
					bt, err = l.Next(ctx)
				}
				if time.Since(t0) > 100*time.Microsecond {
					stalls++
				}
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				torch.Tidy(func() { bt.Fields["x"].Matmul(w).Relu().Sum().Item() })
				compute += time.Since(start)
				bt.Free()
			}
			b.StopTimer()
			st := l.Stats()
			b.ReportMetric(float64(st.Wait.Nanoseconds())/float64(b.N), "wait-ns/batch")
			b.ReportMetric(float64(compute.Nanoseconds())/float64(b.N), "compute-ns/batch")
			b.ReportMetric(100*float64(st.Wait)/float64(st.Wait+compute), "wait-%")
			b.ReportMetric(100*float64(stalls)/float64(b.N), "stalled-%")
		})
	}
}
