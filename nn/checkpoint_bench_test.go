package nn

import (
	"testing"

	"github.com/torchfit/torchfit/torch"
)

// The model of BenchmarkCheckpointStack and scripts/bench_checkpoint.py:
// an input Linear(d, d), then depth residual MLP blocks
// x + fc2(gelu(fc1(x))) with fc1: d→4d, fc2: 4d→d, trained with Adam on
// mean(y²) over tokens×d inputs. Activations (≈ 9·tokens·d floats a block)
// dominate the weights by an order of magnitude.
const (
	ckptDepth  = 12
	ckptDim    = 128
	ckptTokens = 2048
)

type ckptBlock struct {
	Base
	Fc1, Fc2 *Linear
}

// Forward releases its intermediates when it returns (TidyTensor), as
// PyTorch drops a temporary once nothing refers to it: without the scope,
// fc2's output would stay allocated until the enclosing Tidy ends.
func (b *ckptBlock) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		return x.Add(b.Fc2.Forward(b.Fc1.Forward(x).Gelu()))
	})
}

type ckptStack struct {
	Base
	In     *Linear
	Blocks *ModuleList[*ckptBlock]
}

func newCkptStack(depth int, d int64) *ckptStack {
	torch.ManualSeed(0)
	m := &ckptStack{}
	m.In = RegisterModule(&m.Base, "inp", NewLinear(d, d, true))
	m.Blocks = RegisterModule(&m.Base, "blocks", NewModuleList[*ckptBlock]())
	for k := 0; k < depth; k++ {
		b := &ckptBlock{}
		b.Fc1 = RegisterModule(&b.Base, "fc1", NewLinear(d, 4*d, true))
		b.Fc2 = RegisterModule(&b.Base, "fc2", NewLinear(4*d, d, true))
		m.Blocks.Append(b)
	}
	return m
}

// Forward runs the stack, each block under torch.Recompute when asked.
func (m *ckptStack) Forward(x *torch.Tensor, checkpoint bool) *torch.Tensor {
	h := m.In.Forward(x)
	for _, b := range m.Blocks.Items {
		var next *torch.Tensor
		if checkpoint {
			next = torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{b.Forward(in[0])}
			}, h)[0]
		} else {
			next = b.Forward(h)
		}
		// The block's autograd node holds what backward needs; releasing
		// the Go reference now lets backward free each block's tensors as
		// soon as it is done with them (as Python's reference counting
		// does), instead of when the step's scope ends.
		h.Free()
		h = next
	}
	return h
}

func BenchmarkCheckpointStack(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchCkptStack(b, false, false) })
	b.Run("checkpoint", func(b *testing.B) { benchCkptStack(b, true, false) })
	// The forward under bf16 autocast (the loss and backward after it).
	b.Run("plain_bf16", func(b *testing.B) { benchCkptStack(b, false, true) })
	b.Run("checkpoint_bf16", func(b *testing.B) { benchCkptStack(b, true, true) })
}

func benchCkptStack(b *testing.B, checkpoint, bf16 bool) {
	m := newCkptStack(ckptDepth, ckptDim)
	defer Free(m)
	opt := NewAdam(Parameters(m), AdamDefaults(1e-3))
	defer opt.Free()
	x := torch.Randn([]int64{ckptTokens, ckptDim}).Keep()
	defer x.Free()
	step := func() (peak int64) {
		base := torch.MustMemoryStats(torch.CPU).Allocated
		if err := torch.ResetPeakMemory(torch.CPU); err != nil {
			b.Fatal(err)
		}
		torch.Tidy(func() {
			// Release each Go reference once its op has run (as the Python
			// side's temporaries are): autograd keeps what backward needs.
			var out *torch.Tensor
			if bf16 {
				torch.Autocast(torch.CPU, torch.BFloat16, func() { out = m.Forward(x, checkpoint) })
				f := out.ToDType(torch.Float32)
				out.Free()
				out = f
			} else {
				out = m.Forward(x, checkpoint)
			}
			sq := out.Square()
			out.Free()
			loss := sq.Mean()
			sq.Free()
			loss.Backward()
		})
		opt.Step()
		opt.ZeroGrad()
		return torch.MustMemoryStats(torch.CPU).PeakAllocated - base
	}
	step() // Adam's state exists from here on: steady state
	var peak int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		peak = max(peak, step())
	}
	b.StopTimer()
	b.ReportMetric(float64(peak), "peak-bytes")
	b.ReportMetric(float64(torch.NumThreads()), "threads")
	b.ReportMetric(float64(ParamBytes(m)), "weight-bytes")
}
