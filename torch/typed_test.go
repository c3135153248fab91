package torch

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// TestTypedCalls: the operators of tensors, optional tensors and Scalars
// that return one tensor are called through the dispatcher's typed API
// (ops.cc's fast path); every other operator, and a call whose arguments
// do not fit, is boxed. Both paths give bit-equal values, dtypes and
// gradients; the fast path is forced off (capi.SetTypedCalls, as
// TORCHFIT_OPS=boxed does) for the reference.
func TestTypedCalls(t *testing.T) {
	runtime.LockOSThread() // capi.TypedHere counts this thread's calls
	defer runtime.UnlockOSThread()
	for _, tc := range []struct {
		op    *opDef
		typed bool
	}{
		{opAddTensor, true}, {opAddScalar, true}, {opMulScalar, true}, {opMm, true},
		{opLinear, true}, {opAddmm, true}, {opRelu, true}, {opAdd_Tensor, true}, {opAdd_Scalar, true},
		{opSumDimIntList, false}, // an int list
	} {
		require.Equal(t, tc.typed, capi.Typed(tc.op.resolve()), "%s.%s", tc.op.name, tc.op.overload)
	}

	ManualSeed(3)
	x, y := Randn([]int64{3, 4}), Randn([]int64{3, 4})
	w, b, m := Randn([]int64{5, 4}), Randn([]int64{5}), Randn([]int64{4, 5})
	n := Full([]int64{3}, 7, Int64)
	for _, tt := range []*Tensor{x, y, w, b, m, n} {
		defer tt.Free()
	}
	for _, tc := range []struct {
		name  string
		typed uint64 // typed calls the case makes (with the fast path on)
		f     func() *Tensor
	}{
		{"add", 1, func() *Tensor { return x.Add(y) }},
		{"add alpha", 1, func() *Tensor { return x.AddScaled(y, 0.25) }},
		{"add scalar (default alpha)", 1, func() *Tensor { return x.AddScalar(1.5) }},
		{"int tensor, int scalar keeps int64", 1, func() *Tensor { return n.MulScalar(3) }},
		{"int tensor, float scalar", 1, func() *Tensor { return n.MulScalar(0.5) }},
		{"linear with bias", 1, func() *Tensor { return Linear(x, w, b) }},
		{"linear without bias (None)", 1, func() *Tensor { return Linear(x, w, nil) }},
		{"addmm beta alpha", 2, func() *Tensor { return x.Mm(m).Addmm(x, m, 0.5, 2) }},
		{"in place returns self", 2, func() *Tensor { z := x.Clone(); z.AddIn(y, 3); return z.AddScalarIn(1) }},
		{"boxed: sum over dims", 0, func() *Tensor { return x.SumDim([]int64{1}, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(typed bool) (*Tensor, uint64) {
				defer capi.SetTypedCalls(capi.SetTypedCalls(typed))
				before := capi.TypedHere()
				r := tc.f()
				return r, capi.TypedHere() - before
			}
			boxed, nb := run(false)
			defer boxed.Free()
			typed, nt := run(true)
			defer typed.Free()
			require.Zero(t, nb, "the fast path is off")
			require.Equal(t, tc.typed, nt, "typed calls")
			require.Equal(t, boxed.DType(), typed.DType())
			require.Equal(t, boxed.Shape(), typed.Shape())
			require.True(t, boxed.Equal(typed), "bit-equal values")
		})
	}

	// Gradients through typed calls equal the boxed ones.
	grads := func(typed bool) []*Tensor {
		defer capi.SetTypedCalls(capi.SetTypedCalls(typed))
		wg, bg := w.Clone().SetRequiresGrad(true), b.Clone().SetRequiresGrad(true)
		Linear(x, wg, bg).Relu().MulScalar(2).AddScalar(1).Mm(w).Sum().Backward()
		return []*Tensor{wg.Grad(), bg.Grad()}
	}
	gb, gt := grads(false), grads(true)
	for k := range gb {
		require.True(t, gb[k].Equal(gt[k]), "gradient %d", k)
	}
}

// TestTypedCallsEnv: TORCHFIT_OPS=boxed starts a process with the fast
// path off (the helper below runs in a child with it set).
func TestTypedCallsEnv(t *testing.T) {
	if os.Getenv("TORCHFIT_TYPED_HELPER") != "" {
		runtime.LockOSThread()
		x := Ones([]int64{2})
		before := capi.TypedHere()
		x.Add(x).Free()
		fmt.Printf("typed calls %d, was on %v\n", capi.TypedHere()-before, capi.SetTypedCalls(true))
		return
	}
	for _, tc := range []struct{ env, want string }{
		{"TORCHFIT_OPS=boxed", "typed calls 0, was on false"},
		{"TORCHFIT_OPS=", "typed calls 1, was on true"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestTypedCallsEnv$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TORCHFIT_TYPED_HELPER=1", tc.env)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		require.Contains(t, string(out), tc.want, tc.env)
	}
}
