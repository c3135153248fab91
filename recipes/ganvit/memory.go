package ganvit

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// MemoryTestConfig configures TestMemory: the sizes and levers training
// would use.
type MemoryTestConfig struct {
	Preset                   Preset
	Device                   torch.Device
	Precision                amp.Precision
	GANAccum, DAccum, GAccum int
	Accum                    int
	GradCheckpointing        bool
	Unfreeze                 Schedule // applied as at epoch 0
	Out                      io.Writer
}

// MemoryTest is what TestMemory measured.
type MemoryTest struct {
	GANPeak, GANHeld int64 // peak during the GAN iteration; allocated after it
	ViTPeak, ViTHeld int64
}

// OOMError is TestMemory's out-of-memory verdict; it wraps the *torch.Error
// (a command line exits 3, as for any out-of-memory error).
type OOMError struct {
	Stage string // "GAN" or "ViT"
	Err   error
}

func (e *OOMError) Error() string {
	return fmt.Sprintf("test-memory: the %s step ran out of memory: %v", e.Stage, e.Err)
}
func (e *OOMError) Unwrap() error { return e.Err }

// TestMemory is the seed's test_memory_config, run with the recipe's own
// training steps: one GAN iteration (discriminator and generator, forward,
// backward, optimizer steps) on random spectrograms (GAN_BATCH_SIZE, 1,
// N_MELS, frames), conditions (GAN_BATCH_SIZE, 2) and noise
// (GAN_BATCH_SIZE, LATENT_DIM); then, the discriminator and the GAN's
// optimizer state freed as training frees them, one classifier step on
// (BATCH_SIZE, 3, 224, 224) images made from random spectrograms. Its
// lines are the seed's; out of memory is an *OOMError after the seed's
// advice (halve both batch sizes). Out-of-memory adaptation is off: the
// point is whether the configuration fits as given.
func TestMemory(c MemoryTestConfig) (res MemoryTest, err error) {
	err = torch.Main().DoErr(func() error {
		res, err = testMemory(c)
		return err
	})
	return res, err
}

func testMemory(c MemoryTestConfig) (MemoryTest, error) {
	var res MemoryTest
	p, dev, out := c.Preset, c.Device, c.Out
	if out == nil {
		out = io.Discard
	}
	for _, a := range []*int{&c.GANAccum, &c.DAccum, &c.GAccum, &c.Accum} {
		if *a < 1 {
			*a = max(1, c.GANAccum)
		}
	}
	gb := func(n int64) string { return fmt.Sprintf("%.2f GB", float64(n)/(1<<30)) }
	oom := func(stage string, err error) error {
		if !errors.Is(err, torch.ErrOutOfMemory) {
			return err
		}
		fmt.Fprintf(out, "❌ OOM Error: %s\n", oneLine(err.Error()))
		fmt.Fprintf(out, "\n💡 Try reducing batch sizes:\n")
		fmt.Fprintf(out, "   Current: GAN_BATCH_SIZE=%d, BATCH_SIZE=%d\n", p.GANBatch, p.MicroBatch)
		fmt.Fprintf(out, "   Suggested: GAN_BATCH_SIZE=%d, BATCH_SIZE=%d\n", p.GANBatch/2, p.MicroBatch/2)
		fmt.Fprintf(out, "   (or keep the effective batch with accumulation: --gan-grad-accum 2 / --grad-accum 2, --mixed-precision auto, --grad-checkpointing)\n")
		return &OOMError{stage, err}
	}
	vc, err := p.ViTConfig(len(Genres))
	if err != nil {
		return res, &recipes.UsageError{Err: err}
	}
	gc := p.GANConfig(len(Genres))
	if err := gc.Validate(); err != nil {
		return res, &recipes.UsageError{Err: err}
	}
	var g *Generator
	var d *Discriminator
	if err := torch.Try(func() { g, d = NewGenerator(gc), NewDiscriminator(gc) }); err != nil {
		if g != nil {
			nn.Free(g)
		}
		return res, oom("GAN", err)
	}
	defer func() {
		if g != nil {
			nn.Free(g)
		}
		if d != nil {
			nn.Free(d)
		}
	}()
	eff := p.GANBatch * c.GANAccum
	if eff%c.DAccum != 0 || eff%c.GAccum != 0 {
		return res, &recipes.UsageError{Err: fmt.Errorf("the accumulation steps %d (D) and %d (G) must divide the GAN's effective batch %d", c.DAccum, c.GAccum, eff)}
	}
	torch.ResetPeakMemory(dev)
	gan, err := NewGAN(g, d, GANOptions{Device: dev, Precision: c.Precision, MicroD: eff / c.DAccum, MicroG: eff / c.GAccum, NoOOMAdapt: true})
	if err != nil {
		return res, oom("GAN", err)
	}
	b, err := dummyBatch(eff, p)
	if err != nil {
		gan.Free()
		return res, err
	}
	_, err = gan.Step(b)
	b.Free()
	if err != nil {
		gan.Free()
		return res, oom("GAN", err)
	}
	st := torch.MustMemoryStats(dev)
	res.GANPeak, res.GANHeld = st.PeakAllocated, st.Allocated
	fmt.Fprintf(out, "✅ GAN config OK - %s used\n", gb(st.Allocated))
	fmt.Fprintf(out, "   (%s: generator + discriminator + Adam state; peak %s during the iteration: micro-batch %d × %d (D), %d × %d (G), %s)\n",
		torch.FormatBytes(st.Allocated), torch.FormatBytes(st.PeakAllocated), eff/c.DAccum, c.DAccum, eff/c.GAccum, c.GAccum, c.Precision)
	torch.EmptyCache()
	// As training does before the classifier: the discriminator and the
	// GAN's optimizer state go; the generator stays.
	gan.Free()
	nn.Free(d)
	d = nil
	torch.EmptyCache()

	if err := vc.Validate(); err != nil {
		return res, &recipes.UsageError{Err: err}
	}
	var v *ViT
	if err := torch.Try(func() { v, _ = NewViT(vc) }); err != nil {
		return res, oom("ViT", err)
	}
	defer nn.Free(v)
	v.Checkpointing = c.GradCheckpointing
	if c.Unfreeze != nil {
		v.FreezeBackbone()
		if err := v.UnfreezeLayers(c.Unfreeze.Until(0)); err != nil {
			return res, &recipes.UsageError{Err: err}
		}
	}
	torch.ResetPeakMemory(dev)
	cls, err := NewClassifier(v, ClassifierOptions{Device: dev, Precision: c.Precision, MicroBatch: p.MicroBatch, NoOOMAdapt: true})
	if err != nil {
		return res, oom("ViT", err)
	}
	defer cls.Free()
	b, err = dummyBatch(p.MicroBatch*c.Accum, p)
	if err != nil {
		return res, err
	}
	_, err = cls.Step(b)
	b.Free()
	if err != nil {
		return res, oom("ViT", err)
	}
	st = torch.MustMemoryStats(dev)
	res.ViTPeak, res.ViTHeld = st.PeakAllocated, st.Allocated
	fmt.Fprintf(out, "✅ ViT config OK - %s used\n", gb(st.Allocated))
	fmt.Fprintf(out, "   (%s: ViT %s + AdamW state + the generator; peak %s during the step: micro-batch %d × %d, %s, checkpointing %v)\n",
		torch.FormatBytes(st.Allocated), vc.Name, torch.FormatBytes(st.PeakAllocated), p.MicroBatch, c.Accum, c.Precision, c.GradCheckpointing)
	torch.EmptyCache()
	fmt.Fprintf(out, "\n🎉 Configuration is memory-safe!\n")
	return res, nil
}

// dummyBatch is random spectrograms (CPU), conditions and genres: the
// seed's torch.randn dummies.
func dummyBatch(n int, p Preset) (*data.Batch, error) {
	var b *data.Batch
	err := torch.Try(func() {
		b = &data.Batch{Fields: map[string]*torch.Tensor{
			"spec":  torch.Randn([]int64{int64(n), 1, p.Mels, p.Frames}).Keep(),
			"cond":  torch.Randn([]int64{int64(n), CondDim}).Keep(),
			"label": torch.Randint(0, int64(len(Genres)), []int64{int64(n)}).Keep(),
		}}
	})
	return b, err
}

func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for k, l := range lines {
		lines[k] = strings.TrimSpace(l)
	}
	return strings.Join(lines, " | ")
}
