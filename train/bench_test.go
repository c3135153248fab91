package train_test

import (
	"testing"
	"time"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// loopBench is one model, optimizer and batch stepped either by
// train.Trainer.Step or by a hand-written loop.
type loopBench struct {
	m     nn.Module
	loss  func(*data.Batch) *torch.Tensor
	opt   nn.Optimizer
	batch *data.Batch
	tr    *train.Trainer
}

// A small step (about a millisecond), so that the loop's own cost shows.
const loopBatch, loopSeq = 64, 2

// tinyModel is one Linear(16, 1): a step of a few tens of microseconds,
// where the loop's own cost is as visible as it gets.
type tinyModel struct {
	nn.Base
	l *nn.Linear
}

func (m *tinyModel) loss(b *data.Batch) *torch.Tensor {
	return torch.MSELoss(m.l.Forward(b.Fields["x"]).MeanDim([]int64{1}, false), b.Fields["y"], torch.ReduceMean)
}

func newLoopBench(b *testing.B, tiny bool) *loopBench {
	torch.ManualSeed(99)
	x := torch.Randn([]int64{loopBatch, loopSeq, 16}).Keep()
	y := x.Matmul(torch.Randn([]int64{16, 1})).Sin().MeanDim([]int64{1}, false).Keep()
	l := &loopBench{batch: &data.Batch{Fields: map[string]*torch.Tensor{"x": x, "y": y}}}
	if tiny {
		m := &tinyModel{}
		m.l = nn.RegisterModule(&m.Base, "l", nn.NewLinear(16, 1, true))
		l.m, l.loss = m, m.loss
	} else {
		m := newRegression(1)
		l.m, l.loss = m, m.loss
	}
	l.opt = nn.NewAdam(nn.Parameters(l.m), nn.AdamDefaults(1e-3))
	var err error
	l.tr, err = train.New(l.m, l.opt, l.loss, train.Config{MicroBatch: loopBatch, Accum: 1, Device: torch.CPU})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func (l *loopBench) free() {
	l.opt.Free()
	nn.Free(l.m)
	for _, t := range l.batch.Fields {
		t.Free()
	}
}

// hand is the loop one writes without the package: forward, backward,
// read the loss, optimizer step, zero the gradients, all in one scope.
func (l *loopBench) hand() float64 {
	var loss float64
	torch.Tidy(func() {
		t := l.loss(l.batch)
		t.Backward()
		loss = t.Item()
		l.opt.Step()
		l.opt.ZeroGrad()
	})
	return loss
}

func (l *loopBench) trainer(b *testing.B) float64 {
	info, err := l.tr.Step(l.batch)
	if err != nil {
		b.Fatal(err)
	}
	return info.Loss
}

// BenchmarkLoopOverhead measures what train.Trainer.Step costs over
// the hand-written loop on the same model (a 16→256→256→1 MLP over 2-step
// sequences, batch 64, Adam: about a millisecond a step): hand and trainer
// give each one's ns/op; interleaved alternates the two step by step (so
// load from elsewhere hits both alike) and reports the overhead in percent
// (target: ≤ 2). tiny-interleaved does the same on a single Linear(16, 1),
// whose step is short enough for the loop's own cost to show in
// nanoseconds (overhead-ns/step).
func BenchmarkLoopOverhead(b *testing.B) {
	b.Run("hand", func(b *testing.B) {
		l := newLoopBench(b, false)
		defer l.free()
		l.hand()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			l.hand()
		}
	})
	b.Run("trainer", func(b *testing.B) {
		l := newLoopBench(b, false)
		defer l.free()
		l.trainer(b)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			l.trainer(b)
		}
	})
	b.Run("interleaved", func(b *testing.B) { interleaved(b, false) })
	b.Run("tiny-interleaved", func(b *testing.B) { interleaved(b, true) })
}

func interleaved(b *testing.B, tiny bool) {
	l := newLoopBench(b, tiny)
	defer l.free()
	l.hand()
	l.trainer(b)
	var hand, tr time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		l.hand()
		t1 := time.Now()
		l.trainer(b)
		t2 := time.Now()
		hand += t1.Sub(t0)
		tr += t2.Sub(t1)
	}
	b.ReportMetric(float64(hand.Nanoseconds())/float64(b.N), "hand-ns/step")
	b.ReportMetric(float64(tr.Nanoseconds())/float64(b.N), "trainer-ns/step")
	b.ReportMetric(100*(float64(tr)/float64(hand)-1), "overhead-%")
	b.ReportMetric(float64((tr-hand).Nanoseconds())/float64(b.N), "overhead-ns/step")
}
