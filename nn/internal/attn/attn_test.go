package attn

import (
	"math"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/philox"
	"github.com/torchfit/torchfit/torch"
)

// keepScale is the kernel's dropout factor for every element of (n, h, l,
// s), made in Go from the same Philox stream: 1/(1−p) kept, 0 dropped.
func keepScale(seed uint64, p float64, n, h, l, s int64) *torch.Tensor {
	tot := n * h * l * s
	z := make([]float64, tot)
	inv := 1 / (1 - p)
	for e := int64(0); e < tot; e++ {
		w := philox.Stream(seed, 0, uint64(e)/4)[e%4]
		if float64(philox.Uniform(w)) >= float64(float32(p)) {
			z[e] = inv
		}
	}
	return torch.FromSlice(z, []int64{n, h, l, s})
}

// explicit is the unfused computation the kernel must equal: scores,
// masks, softmax, dropout (with keep, the kernel's factors), product.
func explicit(q, k, v *torch.Tensor, o Opts, keep *torch.Tensor) *torch.Tensor {
	n, l, s := q.Size(0), q.Size(2), k.Size(2)
	scale := o.Scale
	if scale == 0 {
		scale = 1 / math.Sqrt(float64(q.Size(3)))
	}
	dt := q.DType()
	sc := q.MulScalar(scale).Matmul(k.Transpose(-2, -1))
	add := func(m *torch.Tensor) *torch.Tensor {
		if m.DType() == torch.Bool {
			return torch.ZerosLike(m, dt).MaskedFill(m, math.Inf(-1))
		}
		return m.ToDType(dt)
	}
	if o.KeyPaddingMask != nil {
		sc = sc.Add(add(o.KeyPaddingMask).Reshape(n, 1, 1, s))
	}
	if o.AttnMask != nil {
		sc = sc.Add(add(o.AttnMask))
	}
	if o.Causal {
		sc = sc.MaskedFill(torch.Ones([]int64{l, s}, torch.Bool).Triu(1+o.CausalOffset), math.Inf(-1))
	}
	p := sc.Softmax(-1)
	if keep != nil {
		p = p.Mul(keep.ToDType(dt))
	}
	return p.Matmul(v)
}

type shape struct{ n, h, l, s, d, dv int64 }

// inputs returns leaf q, k, v requiring grad, an upstream gradient and
// masks for sh in dtype dt; q arrives as a transposed view (as
// nn.MultiheadAttention's projections make it).
func inputs(sh shape, dt torch.DType) (q, k, v, g, kpm, am *torch.Tensor) {
	q = torch.Randn([]int64{sh.n, sh.l, sh.h, sh.d}, dt).Transpose(1, 2).Detach().SetRequiresGrad(true)
	k = torch.Randn([]int64{sh.n, sh.h, sh.s, sh.d}, dt).SetRequiresGrad(true)
	v = torch.Randn([]int64{sh.n, sh.h, sh.s, sh.dv}, dt).SetRequiresGrad(true)
	g = torch.Randn([]int64{sh.n, sh.h, sh.l, sh.dv}, dt)
	pad := make([]bool, sh.n*sh.s)
	for b := int64(0); b < sh.n; b++ {
		for j := sh.s - 1 - b*(sh.s/4); j < sh.s; j++ { // batch b ignores its last b·S/4 keys (never key 0)
			if j > 0 {
				pad[b*sh.s+j] = true
			}
		}
	}
	kpm = torch.FromSlice(pad, []int64{sh.n, sh.s})
	am = torch.Randn([]int64{sh.l, sh.s}, torch.Float64)
	return
}

// grads returns the gradients of sum(out∘g) with respect to ts (fresh leaves).
func grads(out, g *torch.Tensor, ts ...*torch.Tensor) []*torch.Tensor {
	out.Mul(g).Sum().Backward()
	r := make([]*torch.Tensor, len(ts))
	for i, t := range ts {
		r[i] = t.Grad().Detach().Clone()
	}
	return r
}

func maxDiff(a, b *torch.Tensor) float64 {
	return a.ToDType(torch.Float64).Sub(b.ToDType(torch.Float64)).Abs().Max().Item()
}

func maxAbs(a *torch.Tensor) float64 { return a.ToDType(torch.Float64).Abs().Max().Item() }

// The kernel equals the explicit path, forward and gradients, for every
// mask combination and shapes that leave ragged tiles; float64 tightly,
// float32 and bfloat16 within their precision.
func TestMatchesExplicit(t *testing.T) {
	torch.ManualSeed(1)
	shapes := []shape{
		{2, 3, 70, 70, 16, 16},   // ragged query block
		{2, 2, 37, 150, 24, 8},   // L < S, two key tiles, Dv ≠ D
		{1, 2, 130, 45, 8, 20},   // L > S
		{1, 1, 1, 1, 4, 4},       // one position
		{2, 2, 200, 300, 64, 64}, // several blocks and tiles, full register blocks
	}
	masks := []struct {
		name             string
		causal, pad, add bool
		off              int64
	}{
		{"none", false, false, false, 0},
		{"causal", true, false, false, 0},
		{"causal+offset", true, false, false, 3},
		{"pad", false, true, false, 0},
		{"causal+pad", true, true, false, 0},
		{"additive", false, false, true, 0},
		{"all", true, true, true, 0},
	}
	for _, dc := range []struct {
		dt       torch.DType
		fwd, grd float64 // relative to the largest magnitude
	}{
		{torch.Float64, 1e-12, 1e-11},
		{torch.Float32, 2e-5, 5e-5},
		{torch.BFloat16, 2e-2, 4e-2},
	} {
		for _, sh := range shapes {
			for _, mc := range masks {
				name := dc.dt.String() + "/" + mc.name
				q, k, v, g, kpm, am := inputs(sh, dc.dt)
				o := Opts{Causal: mc.causal, CausalOffset: mc.off}
				if mc.pad {
					o.KeyPaddingMask = kpm
				}
				if mc.add {
					o.AttnMask = am
				}
				// The reference in float64 from the same (rounded) inputs.
				q64 := q.Detach().ToDType(torch.Float64).SetRequiresGrad(true)
				k64 := k.Detach().ToDType(torch.Float64).SetRequiresGrad(true)
				v64 := v.Detach().ToDType(torch.Float64).SetRequiresGrad(true)
				ref := explicit(q64, k64, v64, o, nil)
				rg := grads(ref, g.ToDType(torch.Float64), q64, k64, v64)

				out, lse := Attention(q, k, v, o)
				require.Equal(t, []int64{sh.n, sh.h, sh.l, sh.dv}, out.Shape(), name)
				require.Equal(t, []int64{sh.n, sh.h, sh.l}, lse.Shape(), name)
				require.Equal(t, dc.dt, out.DType(), name)
				fg := grads(out, g, q, k, v)
				scale := maxAbs(ref)
				require.LessOrEqual(t, maxDiff(out, ref), dc.fwd*math.Max(scale, 1), "%s %v forward", name, sh)
				for i, n := range []string{"q", "k", "v"} {
					require.Equal(t, dc.dt, fg[i].DType(), name)
					require.LessOrEqual(t, maxDiff(fg[i], rg[i]), dc.grd*math.Max(maxAbs(rg[i]), 1), "%s %v grad %s", name, sh, n)
				}
			}
		}
	}
}

// Attention mask forms: per head (H, L, S) and (N, H, L, S), float or bool.
func TestAttnMaskForms(t *testing.T) {
	torch.ManualSeed(2)
	sh := shape{2, 3, 20, 25, 8, 8}
	q, k, v, _, _, _ := inputs(sh, torch.Float64)
	for _, am := range []*torch.Tensor{
		torch.Randn([]int64{3, 20, 25}, torch.Float64),
		torch.Randn([]int64{2, 3, 20, 25}, torch.Float64),
		torch.Randn([]int64{2, 1, 20, 25}, torch.Float64),
		torch.Rand([]int64{20, 25}).GtScalar(0.7),
	} {
		o := Opts{AttnMask: am}
		out, _ := Attention(q, k, v, o)
		require.Less(t, maxDiff(out, explicit(q, k, v, o, nil)), 1e-12, "mask %v", am.Shape())
	}
}

// Dropout: the kept fraction is 1−p, the same seed gives the same output,
// and output and gradients equal the explicit path with the same Philox mask.
func TestDropout(t *testing.T) {
	torch.ManualSeed(3)
	sh := shape{2, 2, 50, 140, 16, 16}
	q, k, v, g, kpm, _ := inputs(sh, torch.Float64)
	const p = 0.3
	o := Opts{Dropout: p, Seed: 12345, KeyPaddingMask: kpm, Causal: true, CausalOffset: 90}
	keep := keepScale(12345, p, sh.n, sh.h, sh.l, sh.s)
	rate := keep.GtScalar(0).ToDType(torch.Float64).Mean().Item()
	require.InDelta(t, 1-p, rate, 0.01)

	q64 := q.Detach().SetRequiresGrad(true)
	k64 := k.Detach().SetRequiresGrad(true)
	v64 := v.Detach().SetRequiresGrad(true)
	ref := explicit(q64, k64, v64, o, keep)
	rg := grads(ref, g, q64, k64, v64)
	out, _ := Attention(q, k, v, o)
	fg := grads(out, g, q, k, v)
	require.Less(t, maxDiff(out, ref), 1e-12)
	for i := range fg {
		require.Less(t, maxDiff(fg[i], rg[i]), 1e-11, "grad %d", i)
	}

	// Seeds drawn from the default generator: repeatable under ManualSeed,
	// different from call to call.
	o.Seed = 0
	torch.ManualSeed(7)
	a, _ := Attention(q, k, v, o)
	b, _ := Attention(q, k, v, o)
	torch.ManualSeed(7)
	c, _ := Attention(q, k, v, o)
	require.Equal(t, 0.0, maxDiff(a, c))
	require.Greater(t, maxDiff(a, b), 1e-3)
}

// Finite differences at float64 with dropout (fixed seed): the gradients
// are those of the function the forward computes.
func TestFiniteDifferences(t *testing.T) {
	torch.ManualSeed(4)
	sh := shape{1, 2, 5, 7, 3, 4}
	q, k, v, g, kpm, am := inputs(sh, torch.Float64)
	o := Opts{Dropout: 0.25, Seed: 99, KeyPaddingMask: kpm, AttnMask: am, Causal: true, CausalOffset: 2}
	out, _ := Attention(q, k, v, o)
	fg := grads(out, g, q, k, v)
	loss := func() float64 {
		var r float64
		torch.NoGrad(func() {
			o2, _ := Attention(q, k, v, o)
			r = o2.Mul(g).Sum().Item()
		})
		return r
	}
	const h = 1e-6
	for i, x := range []*torch.Tensor{q, k, v} {
		num := make([]float64, 0)
		flat := x.Detach() // shares storage
		vals := flat.Contiguous().Float64s()
		for j := range vals {
			set := func(val float64) {
				vals2 := append([]float64(nil), vals...)
				vals2[j] = val
				torch.NoGrad(func() { flat.CopyFrom(torch.FromSlice(vals2, flat.Shape())) })
			}
			set(vals[j] + h)
			up := loss()
			set(vals[j] - h)
			down := loss()
			set(vals[j])
			num = append(num, (up-down)/(2*h))
		}
		got := fg[i].Contiguous().Float64s()
		for j := range num {
			require.InDelta(t, num[j], got[j], 1e-6, "input %d element %d", i, j)
		}
	}
}

// Bad shapes, dtypes and masks panic with *torch.Error.
func TestErrors(t *testing.T) {
	q := torch.Randn([]int64{1, 2, 4, 8})
	k := torch.Randn([]int64{1, 2, 5, 8})
	for _, tc := range []struct {
		name    string
		q, k, v *torch.Tensor
		o       Opts
		msg     string
	}{
		{"3-d", q.Select(0, 0), k, k, Opts{}, "must be (batch, heads, length, dim)"},
		{"heads", q, torch.Randn([]int64{1, 3, 5, 8}), torch.Randn([]int64{1, 3, 5, 8}), Opts{}, "k must be"},
		{"v length", q, k, torch.Randn([]int64{1, 2, 6, 8}), Opts{}, "v must be"},
		{"int", q.ToDType(torch.Int64), k.ToDType(torch.Int64), k.ToDType(torch.Int64), Opts{}, "float64, float32 or bfloat16"},
		{"mixed", q, k.ToDType(torch.Float64), k, Opts{}, "share a dtype"},
		{"half", q.ToDType(torch.Float16), k.ToDType(torch.Float16), k.ToDType(torch.Float16), Opts{}, "float64, float32 or bfloat16"},
		{"pad", q, k, k, Opts{KeyPaddingMask: torch.Zeros([]int64{1, 4}, torch.Bool)}, "key_padding_mask must be"},
		{"mask", q, k, k, Opts{AttnMask: torch.Zeros([]int64{4, 4})}, "attn_mask must broadcast"},
		{"mask heads", q, k, k, Opts{AttnMask: torch.Zeros([]int64{3, 4, 5})}, "attn_mask must broadcast"},
		{"dropout", q, k, k, Opts{Dropout: 1}, "dropout must be in [0, 1)"},
	} {
		err := torch.Try(func() { Attention(tc.q, tc.k, tc.v, tc.o) })
		var te *torch.Error
		require.ErrorAs(t, err, &te, tc.name)
		require.Contains(t, te.Msg, tc.msg, tc.name)
	}
}

// A row that sees no key gets output 0 and gradient 0, not NaN.
func TestEmptyRow(t *testing.T) {
	q := torch.Randn([]int64{1, 1, 3, 4}).SetRequiresGrad(true)
	k := torch.Randn([]int64{1, 1, 3, 4}).SetRequiresGrad(true)
	v := torch.Randn([]int64{1, 1, 3, 4}).SetRequiresGrad(true)
	out, lse := Attention(q, k, v, Opts{Causal: true, CausalOffset: -1})
	require.Equal(t, 0.0, maxAbs(out.Select(2, 0)))
	require.True(t, math.IsInf(lse.Select(2, 0).Item(), -1))
	out.Sum().Backward()
	for _, x := range []*torch.Tensor{q, k, v} {
		require.False(t, math.IsNaN(x.Grad().Sum().Item()))
	}
}

func TestCheck(t *testing.T) {
	s, err := Check()
	require.NoError(t, err)
	require.Contains(t, s, "torchfit_nn::attention")
}

// BenchmarkCore times forward and backward of the kernel alone against
// the explicit ops at one ViT-like head shape (12 heads of 64, batch 1,
// float32): TORCHFIT_ATTN_L sets the length (default 1024).
func BenchmarkCore(b *testing.B) {
	l := int64(1024)
	if s := os.Getenv("TORCHFIT_ATTN_L"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(b, err)
		l = v
	}
	sh := shape{1, 12, l, l, 64, 64}
	for _, path := range []string{"fused", "explicit"} {
		b.Run(path, func(b *testing.B) {
			torch.ManualSeed(5)
			q, k, v, g, _, _ := inputs(sh, torch.Float32)
			step := func() {
				torch.Tidy(func() {
					var out *torch.Tensor
					if path == "fused" {
						out, _ = Attention(q, k, v, Opts{})
					} else {
						out = explicit(q, k, v, Opts{}, nil)
					}
					out.Mul(g).Sum().Backward()
				})
				torch.ZeroGrad([]*torch.Tensor{q, k, v})
			}
			step()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
		})
	}
}

// Output, log-sum-exp and gradients do not depend on the number of
// threads, bit for bit: forward splits over (batch, head, block of
// queries) and backward over (batch, head), each task written by one
// thread, and the dropout mask is a function of the element's index.
// Until 2026-11-28 this package's parallel_for ran on one thread whatever
// the count (see package parwidth), so the split was never exercised.
func TestThreadsBitwise(t *testing.T) {
	prev := torch.NumThreads()
	defer torch.SetNumThreads(prev)
	torch.ManualSeed(4)
	for _, dt := range []torch.DType{torch.Float32, torch.BFloat16, torch.Float64} {
		// Large enough for the kernel's grain (a thread's least work) to
		// split both passes at 2 and 3 threads: 30 blocks of queries of
		// 1.1 M multiply-adds each, 6 heads of 12 M.
		q, k, v, g, kpm, am := inputs(shape{2, 3, 300, 310, 32, 24}, dt)
		o := Opts{Causal: true, CausalOffset: 20, KeyPaddingMask: kpm, AttnMask: am, Dropout: 0.2, Seed: 99}
		var runs [][]*torch.Tensor
		for _, n := range []int{1, 2, 3} {
			torch.SetNumThreads(n)
			out, lse := Attention(q, k, v, o)
			runs = append(runs, append([]*torch.Tensor{out.Detach(), lse}, grads(out, g, q, k, v)...))
			torch.ZeroGrad([]*torch.Tensor{q, k, v})
		}
		for i, n := range []int{2, 3} {
			for j, name := range []string{"output", "log-sum-exp", "grad q", "grad k", "grad v"} {
				require.True(t, runs[0][j].Equal(runs[i+1][j]), "%s %s: %d threads against 1", dt, name, n)
			}
		}
	}
}
