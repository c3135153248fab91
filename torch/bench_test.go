package torch

import "testing"

// Per-op overhead benchmarks (make bench-ops compares them with Python
// PyTorch on the same libtorch). Each iteration frees its result, so memory
// stays flat however long the benchmark runs.

func benchFlat(b *testing.B, body func()) {
	b.Helper()
	settle()
	before := MustMemoryStats(CPU).Allocated
	live := LiveTensors()
	b.ReportAllocs()
	b.ResetTimer()
	body()
	b.StopTimer()
	b.ReportMetric(float64(NumThreads()), "threads")
	if got := MustMemoryStats(CPU).Allocated; got != before {
		b.Fatalf("allocated bytes %d after the loop, %d before", got, before)
	}
	if got := LiveTensors(); got != live {
		b.Fatalf("%d live tensors after the loop, %d before", got, live)
	}
}

// BenchmarkOpAdd: x + y on 1-element tensors, the result freed each time.
func BenchmarkOpAdd(b *testing.B) {
	x, y := Ones([]int64{1}), Ones([]int64{1})
	defer x.Free()
	defer y.Free()
	benchFlat(b, func() {
		for i := 0; i < b.N; i++ {
			x.Add(y).Free()
		}
	})
}

// BenchmarkOpAddInPlace: x += y on 1-element tensors (no new tensor).
func BenchmarkOpAddInPlace(b *testing.B) {
	x, y := Zeros([]int64{1}), Ones([]int64{1})
	defer x.Free()
	defer y.Free()
	benchFlat(b, func() {
		for i := 0; i < b.N; i++ {
			x.AddIn(y, 1)
		}
	})
}

// BenchmarkOpMatmul64: a 64×64 float32 matrix product.
func BenchmarkOpMatmul64(b *testing.B) {
	x, y := Ones([]int64{64, 64}), Ones([]int64{64, 64})
	defer x.Free()
	defer y.Free()
	benchFlat(b, func() {
		for i := 0; i < b.N; i++ {
			x.Matmul(y).Free()
		}
	})
}

// BenchmarkOpDim: t.Dim(), the bare cgo round trip (no dispatcher).
func BenchmarkOpDim(b *testing.B) {
	x := Ones([]int64{1})
	defer x.Free()
	benchFlat(b, func() {
		for i := 0; i < b.N; i++ {
			_ = x.Dim()
		}
	})
}
