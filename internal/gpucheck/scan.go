package gpucheck

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
)

// The fused selective scan's CUDA kernel (scan/internal/kernel/scan_cuda.cu).

func init() {
	register(&Check{Name: "scan-cuda", Doc: "scan.Fused's CUDA kernel vs scan.Sequential in float64: y, the last state and the six gradients, fp32 and bf16 inputs, five shapes",
		Timeout: 2 * time.Minute, Run: scanCUDA})
	register(&Check{Name: "scan-cuda-memory", Doc: "peak memory of forward+backward, Fused (CUDA kernel) vs Chunked vs Sequential, L = 512…8192; step time vs Chunked",
		Timeout: 2 * time.Minute, Run: scanCUDAMemory})
}

// scanOperands makes the scan's inputs on the GPU in dtype dt, as the scan
// package's tests do: Δ positive (softplus), A negative.
func scanOperands(b, l, d, n int64, dt torch.DType) []*torch.Tensor {
	var ins []*torch.Tensor
	torch.NoGrad(func() {
		x := torch.Randn([]int64{b, l, d}, gpu)
		delta := torch.Randn([]int64{b, l, d}, gpu).Softplus(1, 20)
		A := torch.Randn([]int64{d, n}, gpu).Exp().Neg()
		B := torch.Randn([]int64{b, l, n}, gpu)
		C := torch.Randn([]int64{b, l, n}, gpu)
		D := torch.Randn([]int64{d}, gpu)
		ins = []*torch.Tensor{x, delta, A, B, C, D}
		for k, t := range ins {
			if t.DType() != dt {
				ins[k] = t.ToDType(dt)
			}
		}
	})
	for _, t := range ins {
		t.SetRequiresGrad(true)
	}
	return ins
}

// scanRun returns y, the last state and the gradients of Σ y·gy.
func scanRun(s scan.Scan, ins []*torch.Tensor, gy *torch.Tensor) (y, last *torch.Tensor, grads []*torch.Tensor) {
	y, last = s.Apply(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5])
	grads = torch.Gradients([]*torch.Tensor{y}, ins, []*torch.Tensor{gy.ToDType(y.DType())}, false, false)
	return y, last, grads
}

// relErr is max|a − ref| / max|ref|, both in float64.
func relErr(a, ref *torch.Tensor) float64 {
	var e float64
	torch.Tidy(func() {
		r := ref.ToDType(torch.Float64)
		scale := r.Abs().Max().Item()
		e = a.ToDType(torch.Float64).Sub(r).Abs().Max().Item() / math.Max(scale, 1e-30)
	})
	return e
}

// needScanKernel fails when the build does not run Fused on CUDA with the
// CUDA kernel (a GPU machine that built without nvcc, say).
func needScanKernel(n int64) (Result, bool) {
	runs, err := scan.FusedRuns(gpu, torch.Float32, n)
	if err != nil {
		return failf("scan.FusedRuns: %v", err), false
	}
	if runs != scan.RunsCUDA {
		return failf("scan.Fused on CUDA float32 runs %q, not the CUDA kernel (built in: %v)", runs, scan.CUDAKernelBuilt()), false
	}
	return Result{}, true
}

func scanCUDA(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	if r, ok := needScanKernel(16); !ok {
		return r
	}
	shapes := []struct{ b, l, d, n, k int64 }{
		{2, 300, 96, 16, 64},   // L not a multiple of K, D not of the block's 8 channels
		{1, 1000, 64, 4, 64},   // 4 lanes per channel
		{2, 129, 40, 64, 32},   // 2 states per lane
		{1, 77, 24, 200, 16},   // 8 states per lane, 200 not a power of two
		{3, 33, 5, 1, 7},       // one state, a 5-channel partial block
		{2, 2048, 256, 16, 64}, // a longer sequence
	}
	tol := map[torch.DType]float64{torch.Float32: 1e-3, torch.BFloat16: 3e-2}
	names := []string{"y", "last", "dx", "ddelta", "dA", "dB", "dC", "dD"}
	r := Result{Figures: map[string]any{}}
	var bad []string
	worst := map[torch.DType]float64{}
	torch.ManualSeed(21)
	for _, sh := range shapes {
		for _, dt := range []torch.DType{torch.Float32, torch.BFloat16} {
			torch.Tidy(func() {
				ins := scanOperands(sh.b, sh.l, sh.d, sh.n, dt)
				gy := torch.Randn([]int64{sh.b, sh.l, sh.d}, gpu, torch.Float64)
				// The reference: Sequential in float64 on the same values.
				ref := make([]*torch.Tensor, len(ins))
				torch.NoGrad(func() {
					for k, t := range ins {
						ref[k] = t.Detach().ToDType(torch.Float64)
					}
				})
				for _, t := range ref {
					t.SetRequiresGrad(true)
				}
				y0, last0, g0 := scanRun(scan.Sequential(), ref, gy)
				y, last, g := scanRun(scan.Fused(int(sh.k)), ins, gy)
				if y.DType() != dt {
					bad = append(bad, fmt.Sprintf("%v %+v: y is %v", dt, sh, y.DType()))
				}
				got := append([]*torch.Tensor{y, last}, g...)
				want := append([]*torch.Tensor{y0, last0}, g0...)
				var errs []string
				for k := range got {
					e := relErr(got[k], want[k])
					worst[dt] = math.Max(worst[dt], e)
					errs = append(errs, fmt.Sprintf("%s %.1e", names[k], e))
					if !(e <= tol[dt]) {
						bad = append(bad, fmt.Sprintf("%v B=%d L=%d D=%d N=%d K=%d: %s off by %.2e of its largest value (tolerance %.0e)",
							dt, sh.b, sh.l, sh.d, sh.n, sh.k, names[k], e, tol[dt]))
					}
				}
				r.Figures[fmt.Sprintf("%v B=%d L=%d D=%d N=%d K=%d", dt, sh.b, sh.l, sh.d, sh.n, sh.k)] = strings.Join(errs, ", ")
			})
		}
	}
	r.Figures["tolerance"] = fmt.Sprintf("max|Fused − Sequential(float64)| / max|Sequential|: float32 %.0e, bfloat16 %.0e", tol[torch.Float32], tol[torch.BFloat16])
	if len(bad) > 0 {
		r.Status, r.Summary = Fail, strings.Join(bad, "; ")
		return r
	}
	r.Status = Pass
	r.Summary = fmt.Sprintf("Fused (CUDA kernel) equals Sequential (float64) in y, the last state and all six gradients over %d shapes: worst relative error %.1e (fp32), %.1e (bf16)",
		len(shapes), worst[torch.Float32], worst[torch.BFloat16])
	return r
}

// scanStep runs forward and backward of s once on ins (gradients of
// Σ y·gy) and returns the step's wall time and its peak allocation above
// what was allocated before.
func scanStep(s scan.Scan, ins []*torch.Tensor, gy *torch.Tensor) (time.Duration, int64) {
	must(torch.Synchronize(gpu))
	must(torch.ResetPeakMemory(gpu))
	base := torch.MustMemoryStats(gpu).Allocated
	start := time.Now()
	torch.Tidy(func() {
		y, last := s.Apply(ins[0], ins[1], ins[2], ins[3], ins[4], ins[5])
		last.Free()
		g := torch.Gradients([]*torch.Tensor{y}, ins, []*torch.Tensor{gy}, false, false)
		y.Free()
		for _, t := range g {
			t.Free()
		}
	})
	must(torch.Synchronize(gpu))
	return time.Since(start), torch.MustMemoryStats(gpu).PeakAllocated - base
}

func scanCUDAMemory(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	// Mamba-130m's inner width and state; the seed's chunk of 64.
	const b, d, n, k = 2, 1536, 16, 64
	if r, ok := needScanKernel(n); !ok {
		return r
	}
	const f32 = 4
	// Sequential keeps several (B, L, D, N) tensors per step; past this
	// estimate it is left out.
	const seqLimit = 24 << 30
	r := Result{Figures: map[string]any{"shape": fmt.Sprintf("B=%d D=%d N=%d K=%d, float32, forward + backward", b, d, n, k)}}
	var bad, rows []string
	torch.ManualSeed(22)
	// Warm-up: the kernels' first launch (module load), cuBLAS, the allocator.
	torch.Tidy(func() {
		ins := scanOperands(b, 256, d, n, torch.Float32)
		gy := torch.Randn([]int64{b, 256, d}, gpu)
		for _, s := range []scan.Scan{scan.Fused(k), scan.Chunked(k), scan.Sequential()} {
			scanStep(s, ins, gy)
		}
	})
	for _, l := range []int64{512, 1024, 2048, 4096, 8192} {
		torch.Tidy(func() {
			ins := scanOperands(b, l, d, n, torch.Float32)
			gy := torch.Randn([]int64{b, l, d}, gpu)
			// Fused: best of 3 (it is short); the others once.
			var tf time.Duration
			var pf int64
			for i := 0; i < 3; i++ {
				t, p := scanStep(scan.Fused(k), ins, gy)
				if i == 0 || t < tf {
					tf = t
				}
				pf = max(pf, p)
			}
			tc, pc := scanStep(scan.Chunked(k), ins, gy)
			row := fmt.Sprintf("fused %8.1f MiB %9.2f ms | chunked %8.1f MiB %9.2f ms (%.0f× the fused time)",
				float64(pf)/mib, ms(tf), float64(pc)/mib, ms(tc), ms(tc)/ms(tf))
			r.Figures[fmt.Sprintf("L=%d fused.peak_mib", l)] = round1(float64(pf) / mib)
			r.Figures[fmt.Sprintf("L=%d fused.ms", l)] = round1(ms(tf))
			r.Figures[fmt.Sprintf("L=%d chunked.peak_mib", l)] = round1(float64(pc) / mib)
			r.Figures[fmt.Sprintf("L=%d chunked.ms", l)] = round1(ms(tc))
			if est := 6 * b * l * d * n * f32; est <= seqLimit {
				ts, ps := scanStep(scan.Sequential(), ins, gy)
				row += fmt.Sprintf(" | sequential %8.1f MiB %9.2f ms", float64(ps)/mib, ms(ts))
				r.Figures[fmt.Sprintf("L=%d sequential.peak_mib", l)] = round1(float64(ps) / mib)
				r.Figures[fmt.Sprintf("L=%d sequential.ms", l)] = round1(ms(ts))
			} else {
				row += " | sequential left out (estimated above 24 GiB)"
			}
			rows = append(rows, fmt.Sprintf("L=%-5d %s", l, row))
			// What the fused step may hold at its peak: y, the gradients of
			// x and Δ (B·L·D each), of B and C (B·L·N each), the chunk
			// starts (B·D·N·⌈L/K⌉) and backward's one-chunk scratch
			// (B·D·N·K), with 50% slack for the allocator's rounding.
			bound := int64(1.5 * float64(f32*(3*b*l*d+2*b*l*n+b*d*n*((l+k-1)/k)+b*d*n*k)))
			if pf > bound {
				bad = append(bad, fmt.Sprintf("L=%d: the fused peak %s is above its bound %s", l, torch.FormatBytes(pf), torch.FormatBytes(bound)))
			}
			if pf > pc {
				bad = append(bad, fmt.Sprintf("L=%d: the fused peak %s is above the chunked one %s", l, torch.FormatBytes(pf), torch.FormatBytes(pc)))
			}
			if tf > tc {
				bad = append(bad, fmt.Sprintf("L=%d: the fused step (%.1f ms) is slower than the chunked ATen one (%.1f ms)", l, ms(tf), ms(tc)))
			}
		})
	}
	r.Figures["table"] = rows
	if len(bad) > 0 {
		r.Status, r.Summary = Fail, strings.Join(bad, "; ")
		return r
	}
	r.Status = Pass
	r.Summary = "the fused CUDA kernel's peak stays within its bound (y, the input gradients, one state per chunk, one chunk of scratch) and below Chunked's at every L, and its step is faster than Chunked's: " + rows[len(rows)-1]
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round1(v float64) float64 { return math.Round(v*10) / 10 }
