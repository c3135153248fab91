package torch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// CTCLossOnDevice computes on the CPU what CTCLoss does (mean, zero
// infinity) to the bit, loss and gradient, for float32 and float64
// log-probabilities and int64 or int32 lengths, with one impossible
// target (zeroed) among them, and moves nothing between Go and tensors.
// (TestOps compares it with PyTorch's F.ctc_loss.)
func TestCTCLossOnDeviceMatchesCTCLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dt     DType
		lens   DType
		inputs []int64
	}{
		{"float32", Float32, Int64, []int64{20, 17, 9}},
		{"float64", Float64, Int64, []int64{20, 17, 9}},
		{"int32 lengths", Float32, Int32, []int64{20, 17, 9}},
		{"an impossible target", Float32, Int64, []int64{20, 3, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Tidy(func() {
				ManualSeed(3)
				logits := Randn([]int64{20, 3, 7}, tc.dt)
				targets := FromSlice([]int64{1, 2, 2, 3, 4, 6, 5, 1, 0, 0, 3, 3, 0, 0, 0}, []int64{3, 5})
				il := FromSlice(tc.inputs, nil).ToDType(tc.lens)
				tl := FromSlice([]int64{5, 4, 2}, nil).ToDType(tc.lens)
				run := func(f func(lp *Tensor) *Tensor) (loss, grad []float64) {
					x := logits.Detach().SetRequiresGrad(true)
					l := f(x.LogSoftmax(2))
					l.Backward()
					return l.Float64s(), x.Grad().Float64s()
				}
				wantL, wantG := run(func(lp *Tensor) *Tensor { return CTCLoss(lp, targets, il, tl, 0, ReduceMean, true) })
				var gotL, gotG []float64
				stats := CountCalls(func() {
					gotL, gotG = run(func(lp *Tensor) *Tensor { return CTCLossOnDevice(lp, targets, il, tl) })
				})
				require.Equal(t, wantL, gotL)
				require.Equal(t, wantG, gotG)
				require.NotZero(t, gotL[0])
				transfers := HostTransfers(stats)
				require.Len(t, transfers, 1, "%v", transfers)
				require.EqualValues(t, 2, transfers[0].Calls, "the test's two reads, none of the loss's: %v", transfers)
			})
		})
	}
}

// Bad shapes panic with *Error; half-precision log-probabilities are
// taken in float32.
func TestCTCLossOnDeviceArgs(t *testing.T) {
	Tidy(func() {
		lp := Randn([]int64{6, 2, 4}).LogSoftmax(2)
		tg := FromSlice([]int64{1, 2, 3, 0}, []int64{2, 2})
		il := FromSlice([]int64{6, 6}, nil)
		tl := FromSlice([]int64{2, 1}, nil)
		var e *Error
		require.ErrorAs(t, Try(func() { CTCLossOnDevice(lp.Reshape(12, 4), tg, il, tl) }), &e)
		require.ErrorAs(t, Try(func() { CTCLossOnDevice(lp, tg.Reshape(4), il, tl) }), &e)
		require.ErrorAs(t, Try(func() { CTCLossOnDevice(lp, FromSlice([]int64{1, 2, 3}, []int64{3, 1}), il, tl) }), &e)
		want := CTCLoss(lp, tg, il, tl, 0, ReduceMean, true).Item()
		got := CTCLossOnDevice(lp.ToDType(BFloat16), tg, il, tl)
		require.Equal(t, Float32, got.DType())
		require.InDelta(t, want, got.Item(), 0.05*want)
	})
}

func TestCTCOnDeviceFits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in, tgt []int64
		ok      bool
	}{
		{"fits", []int64{255, 80, 1}, []int64{255, 40, 1}, true},
		{"no sequences", nil, nil, true},
		{"an input of 256 frames", []int64{80, 256}, []int64{10, 10}, false},
		{"a target of 256 labels", []int64{255}, []int64{256}, false},
		{"a target longer than its input", []int64{20, 9}, []int64{5, 10}, false},
		{"lengths of two sizes", []int64{20, 9}, []int64{5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CTCOnDeviceFits(tc.in, tc.tgt)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// packTargets puts each sequence's ids after the previous one's, zeros
// after the last, in int32, with nothing read on the host.
func TestPackTargets(t *testing.T) {
	for _, tc := range []struct {
		name string
		lens []int64
		want []int32
	}{
		{"full and partial", []int64{3, 1, 2}, []int32{1, 2, 3, 4, 7, 8, 0, 0, 0}},
		{"an empty target", []int64{0, 3, 1}, []int32{4, 5, 6, 7, 0, 0, 0, 0, 0}},
		{"all empty", []int64{0, 0, 0}, make([]int32, 9)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Tidy(func() {
				targets := FromSlice([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9}, []int64{3, 3})
				lens := FromSlice(tc.lens, nil)
				var p *Tensor
				stats := CountCalls(func() { p = packTargets(targets, lens) })
				require.Empty(t, HostTransfers(stats))
				require.Equal(t, Int32, p.DType())
				require.Equal(t, tc.want, ToSlice[int32](p))
			})
		})
	}
}

// cuDNN's CTC is called with the arguments its schema takes: on the CPU
// it gets as far as the dispatcher, which has no CPU kernel for it. (On
// CUDA, cudagraph's TestCaptureCTCLoss runs it.)
func TestCudnnCTCCallReachesTheDispatcher(t *testing.T) {
	Tidy(func() {
		lp := Randn([]int64{6, 2, 4}).LogSoftmax(2)
		packed := FromSlice([]int32{1, 2, 3, 0}, nil)
		lens := FromSlice([]int32{6, 6}, nil)
		tl := FromSlice([]int32{2, 1}, nil)
		err := Try(func() { cudnnCTC(lp, packed, lens, tl) })
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Contains(t, e.Msg, "from the 'CPU' backend", "the dispatcher's refusal of the CPU backend, not an argument error: %v", err)
	})
}
