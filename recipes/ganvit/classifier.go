package ganvit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// Images turns spectrograms (N, 1, Mels, Frames) into the ViT's input
// (N, 3, size, size): bilinear resize, the one channel repeated three
// times (the seed's 3 × 224 × 224).
func Images(spec *torch.Tensor, size int64) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		x := torch.Interpolate(spec, []int64{size, size}, "bilinear", false)
		return x.Expand(x.Size(0), 3, size, size)
	})
}

// ClassifierOptions configure a classifier trainer.
type ClassifierOptions struct {
	Device     torch.Device
	Precision  amp.Precision
	Scaler     *amp.GradScaler // nil: one enabled for float16
	MicroBatch int             // micro-batch (BATCH_SIZE)
	LR         float64         // AdamW, weight decay 0.01
	ClipNorm   float64
	Warmup     int // warmup steps of a warmup-cosine schedule
	TotalSteps int // the schedule's length (0: constant after warmup)
	NoOOMAdapt bool
	Events     train.Sink
}

// Classifier trains a ViT on spectrograms: an Engine (micro-batches,
// accumulation, autocast, OOM halving) and an Optim (unscale, clip, AdamW
// step, schedule). The optimizer holds every parameter, but state is made
// on a parameter's first gradient: frozen blocks (no gradients) hold none.
type Classifier struct {
	V      *ViT
	Opt    *nn.Adam
	Sched  *nn.Schedule
	Optim  *train.Optim
	Eng    *train.Engine
	Scaler *amp.GradScaler
	Steps  int
	opt    ClassifierOptions
}

// NewClassifier moves v to the device and builds its optimizer.
func NewClassifier(v *ViT, o ClassifierOptions) (*Classifier, error) {
	if o.Precision == "" {
		o.Precision = amp.FP32
	}
	if o.LR <= 0 {
		o.LR = 3e-4
	}
	c := &Classifier{V: v, opt: o, Scaler: o.Scaler}
	if c.Scaler == nil {
		c.Scaler = amp.NewGradScaler(o.Device, amp.ScalerOptions{Disabled: o.Precision != amp.FP16})
	}
	var err error
	c.Eng, err = train.NewEngine(train.EngineConfig{MicroBatch: o.MicroBatch, Device: o.Device, Precision: o.Precision, NoOOMAdapt: o.NoOOMAdapt, Events: o.Events})
	if err != nil {
		return nil, err
	}
	if err := torch.Try(func() { nn.To(v, o.Device, torch.Float32) }); err != nil {
		return nil, err
	}
	c.Opt = nn.NewAdamW(nn.Parameters(v), nn.AdamWDefaults(o.LR))
	fn := nn.WarmupLR(o.Warmup)
	if o.TotalSteps > 0 {
		fn = nn.WarmupCosineLR(o.Warmup, o.TotalSteps, 0.05)
	}
	c.Sched = nn.NewSchedule(c.Opt, fn)
	c.Optim = &train.Optim{Opt: c.Opt, Sched: c.Sched, ClipNorm: o.ClipNorm, Scaler: c.Scaler, Precision: o.Precision}
	return c, nil
}

// Free releases the optimizer's and the schedule's state (not the model).
func (c *Classifier) Free() {
	c.Opt.Free()
	c.Sched.Free()
}

// Loss is the cross-entropy of a micro-batch (fields spec, label).
func (c *Classifier) Loss(mb *data.Batch) *torch.Tensor { return ClassifierLoss(c.V, mb) }

// ClassifierLoss is v's cross-entropy on a micro-batch (fields spec,
// label), as the classifier stage trains it.
func ClassifierLoss(v *ViT, mb *data.Batch) *torch.Tensor {
	x := Images(mb.Field("spec"), v.Cfg.Image)
	logits := v.Forward(x)
	x.Free()            // autograd keeps what it needs (under autocast a bf16 copy); the float32 image goes now, as in Python
	defer logits.Free() // the loss keeps its log-softmax, not the logits
	return torch.CrossEntropy(logits, mb.Field("label"), nil, torch.ReduceMean, -100, 0)
}

// Step trains on one effective batch.
func (c *Classifier) Step(b *data.Batch) (train.StepInfo, error) {
	start := time.Now()
	info := train.StepInfo{Step: c.Steps + 1, LR: c.Optim.LR()}
	w, err := c.Eng.Backward(b, train.Pass{Loss: c.Loss, Scaler: c.Scaler, Reset: c.Optim.Abandon, Step: info.Step})
	if err != nil {
		c.Optim.Abandon()
		return info, err
	}
	var os train.OptimStep
	if err := torch.TidyErr(func() (err error) { os, err = c.Optim.Step(); return err }); err != nil {
		c.Optim.Abandon()
		return info, err
	}
	c.Scaler.Update()
	c.Optim.Finish()
	c.Steps++
	info.Loss, info.Count, info.Samples, info.MicroBatch, info.Micro, info.OOMRetries = w.Loss, w.Count, w.Samples, w.MicroBatch, w.Micro, w.OOMRetries
	info.GradNorm, info.Skipped, info.Duration = os.GradNorm, os.Skipped, time.Since(start)
	info.Memory, _ = torch.MemoryStats(c.opt.Device)
	return info, nil
}

// stateBytes is the optimizer state's size: its per-parameter buffers
// (Adam's moments), without the 4-byte step counters.
func stateBytes(o nn.Optimizer) int64 {
	var n int64
	for _, s := range o.State() {
		if strings.HasPrefix(s.Name, "state.") && !strings.HasSuffix(s.Name, ".step") {
			n += s.T.NBytes()
		}
	}
	return n
}

// Accuracy is a classifier's accuracy on spectrograms: overall and per
// genre, with the predictions.
type Accuracy struct {
	N, Correct int
	PerClass   []ClassAccuracy
	Pred       []int64
}

// ClassAccuracy is one genre's share.
type ClassAccuracy struct{ N, Correct int }

// Value is Correct / N.
func (a Accuracy) Value() float64 {
	if a.N == 0 {
		return 0
	}
	return float64(a.Correct) / float64(a.N)
}

// Predict classifies spectrograms in host memory, batch at a time on dev
// (eval mode, no-grad, autocast for prec).
func Predict(ctx context.Context, v *ViT, s *Specs, dev torch.Device, prec amp.Precision, batch int) (Accuracy, error) {
	acc := Accuracy{PerClass: make([]ClassAccuracy, v.Cfg.Classes)}
	ld, err := Loader(s, nil, dev, batch, false, 0, 0)
	if err != nil {
		return acc, err
	}
	defer ld.Close()
	was := v.Training()
	nn.SetTraining(v, false)
	defer nn.SetTraining(v, was)
	for b, err := range ld.Epoch(ctx) {
		if err != nil {
			return acc, err
		}
		var pred, labels []int64
		err := torch.Try(func() {
			torch.NoGrad(func() {
				torch.Tidy(func() {
					var logits *torch.Tensor
					run := func() { logits = v.Forward(Images(b.Field("spec").ToDevice(dev), v.Cfg.Image)) }
					if prec != amp.FP32 && prec != "" {
						amp.Autocast(dev, prec.DType(), run)
					} else {
						run()
					}
					pred = logits.Argmax(1, false).ToDevice(torch.CPU).Int64s()
					labels = b.Field("label").ToDevice(torch.CPU).Int64s()
				})
			})
		})
		b.Free()
		if err != nil {
			return acc, err
		}
		for i, p := range pred {
			y := labels[i]
			if y < 0 || y >= int64(len(acc.PerClass)) {
				return acc, fmt.Errorf("label %d outside the classifier's %d classes", y, len(acc.PerClass))
			}
			acc.N++
			acc.PerClass[y].N++
			if p == y {
				acc.Correct++
				acc.PerClass[y].Correct++
			}
		}
		acc.Pred = append(acc.Pred, pred...)
	}
	return acc, nil
}
