package nn

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
)

// withAttention runs fn with the attention path forced: "fused" (the CPU
// kernel, SDPA off even on 2.x), "sdpa" (2.x only) or "explicit".
func withAttention(path string, fn func()) {
	fused, sdpa := FusedAttention, SDPA
	defer func() { FusedAttention, SDPA = fused, sdpa }()
	FusedAttention, SDPA = path == "fused", path == "sdpa"
	fn()
}

// mhaStep runs m on x (batch-first) under o, backward of sum(y∘g), and
// returns y and the gradients of x and the parameters.
func mhaStep(m *MultiheadAttention, x, g *torch.Tensor, o AttnOpts) []*torch.Tensor {
	params := paramTensors(m)
	torch.ZeroGrad(params)
	xi := x.Detach().SetRequiresGrad(true)
	y, _ := m.Forward(xi, xi, xi, o)
	y.Mul(g).Sum().Backward()
	out := []*torch.Tensor{y.Detach(), xi.Grad().Clone()}
	for _, p := range params {
		out = append(out, p.Grad().Clone())
	}
	return out
}

func paramTensors(m Module) []*torch.Tensor {
	var ts []*torch.Tensor
	for _, p := range Parameters(m) {
		ts = append(ts, p.T)
	}
	return ts
}

// mhaFloat64 is a batch-first float64 self-attention in eval mode (no
// dropout: paths draw different numbers), an input (n, l, e), an output
// gradient, and a key padding mask hiding the second sequence's last 5
// positions.
func mhaFloat64(seed uint64, n, l, e, h int64) (m *MultiheadAttention, x, g, pad *torch.Tensor) {
	torch.ManualSeed(seed)
	m = NewMultiheadAttention(e, h, 0.1, true)
	To(m, torch.CPU, torch.Float64)
	SetTraining(m, false)
	x = torch.Randn([]int64{n, l, e}, torch.Float64)
	g = torch.Randn([]int64{n, l, e}, torch.Float64)
	pad = torch.Zeros([]int64{n, l}, torch.Bool)
	torch.NoGrad(func() { pad.Narrow(1, l-5, 5).Select(0, 1).FillIn(1) })
	return m, x, g, pad
}

// nn.MultiheadAttention through the fused kernel equals the explicit path
// in float64, output and every gradient, for its mask forms.
func TestMultiheadAttentionFusedMatchesExplicit(t *testing.T) {
	const n, l, e, h = 2, 37, 32, 4
	m, x, g, pad := mhaFloat64(11, n, l, e, h)
	for _, tc := range []struct {
		name string
		o    AttnOpts
	}{
		{"none", AttnOpts{}},
		{"causal", AttnOpts{Causal: true}},
		{"pad", AttnOpts{KeyPaddingMask: pad}},
		{"pad float", AttnOpts{KeyPaddingMask: additiveMask(pad, torch.Float64)}},
		{"causal+pad", AttnOpts{Causal: true, KeyPaddingMask: pad}},
		{"mask 2-d", AttnOpts{AttnMask: torch.Randn([]int64{l, l}, torch.Float64)}},
		{"mask per head", AttnOpts{AttnMask: torch.Rand([]int64{n * h, l, l}).GtScalar(0.8)}},
		{"offset", AttnOpts{Causal: true, CausalOffset: 4}},
	} {
		var fused, explicit []*torch.Tensor
		withAttention("fused", func() {
			require.Equal(t, "fused", AttentionPath(x, x, x, tc.o), tc.name)
			fused = mhaStep(m, x, g, tc.o)
		})
		withAttention("explicit", func() {
			require.Equal(t, "explicit", AttentionPath(x, x, x, tc.o), tc.name)
			explicit = mhaStep(m, x, g, tc.o)
		})
		for i := range fused {
			require.True(t, fused[i].AllClose(explicit[i], 1e-10, 1e-12), "%s: tensor %d", tc.name, i)
		}
	}
	// Weights asked for, or a dtype the kernel lacks: the explicit path.
	withAttention("fused", func() {
		require.Equal(t, "explicit", AttentionPath(x, x, x, AttnOpts{NeedWeights: true}))
		xh := x.ToDType(torch.Float16)
		require.Equal(t, "explicit", AttentionPath(xh, xh, xh, AttnOpts{}))
		xb := x.ToDType(torch.BFloat16)
		require.Equal(t, "explicit", AttentionPath(xb, xb, xb, AttnOpts{}))
		FusedAttentionBF16 = true
		defer func() { FusedAttentionBF16 = false }()
		require.Equal(t, "fused", AttentionPath(xb, xb, xb, AttnOpts{}))
	})
}

// On libtorch 2.x a causal mask alone goes to SDPA as its is_causal, as
// PyTorch's is_causal hint does: no mask is made. With another mask, or a
// shifted causal mask, the masks are made and added as before. Every
// form equals the explicit path in float64.
func TestSDPACausalHint(t *testing.T) {
	if !torch.HasSDPA() {
		maj, min, _ := torch.LibtorchVersion()
		t.Skipf("libtorch %d.%d has no scaled_dot_product_attention", maj, min)
	}
	const n, l, e, h = 2, 23, 32, 4
	m, x, g, pad := mhaFloat64(14, n, l, e, h)
	for _, tc := range []struct {
		name string
		o    AttnOpts
		mask bool // a mask is made
	}{
		{"causal", AttnOpts{Causal: true}, false},
		{"causal+pad", AttnOpts{Causal: true, KeyPaddingMask: pad}, true},
		{"causal+mask", AttnOpts{Causal: true, AttnMask: torch.Randn([]int64{l, l}, torch.Float64)}, true},
		{"offset", AttnOpts{Causal: true, CausalOffset: 4}, true},
	} {
		var sdpa, explicit []*torch.Tensor
		withAttention("sdpa", func() {
			require.Equal(t, "sdpa", AttentionPath(x, x, x, tc.o), tc.name)
			calls := map[string]int64{}
			for _, c := range torch.CountCalls(func() { sdpa = mhaStep(m, x, g, tc.o) }) {
				calls[c.Name] = c.Calls
			}
			require.Equal(t, int64(1), calls["aten::scaled_dot_product_attention"], tc.name)
			require.Equal(t, tc.mask, calls["aten::triu"] > 0, "%s: %v", tc.name, calls)
		})
		withAttention("explicit", func() { explicit = mhaStep(m, x, g, tc.o) })
		for i := range sdpa {
			require.True(t, sdpa[i].AllClose(explicit[i], 1e-10, 1e-12), "%s: tensor %d", tc.name, i)
		}
	}
	// Fewer queries than keys, and more: SDPA's is_causal aligns its mask
	// at the top left, as the mask made here (query i sees keys 0…i).
	for _, ls := range [][2]int64{{5, 9}, {9, 5}} {
		q := torch.Randn([]int64{n, h, ls[0], 8}, torch.Float64)
		kv := torch.Randn([]int64{n, h, ls[1], 8}, torch.Float64)
		var a, b *torch.Tensor
		withAttention("sdpa", func() { a, _ = DotProductAttention(q, kv, kv, AttnOpts{Causal: true}, 0) })
		withAttention("explicit", func() { b, _ = DotProductAttention(q, kv, kv, AttnOpts{Causal: true}, 0) })
		require.True(t, a.AllClose(b, 1e-10, 1e-12), "%d queries, %d keys", ls[0], ls[1])
	}
}

// attentionPeak returns the peak CPU memory of one forward and backward of
// m's self-attention on x above what existed before (the input, weights).
func attentionPeak(m *MultiheadAttention, x *torch.Tensor, o AttnOpts) int64 {
	var peak int64
	torch.Tidy(func() {
		xi := x.Detach().SetRequiresGrad(true)
		base := torch.MustMemoryStats(torch.CPU).Allocated
		if err := torch.ResetPeakMemory(torch.CPU); err != nil {
			panic(err)
		}
		y, _ := m.Forward(xi, xi, xi, o)
		y.Sum().Backward()
		y.Free()
		peak = torch.MustMemoryStats(torch.CPU).PeakAllocated - base
	})
	torch.ZeroGrad(paramTensors(m))
	return peak
}

// The fused path's memory grows linearly with the sequence: 4× the
// positions, at most 4.5× the peak, where the explicit path's (L, L)
// matrices make it grow by more than 8×. The check can fail.
func TestFusedAttentionMemoryLinear(t *testing.T) {
	torch.ManualSeed(12)
	const e, h = 64, 4
	m := NewMultiheadAttention(e, h, 0.1, true) // training: attention dropout on
	peaks := map[string][2]int64{}
	for _, path := range []string{"fused", "explicit"} {
		withAttention(path, func() {
			var p [2]int64
			for i, l := range []int64{256, 1024} {
				x := torch.Randn([]int64{1, l, e})
				p[i] = attentionPeak(m, x, AttnOpts{Causal: true})
			}
			peaks[path] = p
		})
	}
	f, x := peaks["fused"], peaks["explicit"]
	t.Logf("peak fwd+bwd at L=256, 1024: fused %s, %s; explicit %s, %s", torch.FormatBytes(f[0]),
		torch.FormatBytes(f[1]), torch.FormatBytes(x[0]), torch.FormatBytes(x[1]))
	require.Less(t, float64(f[1]), 4.5*float64(f[0]))
	require.Greater(t, float64(x[1]), 8*float64(x[0]))
}

// attnBenchShapes are BenchmarkAttention's blocks: a ViT-B self-attention
// (768 wide, 12 heads, no masks, no dropout) and a conformer's (256 wide,
// 4 heads, key padding on the last eighth, attention dropout 0.1).
var attnBenchShapes = []struct {
	name    string
	e, h    int64
	dropout float64
	pad     bool
}{
	{"vit", 768, 12, 0, false},
	{"conformer", 256, 4, 0.1, true},
}

// attnBenchLengths: TORCHFIT_ATTN_LENGTHS (comma-separated), else 256…4096.
func attnBenchLengths() []int64 {
	s := os.Getenv("TORCHFIT_ATTN_LENGTHS")
	if s == "" {
		s = "256,512,1024,2048,4096"
	}
	var out []int64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || v <= 0 {
			panic(fmt.Sprintf("TORCHFIT_ATTN_LENGTHS: bad length %q", f))
		}
		out = append(out, v)
	}
	return out
}

// BenchmarkAttention times one forward and backward of a batch-first
// nn.MultiheadAttention self-attention (batch 1, float32, training mode)
// at each length, through the fused kernel and the explicit path, and
// reports the step's peak CPU memory above its inputs (peak-bytes, the
// counting allocator's). make bench-attention runs it and
// scripts/bench_attention.py times PyTorch's nn.MultiheadAttention beside it.
func BenchmarkAttention(b *testing.B) {
	for _, sh := range attnBenchShapes {
		for _, l := range attnBenchLengths() {
			for _, path := range []string{"fused", "explicit"} {
				b.Run(fmt.Sprintf("%s/L=%d/%s", sh.name, l, path), func(b *testing.B) {
					torch.ManualSeed(13)
					m := NewMultiheadAttention(sh.e, sh.h, sh.dropout, true)
					x := torch.Randn([]int64{1, l, sh.e})
					var o AttnOpts
					if sh.pad {
						o.KeyPaddingMask = torch.Zeros([]int64{1, l}, torch.Bool)
						torch.NoGrad(func() { o.KeyPaddingMask.Narrow(1, l-l/8, l/8).FillIn(1) })
					}
					withAttention(path, func() {
						var peak int64
						attentionPeak(m, x, o) // warm-up
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							peak = max(peak, attentionPeak(m, x, o))
						}
						b.ReportMetric(float64(peak), "peak-bytes")
						b.ReportMetric(float64(torch.NumThreads()), "threads")
					})
				})
			}
		}
	}
}

// MultiheadAttention projects with one packed linear when query, key and
// value are one tensor, and packs key and value when they are one: the
// three forms give the output and gradients of three separate
// projections (float64), and under bf16 autocast the packed form keeps
// one bf16 copy of its input for backward instead of three.
func TestMultiheadAttentionPackedProjection(t *testing.T) {
	torch.ManualSeed(12)
	const n, l, s, e, h = 2, 9, 7, 16, 4
	m := NewMultiheadAttention(e, h, 0, true)
	To(m, torch.CPU, torch.Float64)
	x := torch.Randn([]int64{n, l, e}, torch.Float64)
	mem := torch.Randn([]int64{n, s, e}, torch.Float64)
	g := torch.Randn([]int64{n, l, e}, torch.Float64)
	run := func(attend func(q, kv *torch.Tensor) *torch.Tensor) []*torch.Tensor {
		params := paramTensors(m)
		torch.ZeroGrad(params)
		xi, mi := x.Detach().SetRequiresGrad(true), mem.Detach().SetRequiresGrad(true)
		y := attend(xi, mi)
		y.Mul(g).Sum().Backward()
		out := []*torch.Tensor{y.Detach(), xi.Grad().Clone(), mi.Grad().Clone()}
		for _, p := range params {
			out = append(out, p.Grad().Clone())
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		packed, single func(q, kv *torch.Tensor) *torch.Tensor
	}{
		{"self-attention",
			func(q, kv *torch.Tensor) *torch.Tensor {
				y, _ := m.Forward(q, q, q, AttnOpts{})
				return y.Add(kv.SumDim([]int64{1}, true).MulScalar(0)) // kv joins the graph
			},
			func(q, kv *torch.Tensor) *torch.Tensor {
				y, _ := m.Forward(q, q.Ref(), q.Ref(), AttnOpts{}) // three handles: three projections
				return y.Add(kv.SumDim([]int64{1}, true).MulScalar(0))
			}},
		{"shared key and value",
			func(q, kv *torch.Tensor) *torch.Tensor { y, _ := m.Forward(q, kv, kv, AttnOpts{}); return y },
			func(q, kv *torch.Tensor) *torch.Tensor { y, _ := m.Forward(q, kv, kv.Ref(), AttnOpts{}); return y }},
	} {
		torch.Tidy(func() {
			a, b := run(tc.packed), run(tc.single)
			for i := range a {
				require.True(t, a[i].AllClose(b[i], 1e-10, 1e-12), "%s: tensor %d", tc.name, i)
			}
		})
	}

	// The bytes a bf16 self-attention's forward keeps: one cast of its
	// input (n·l·e bf16) fewer than twice over with three projections.
	m32 := NewMultiheadAttention(e, h, 0, true)
	x32 := torch.Randn([]int64{n, l, e})
	held := func(attend func(x *torch.Tensor) *torch.Tensor) int64 {
		var kept int64
		torch.Tidy(func() {
			// Not a leaf, as a layer norm's output: autocast caches the
			// casts of leaves that require grad only.
			xi := x32.Detach().SetRequiresGrad(true).MulScalar(1)
			base := torch.MustMemoryStats(torch.CPU).Allocated
			var y *torch.Tensor
			amp.Autocast(torch.CPU, torch.BFloat16, func() { y = attend(xi) })
			kept = torch.MustMemoryStats(torch.CPU).Allocated - base - y.NBytes()
		})
		return kept
	}
	packed := held(func(x *torch.Tensor) *torch.Tensor { y, _ := m32.Forward(x, x, x, AttnOpts{}); return y })
	single := held(func(x *torch.Tensor) *torch.Tensor { y, _ := m32.Forward(x, x.Ref(), x.Ref(), AttnOpts{}); return y })
	require.Equal(t, int64(2*n*l*e*2), single-packed, "packed %d, three projections %d bytes", packed, single)
}

// MultiheadAttention splits a projection of several parts (query, key
// and value; key and value) by one unbind, uses the packed weight and
// bias whole for self-attention and splits them by one split otherwise.
// PyTorch takes proj[0], proj[1], proj[2] and slices of the weight: each
// of those selects' and slices' backward fills a zero gradient the size
// of the whole projection or parameter and copies its part in, and the
// parts are then added up (on CUDA 8 kernel launches for the three
// selects where an unbind's backward is one stack). The two give the
// same output and gradients to the bit (each element of the sums is one
// part's value plus zeros), and the new backward needs less memory at
// its peak.
func TestMultiheadAttentionUnbindsItsProjection(t *testing.T) {
	torch.ManualSeed(13)
	const n, l, s, e, h = 4, 32, 24, 64, 4
	m := NewMultiheadAttention(e, h, 0, true)
	x := torch.Randn([]int64{n, l, e})
	mem := torch.Randn([]int64{n, s, e})
	g := torch.Randn([]int64{n, l, e})
	// sliced projects as torchfit did before, and PyTorch does: a slice of
	// the weight and bias per projection, a select per part.
	sliced := func(x *torch.Tensor, from, parts int64) []*torch.Tensor {
		y := torch.Linear(x, m.InProjWeight.Narrow(0, from*e, parts*e), m.InProjBias.Narrow(0, from*e, parts*e))
		length := x.Size(1)
		y = y.Reshape(n, length, parts, e).Permute(2, 0, 1, 3).Contiguous()
		out := make([]*torch.Tensor, parts)
		for i := range out {
			out[i] = y.Select(0, int64(i)).Reshape(n, length, h, e/h).Transpose(1, 2)
		}
		return out
	}
	attend := func(q, k, v *torch.Tensor) *torch.Tensor {
		ctx, _ := DotProductAttention(q, k, v, AttnOpts{}, 0)
		return m.OutProj.Forward(ctx.Transpose(1, 2).Reshape(n, l, e))
	}
	run := func(fwd func(x, mem *torch.Tensor) *torch.Tensor) (out []*torch.Tensor, peak int64) {
		withAttention("explicit", func() {
			params := paramTensors(m)
			torch.ZeroGrad(params)
			xi, mi := x.Detach().SetRequiresGrad(true), mem.Detach().SetRequiresGrad(true)
			loss := fwd(xi, mi).Mul(g).Sum()
			base := torch.MustMemoryStats(torch.CPU).Allocated
			require.NoError(t, torch.ResetPeakMemory(torch.CPU))
			loss.Backward()
			peak = torch.MustMemoryStats(torch.CPU).PeakAllocated - base
			out = []*torch.Tensor{loss.Detach(), xi.Grad().Clone()}
			if mi.Grad() != nil {
				out = append(out, mi.Grad().Clone())
			}
			for _, p := range params {
				out = append(out, p.Grad().Clone())
			}
		})
		return out, peak
	}
	for _, tc := range []struct {
		name         string
		before, then func(x, mem *torch.Tensor) *torch.Tensor
	}{
		{"self-attention",
			func(x, _ *torch.Tensor) *torch.Tensor { p := sliced(x, 0, 3); return attend(p[0], p[1], p[2]) },
			func(x, _ *torch.Tensor) *torch.Tensor { y, _ := m.Forward(x, x, x, AttnOpts{}); return y }},
		{"shared key and value",
			func(x, mem *torch.Tensor) *torch.Tensor {
				kv := sliced(mem, 1, 2)
				return attend(sliced(x, 0, 1)[0], kv[0], kv[1])
			},
			func(x, mem *torch.Tensor) *torch.Tensor { y, _ := m.Forward(x, mem, mem, AttnOpts{}); return y }},
		{"three inputs",
			func(x, mem *torch.Tensor) *torch.Tensor {
				return attend(sliced(x, 0, 1)[0], sliced(mem, 1, 1)[0], sliced(mem.MulScalar(2), 2, 1)[0])
			},
			func(x, mem *torch.Tensor) *torch.Tensor {
				y, _ := m.Forward(x, mem, mem.MulScalar(2), AttnOpts{})
				return y
			}},
	} {
		torch.Tidy(func() {
			want, before := run(tc.before)
			got, then := run(tc.then)
			require.Len(t, got, len(want))
			for i := range want {
				require.True(t, got[i].Equal(want[i]), "%s: tensor %d", tc.name, i)
			}
			t.Logf("%s: backward peak above the graph %d bytes, sliced and selected %d", tc.name, then, before)
			require.Less(t, then, before, tc.name)
		})
	}
}

// Under autocast, a forward that keeps nothing for backward (a
// checkpointed block's first pass) leaves only the out projection's cast
// weight and bias in autocast's cache, as any nn.Linear's (PyTorch's
// cache of leaf casts, until the region ends); the packed projection's
// weight goes in as a view (an alias) and its cast is freed with the
// step. Holding it too cost `asr memory-table --preset original` 4.5 MiB
// at micro-batch 2 × 4, bf16, checkpointing.
func TestMultiheadAttentionCachesNoPackedCast(t *testing.T) {
	const n, l, e, h = 2, 16, 64, 4
	m := NewMultiheadAttention(e, h, 0, true)
	x := torch.Randn([]int64{n, l, e})
	torch.Tidy(func() {
		var held int64
		amp.Autocast(torch.CPU, torch.BFloat16, func() {
			base := torch.MustMemoryStats(torch.CPU).Allocated
			var y *torch.Tensor
			torch.NoGrad(func() { y, _ = m.Forward(x, x, x, AttnOpts{}) })
			held = torch.MustMemoryStats(torch.CPU).Allocated - base - y.NBytes()
		})
		require.Equal(t, int64((e*e+e)*2), held, "bytes autocast kept: the out projection's bf16 weight and bias only")
	})
}
