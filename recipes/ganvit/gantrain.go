package ganvit

import (
	"fmt"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// GANOptions configure a GAN trainer.
type GANOptions struct {
	Device    torch.Device
	Precision amp.Precision
	// Scaler is the GradScaler both networks share (per-optimizer state;
	// one Update per iteration). nil: one is made, enabled for float16.
	Scaler *amp.GradScaler
	// MicroD and MicroG are each network's micro-batch: a window of the
	// effective batch is split into micro-batches of this size, whose
	// gradients accumulate before the network's optimizer steps.
	MicroD, MicroG int
	LR             float64 // both optimizers (Adam, betas 0.5, 0.999)
	ClipD, ClipG   float64 // gradient clipping per network (0: off)
	NoOOMAdapt     bool
	Events         train.Sink
}

// GAN trains a generator and a discriminator with the core's parts: an
// Engine and an Optim per network (each accumulating its own gradients
// over its own micro-batches, halving its micro-batch on out-of-memory
// alone), and one GradScaler with per-optimizer state.
//
// An iteration on an effective batch (spec, cond, label on the CPU or the
// device, and z drawn here):
//
//	D: accumulate 0.5·(BCE(D(x, c, y), 1) + BCE(D(G(z, c, y), c, y), 0)), G under no-grad; unscale, clip, step
//	G: accumulate BCE(D(G(z, c, y), c, y), 1), D's parameters frozen (no gradients); unscale, clip, step
//	scaler update once; both optimizers' gradients set to none.
type GAN struct {
	G          *Generator
	D          *Discriminator
	GOpt, DOpt *nn.Adam
	GStep      *train.Optim
	DStep      *train.Optim
	GEng, DEng *train.Engine
	Scaler     *amp.GradScaler
	Steps      int
	opt        GANOptions
}

// NewGAN moves g and d to the device and builds their optimizers.
func NewGAN(g *Generator, d *Discriminator, o GANOptions) (*GAN, error) {
	if o.Precision == "" {
		o.Precision = amp.FP32
	}
	if o.LR <= 0 {
		o.LR = 2e-4
	}
	t := &GAN{G: g, D: d, opt: o, Scaler: o.Scaler}
	if t.Scaler == nil {
		t.Scaler = amp.NewGradScaler(o.Device, amp.ScalerOptions{Disabled: o.Precision != amp.FP16})
	}
	var err error
	for _, e := range []struct {
		eng   **train.Engine
		micro int
	}{{&t.DEng, o.MicroD}, {&t.GEng, o.MicroG}} {
		*e.eng, err = train.NewEngine(train.EngineConfig{MicroBatch: e.micro, Device: o.Device, Precision: o.Precision, NoOOMAdapt: o.NoOOMAdapt, Events: o.Events})
		if err != nil {
			return nil, err
		}
	}
	err = torch.Try(func() {
		nn.To(g, o.Device, torch.Float32)
		nn.To(d, o.Device, torch.Float32)
	})
	if err != nil {
		return nil, err
	}
	cfg := nn.AdamConfig{LR: o.LR, Beta1: 0.5, Beta2: 0.999, Eps: 1e-8}
	t.GOpt, t.DOpt = nn.NewAdam(nn.Parameters(g), cfg), nn.NewAdam(nn.Parameters(d), cfg)
	t.GStep = &train.Optim{Opt: t.GOpt, ClipNorm: o.ClipG, Scaler: t.Scaler, Precision: o.Precision}
	t.DStep = &train.Optim{Opt: t.DOpt, ClipNorm: o.ClipD, Scaler: t.Scaler, Precision: o.Precision}
	return t, nil
}

// Free releases the optimizers' state (not the networks).
func (t *GAN) Free() {
	t.GOpt.Free()
	t.DOpt.Free()
}

// GANStep is one iteration.
type GANStep struct {
	Step               int
	DLoss, GLoss       float64
	DSkipped, GSkipped bool
	DNorm, GNorm       float64
	DMicro, GMicro     int // micro-batch sizes used
	Samples            int
	Duration           time.Duration
}

// bce frees its target once the loss is built, as Python's temporary
// goes: autograd keeps what backward needs.
func bce(logits *torch.Tensor, target float64) *torch.Tensor {
	y := torch.FullLike(logits, target)
	defer y.Free()
	return torch.BCEWithLogits(logits, y, nil, nil, torch.ReduceMean)
}

// Step runs one iteration on b (fields spec, cond, label; b stays the
// caller's). z is drawn from the global generator on the CPU, one row per
// sample, before any micro-batch runs: a window redone after
// out-of-memory sees the same noise. A batch with a field z (N, latent)
// brings its own noise instead, and none is drawn.
func (t *GAN) Step(b *data.Batch) (GANStep, error) {
	start := time.Now()
	n := b.Size()
	r := GANStep{Step: t.Steps + 1, Samples: n}
	wb := b
	if b.Fields["z"] == nil {
		var z *torch.Tensor
		if err := torch.Try(func() { z = torch.Randn([]int64{int64(n), t.G.Cfg.Latent}).Keep() }); err != nil {
			return r, err
		}
		defer z.Free()
		wb = WithNoise(b, z)
	}

	w, err := t.DEng.Backward(wb, train.Pass{Scaler: t.Scaler, Reset: t.DStep.Abandon, Step: r.Step, Loss: t.DiscriminatorLoss})
	if err != nil {
		t.abandon()
		return r, fmt.Errorf("discriminator: %w", err)
	}
	r.DLoss, r.DMicro = w.Loss, w.MicroBatch
	var ds, gs train.OptimStep
	if err := torch.TidyErr(func() (err error) { ds, err = t.DStep.Step(); return err }); err != nil {
		t.abandon()
		return r, err
	}
	setTrainable(t.D, false)
	w, err = t.GEng.Backward(wb, train.Pass{Scaler: t.Scaler, Reset: t.GStep.Abandon, Step: r.Step, Loss: t.GeneratorLoss})
	setTrainable(t.D, true)
	if err != nil {
		t.abandon()
		return r, fmt.Errorf("generator: %w", err)
	}
	r.GLoss, r.GMicro = w.Loss, w.MicroBatch
	if err := torch.TidyErr(func() (err error) { gs, err = t.GStep.Step(); return err }); err != nil {
		t.abandon()
		return r, err
	}
	t.Scaler.Update()
	t.DStep.Finish()
	t.GStep.Finish()
	t.Steps++
	r.DSkipped, r.GSkipped, r.DNorm, r.GNorm = ds.Skipped, gs.Skipped, ds.GradNorm, gs.GradNorm
	r.Duration = time.Since(start)
	return r, nil
}

// WithNoise is b with z (N, latent) as its noise, the field z that
// GAN.Step and the losses read. It holds b's own tensors and z (nothing
// is copied; the caller keeps freeing them).
func WithNoise(b *data.Batch, z *torch.Tensor) *data.Batch {
	fields := map[string]*torch.Tensor{"z": z}
	for k, v := range b.Fields {
		if k != "z" {
			fields[k] = v
		}
	}
	return &data.Batch{Fields: fields}
}

func (t *GAN) abandon() {
	t.DStep.Abandon()
	t.GStep.Abandon()
}

// DiscriminatorLoss is the discriminator's loss on a micro-batch (fields
// spec, cond, label, z): 0.5·(BCE(D(x, c, y), 1) + BCE(D(G(z, c, y), c,
// y), 0)), the generator run under no-grad.
func (t *GAN) DiscriminatorLoss(mb *data.Batch) *torch.Tensor {
	x, c, y, z := mb.Field("spec"), mb.Field("cond"), mb.Field("label"), mb.Field("z")
	var fake *torch.Tensor
	torch.NoGrad(func() { fake = t.G.Forward(z, c, y) }) // no generator activations kept
	// Each temporary goes once used, as in Python (autograd keeps what
	// backward needs): the logits, the two halves and the fake batch.
	logits := t.D.Forward(x, c, y)
	real := bce(logits, 1)
	logits.Free()
	logits = t.D.Forward(fake, c, y)
	fake.Free()
	gen := bce(logits, 0)
	logits.Free()
	sum := real.Add(gen)
	real.Free()
	gen.Free()
	defer sum.Free()
	return sum.MulScalar(0.5)
}

// GeneratorLoss is the generator's loss on a micro-batch (fields cond,
// label, z): BCE(D(G(z, c, y), c, y), 1). Step runs it with the
// discriminator's parameters frozen.
func (t *GAN) GeneratorLoss(mb *data.Batch) *torch.Tensor {
	c, y, z := mb.Field("cond"), mb.Field("label"), mb.Field("z")
	fake := t.G.Forward(z, c, y)
	logits := t.D.Forward(fake, c, y)
	// Autograd holds what backward needs; this reference would keep the
	// generator's whole output (the uncropped tanh) alive through the
	// generator's backward, where Python's temporary is already gone.
	fake.Free()
	defer logits.Free()
	return bce(logits, 1)
}

// setTrainable turns requires_grad on or off for every parameter of m.
func setTrainable(m nn.Module, on bool) {
	for _, p := range nn.Parameters(m) {
		p.T.SetRequiresGrad(on)
	}
}

// Generate draws spectrograms from the generator for conditions cond
// (N, 2) and genres (N), in batches of at most batch, on the device
// under no-grad (and autocast for the precision); it returns them as
// host memory (N slices of Mels × Frames, float32).
func (t *GAN) Generate(cond [][CondDim]float32, genres []int64, batch int) ([][]float32, error) {
	return GenerateSpecs(t.G, t.opt.Device, t.opt.Precision, cond, genres, batch)
}

// GenerateSpecs is GAN.Generate for a generator alone.
func GenerateSpecs(g *Generator, dev torch.Device, prec amp.Precision, cond [][CondDim]float32, genres []int64, batch int) ([][]float32, error) {
	out := make([][]float32, 0, len(cond))
	size := g.Cfg.Mels * g.Cfg.Frames
	err := torch.Try(func() {
		torch.NoGrad(func() {
			for i := 0; i < len(cond); i += batch {
				j := min(i+batch, len(cond))
				torch.Tidy(func() {
					flat := make([]float32, 0, CondDim*(j-i))
					for _, c := range cond[i:j] {
						flat = append(flat, c[:]...)
					}
					n := int64(j - i)
					z := torch.Randn([]int64{n, g.Cfg.Latent}).ToDevice(dev)
					c := torch.FromSlice(flat, []int64{n, CondDim}, dev)
					y := torch.FromSlice(genres[i:j], []int64{n}, dev)
					var x *torch.Tensor
					run := func() { x = g.Forward(z, c, y) }
					if prec != amp.FP32 && prec != "" {
						amp.Autocast(dev, prec.DType(), run)
					} else {
						run()
					}
					v := x.To(torch.CPU, torch.Float32).Float32s()
					for k := int64(0); k < n; k++ {
						out = append(out, v[k*size:(k+1)*size:(k+1)*size])
					}
				})
			}
		})
	})
	return out, err
}
