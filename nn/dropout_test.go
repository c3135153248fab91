package nn

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn/internal/dropout"
	"github.com/torchfit/torchfit/torch"
)

// Dropout and ApplyDropout go through the switch: on, the fused operator
// (the same output as calling it directly under the same seed); off,
// ATen's dropout (x.Dropout's output under the same seed). The two draw
// different masks; eval mode and p = 0 give x either way.
func TestDropoutSwitch(t *testing.T) {
	torch.Tidy(func() {
		x := torch.Randn([]int64{4, 50, 32})
		d := NewDropout(0.25)
		run := func(seed uint64, f func() *torch.Tensor) *torch.Tensor {
			torch.ManualSeed(seed)
			return f()
		}
		fusedRef := run(3, func() *torch.Tensor { return torch.CallOp(dropout.Op, "", x, 0.25, true)[0].(*torch.Tensor) })
		atenRef := run(3, func() *torch.Tensor { return x.Dropout(0.25, true) })
		require.False(t, fusedRef.Equal(atenRef), "the fused and ATen masks coincide")
		for _, tc := range []struct {
			fused bool
			want  *torch.Tensor
		}{{true, fusedRef}, {false, atenRef}} {
			t.Run(fmt.Sprintf("fused=%v", tc.fused), func(t *testing.T) {
				prev := SetFusedDropout(tc.fused)
				defer SetFusedDropout(prev)
				require.Equal(t, tc.fused, FusedDropout())
				require.True(t, run(3, func() *torch.Tensor { return d.Forward(x) }).Equal(tc.want), "Dropout")
				require.True(t, run(3, func() *torch.Tensor { return ApplyDropout(x, 0.25, true) }).Equal(tc.want), "ApplyDropout")
				require.True(t, ApplyDropout(x, 0.25, false).Equal(x), "train=false")
				SetTraining(d, false)
				require.True(t, d.Forward(x).Equal(x), "eval mode")
				SetTraining(d, true)
			})
		}
	})
}

// Under activation checkpointing the recomputed forward draws the same
// seed (the RNG snapshot), so gradients through a recomputed fused dropout
// equal those of the plain one.
func TestFusedDropoutUnderRecompute(t *testing.T) {
	torch.Tidy(func() {
		prev := SetFusedDropout(true)
		defer SetFusedDropout(prev)
		l := NewLinear(16, 16, true)
		x := torch.Randn([]int64{8, 16})
		f := func(in []*torch.Tensor) []*torch.Tensor {
			return []*torch.Tensor{ApplyDropout(l.Forward(in[0]).Relu(), 0.5, true)}
		}
		grad := func(checkpoint bool) *torch.Tensor {
			l.Weight.SetGrad(nil)
			torch.ManualSeed(21)
			var y *torch.Tensor
			if checkpoint {
				y = torch.Recompute(f, x)[0]
			} else {
				y = f([]*torch.Tensor{x})[0]
			}
			y.Square().Sum().Backward()
			return l.Weight.Grad().Clone()
		}
		require.True(t, grad(false).Equal(grad(true)))
	})
}

// BenchmarkDropout: forward and backward of one dropout (p = 0.1) on a
// conformer-sized activation, fused and ATen's, float32 and bfloat16, at
// libtorch's default threads; cpu-ns/op is the process's CPU time. Run
// with -count to interleave the variants:
//
//	go test ./nn -run '^$' -bench BenchmarkDropout -count 5
func BenchmarkDropout(b *testing.B) {
	for _, shape := range [][]int64{{8, 80, 768}, {8, 320, 144}} {
		for _, dt := range []torch.DType{torch.Float32, torch.BFloat16} {
			for _, fused := range []bool{true, false} {
				name := fmt.Sprintf("%v/%v/aten", shape, dt)
				if fused {
					name = fmt.Sprintf("%v/%v/fused", shape, dt)
				}
				b.Run(name, func(b *testing.B) {
					defer SetFusedDropout(SetFusedDropout(fused))
					torch.Tidy(func() {
						x := torch.Randn(shape, dt, torch.RequiresGrad)
						g := torch.Randn(shape, dt)
						step := func() {
							torch.Tidy(func() {
								ApplyDropout(x, 0.1, true).BackwardWith(g, false, false)
								x.SetGrad(nil)
							})
						}
						step()
						c0 := cpuNs()
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							step()
						}
						b.StopTimer()
						b.ReportMetric(float64(cpuNs()-c0)/float64(b.N), "cpu-ns/op")
					})
				})
			}
		}
	}
}

// cpuNs is the process's user and system CPU time in nanoseconds.
func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
