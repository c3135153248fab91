package scan

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/torchfit/torchfit/torch"
)

// BenchmarkScan: forward + backward of each formulation at B=2, D=256, N=16
// (float32) and L = 256, 1024, 4096 (SCAN_BENCH_L: a comma-separated list
// to override). Reported per run: held-bytes, what the forward leaves for
// backward (allocated after the forward minus before it, y excluded), and
// peak-bytes, the high-water mark of forward and backward above the inputs.
// make bench-scan runs it next to the Python formulations
// (scripts/bench_scan.py).
func BenchmarkScan(b *testing.B) {
	lengths := []int64{256, 1024, 4096}
	if s := os.Getenv("SCAN_BENCH_L"); s != "" {
		lengths = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				b.Fatalf("SCAN_BENCH_L: %v", err)
			}
			lengths = append(lengths, n)
		}
	}
	for _, s := range []Scan{Fused(DefaultChunk), Chunked(DefaultChunk), LogDepth(DefaultChunk), Sequential()} {
		for _, l := range lengths {
			b.Run(fmt.Sprintf("%s/L=%d", s.Name(), l), func(b *testing.B) { benchScan(b, s, 2, l, 256, 16) })
		}
	}
}

func benchScan(b *testing.B, s Scan, bs, l, d, n int64) {
	torch.ManualSeed(1)
	var ins []*torch.Tensor
	var gy *torch.Tensor
	torch.NoGrad(func() {
		ins = operandsFor(bs, l, d, n, torch.Float32)
		gy = torch.Randn([]int64{bs, l, d})
	})
	for _, t := range ins {
		t.Keep()
		t.SetRequiresGrad(true)
		defer t.Free()
	}
	gy.Keep()
	defer gy.Free()
	step := func() (held, peak int64) {
		base := torch.MustMemoryStats(torch.CPU).Allocated
		if err := torch.ResetPeakMemory(torch.CPU); err != nil {
			b.Fatal(err)
		}
		torch.Tidy(func() {
			y, last := s.Apply(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5])
			last.Free()
			held = torch.MustMemoryStats(torch.CPU).Allocated - base - y.NBytes()
			y.BackwardWith(gy, false, false)
			y.Free()
		})
		peak = torch.MustMemoryStats(torch.CPU).PeakAllocated - base
		torch.ZeroGrad(ins)
		return held, peak
	}
	step() // warm-up
	var held, peak int64
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h, p := step()
		held, peak = max(held, h), max(peak, p)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(held), "held-bytes")
	b.ReportMetric(float64(peak), "peak-bytes")
	b.ReportMetric(float64(torch.NumThreads()), "threads")
}

// cpuTime is the process's CPU time (user + system) in nanoseconds: on a
// shared machine a steadier measure of work than wall time.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
