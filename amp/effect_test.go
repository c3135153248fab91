package amp_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
)

// mlp is a 4-layer perceptron trained by plain SGD, with or without bf16 autocast.
type mlp struct{ ws []*torch.Tensor }

func newMLP(width int64) *mlp {
	torch.ManualSeed(3)
	m := &mlp{}
	dims := []int64{64, width, width, width, 10}
	for k := 0; k+1 < len(dims); k++ {
		w := torch.Randn([]int64{dims[k+1], dims[k]}).MulScalar(1.4 / math.Sqrt(float64(dims[k]))).Keep().SetRequiresGrad(true)
		m.ws = append(m.ws, w)
	}
	return m
}

func (m *mlp) free() {
	for _, w := range m.ws {
		w.Free()
	}
}

// step runs one training step and returns the loss and the peak bytes
// allocated above the pre-step level.
func (m *mlp) step(x, y *torch.Tensor, bf16 bool) (loss float64, peak int64) {
	base := torch.MustMemoryStats(torch.CPU).Allocated
	torch.ResetPeakMemory(torch.CPU)
	torch.Tidy(func() {
		var logits *torch.Tensor
		forward := func() {
			h := x
			for k, w := range m.ws {
				h = torch.Linear(h, w, nil)
				if k+1 < len(m.ws) {
					h = h.Relu()
				}
			}
			logits = h
		}
		if bf16 {
			amp.Autocast(torch.CPU, torch.BFloat16, forward)
		} else {
			forward()
		}
		l := torch.CrossEntropy(logits.ToDType(torch.Float32), y, nil, torch.ReduceMean, -100, 0)
		l.Backward()
		loss = l.Item()
		torch.NoGrad(func() {
			for _, w := range m.ws {
				g := w.Grad()
				w.AddIn(g, -0.5)
				w.SetGrad(nil)
			}
		})
	})
	return loss, torch.MustMemoryStats(torch.CPU).PeakAllocated - base
}

func TestBFloat16AutocastSavesActivationMemory(t *testing.T) {
	torch.ManualSeed(5)
	x := torch.Randn([]int64{512, 64}).Keep()
	y := torch.Randn([]int64{64, 10}).Keep() // labels from a fixed projection: learnable
	y.Assign(x.Matmul(y).Argmax(1, false).Keep())
	defer x.Free()
	defer y.Free()
	const steps = 12
	run := func(bf16 bool) (float64, int64) {
		m := newMLP(256)
		defer m.free()
		var loss float64
		var peak int64
		for i := 0; i < steps; i++ {
			l, p := m.step(x, y, bf16)
			loss, peak = l, max(peak, p)
		}
		return loss, peak
	}
	l32, p32 := run(false)
	l16, p16 := run(true)
	t.Logf("peak step memory: float32 %s, bf16 autocast %s (%.0f%%); loss after %d steps: %.4f vs %.4f",
		torch.FormatBytes(p32), torch.FormatBytes(p16), 100*float64(p16)/float64(p32), steps, l32, l16)
	// Below three quarters here and with 1.13; 88% on the GPU machine's
	// Sapphire Rapids host (AMX) with libtorch 2.11, whose oneDNN reorders
	// bf16 weights into AMX's blocked layout for each matmul (transient
	// copies the counter sees): bf16 still saves, less.
	require.Less(t, p16, p32, "bf16 activations take less memory")
	require.Less(t, l32, 2.0, "the float32 run learns (chance is ln 10 = 2.30)")
	require.InDelta(t, l32, l16, 0.05*l32, "bf16 training reaches nearly the same loss")
}

func BenchmarkStepFloat32(b *testing.B) { benchStep(b, false) }
func BenchmarkStepBF16(b *testing.B)    { benchStep(b, true) }

func benchStep(b *testing.B, bf16 bool) {
	x := torch.Randn([]int64{512, 64}).Keep()
	y := torch.Randint(0, 10, []int64{512}).Keep()
	m := newMLP(512)
	defer m.free()
	var peak int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, p := m.step(x, y, bf16)
		peak = max(peak, p)
	}
	b.ReportMetric(float64(peak), "peak-bytes")
}
