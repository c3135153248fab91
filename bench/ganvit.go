package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes/ganvit"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/cudagraph"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
)

// ViTTwin is recipes/ganvit's genre classifier (torchvision's
// VisionTransformer with vit_b_16's names) at a preset, trained as the
// recipe's Classifier trains it (scripts/twins/ganvit_vit.py).
type ViTTwin struct{ Preset string }

func init() { Register(ViTTwin{"cpu"}) }

// Name is "ganvit/vit-<preset>".
func (v ViTTwin) Name() string { return "ganvit/vit-" + v.Preset }

// Script is the Python twin.
func (ViTTwin) Script() string { return "scripts/twins/ganvit_vit.py" }

// Build makes the preset's ViT for the recipe's four genres (seeded,
// torchvision's initialisation but for the head, which torchvision zeroes
// and which is drawn N(0, 0.05) here so that one step's gradients reach the
// backbone), AdamW as the Classifier's (lr 3e-4, weight decay 0.01 on every
// parameter, clipping at 1) with the whole network trainable (no
// progressive unfreezing), and a batch of cfg.Batch spectrograms (1 ×
// mels × cfg.Length frames, uniform in [−1, 1], the recipe's scaling;
// default the preset's 130 frames) with random genres. The loss resizes
// them to the ViT's image as the recipe does (ganvit.Images).
func (v ViTTwin) Build(cfg Config) (Instance, error) {
	p, ok := ganvit.Presets[v.Preset]
	if !ok {
		return nil, ganvitPresetError(v.Preset)
	}
	vc, err := p.ViTConfig(len(ganvit.Genres))
	if err != nil {
		return nil, err
	}
	frames := int64(cfg.Length)
	if frames <= 0 {
		frames = p.Frames
	}
	var s *SingleModel
	err = torch.Main().DoErr(func() error {
		torch.ManualSeed(cfg.Seed)
		m, err := ganvit.NewViT(vc)
		if err != nil {
			return err
		}
		torch.NoGrad(func() { nn.Normal(m.Heads.Head.Weight, 0, 0.05) })
		rng := rand.New(rand.NewPCG(cfg.Seed, 18))
		labels := make([]int64, cfg.Batch)
		for i := range labels {
			labels[i] = rng.Int64N(int64(len(ganvit.Genres)))
		}
		b := &data.Batch{Fields: map[string]*torch.Tensor{
			"spec":  torch.Rand([]int64{int64(cfg.Batch), 1, p.Mels, frames}).MulScalar(2).AddScalar(-1).Keep(),
			"label": torch.FromSlice(labels, nil).Keep(),
		}}
		py := ptfile.NewDict("spec", b.Fields["spec"].Ref(), "label", b.Fields["label"].Ref())
		s = &SingleModel{
			Model: m, Batch: b, PyBatch: py, Precision: cfg.Precision, LR: 3e-4, ClipNorm: 1, Device: cfg.Dev(),
			Groups: []nn.ParamGroup{nn.ParamGroup{Params: nn.Parameters(m)}.WithWeightDecay(0.01)},
			Loss:   func(mb *data.Batch) *torch.Tensor { return ganvit.ClassifierLoss(m, mb) },
			Spec: map[string]any{
				"image": vc.Image, "patch": vc.Patch, "layers": vc.Layers, "heads": vc.Heads, "hidden": vc.Hidden,
				"mlp": vc.MLP, "classes": vc.Classes,
			},
		}
		return s.Init()
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

type ganvitPresetError string

func (e ganvitPresetError) Error() string {
	return "bench: recipes/ganvit has no preset " + string(e)
}

// GANTwin is recipes/ganvit's conditional GAN (generator and projection
// discriminator) at a preset, one iteration as ganvit.GAN.Step runs it
// (scripts/twins/ganvit_gan.py): the discriminator's loss on real and
// generated spectrograms, its Adam step, the generator's loss through the
// frozen discriminator, its Adam step.
type GANTwin struct{ Preset string }

func init() { Register(GANTwin{"cpu"}) }

// Name is "ganvit/gan-<preset>".
func (g GANTwin) Name() string { return "ganvit/gan-" + g.Preset }

// Script is the Python twin.
func (GANTwin) Script() string { return "scripts/twins/ganvit_gan.py" }

// Build makes the preset's generator and discriminator for the recipe's
// four genres (seeded), ganvit.NewGAN's optimizers (Adam, lr 2e-4, betas
// 0.5/0.999, clipping at 1 per network, the recipe's defaults) with the
// whole batch one micro-batch, and a batch of cfg.Batch real
// spectrograms (1 × mels × cfg.Length frames, uniform in [−1, 1]; default
// the preset's 130 frames), N(0, 1) conditions and random genres. The
// check's noise z is drawn here and written for Python; the timed steps
// draw theirs as GAN.Step does.
func (g GANTwin) Build(cfg Config) (Instance, error) {
	p, ok := ganvit.Presets[g.Preset]
	if !ok {
		return nil, ganvitPresetError(g.Preset)
	}
	gc := p.GANConfig(len(ganvit.Genres))
	if cfg.Length > 0 {
		gc.Frames = int64(cfg.Length)
	}
	if err := gc.Validate(); err != nil {
		return nil, err
	}
	in := &ganInstance{}
	err := torch.Main().DoErr(func() error {
		torch.ManualSeed(cfg.Seed)
		in.g, in.d = ganvit.NewGenerator(gc), ganvit.NewDiscriminator(gc)
		n := int64(cfg.Batch)
		rng := rand.New(rand.NewPCG(cfg.Seed, 19))
		labels := make([]int64, n)
		for i := range labels {
			labels[i] = rng.Int64N(gc.Classes)
		}
		in.b = &data.Batch{Fields: map[string]*torch.Tensor{
			"spec":  torch.Rand([]int64{n, 1, gc.Mels, gc.Frames}).MulScalar(2).AddScalar(-1).Keep(),
			"cond":  torch.Randn([]int64{n, ganvit.CondDim}).Keep(),
			"label": torch.FromSlice(labels, nil).Keep(),
		}}
		in.z = torch.Randn([]int64{n, gc.Latent}).Keep()
		in.prec = cfg.Precision
		in.check = cfg.Check
		in.dev = cfg.Dev()
		if in.dev.IsCUDA() {
			if err := torch.Try(func() {
				nn.To(in.g, in.dev, torch.Float32)
				nn.To(in.d, in.dev, torch.Float32)
				b := in.b.Slice(0, in.b.Size(), in.dev)
				in.b.Free()
				in.b = b
				z := in.z.To(in.dev, torch.Float32).Keep()
				in.z.Free()
				in.z = z
			}); err != nil {
				in.Free()
				return err
			}
		}
		var err error
		in.gan, err = ganvit.NewGAN(in.g, in.d, ganvit.GANOptions{Device: in.dev, Precision: cfg.Precision,
			MicroD: cfg.Batch, MicroG: cfg.Batch, LR: 2e-4, ClipD: 1, ClipG: 1})
		if err != nil {
			in.Free()
			return err
		}
		in.spec = map[string]any{
			"mels": gc.Mels, "frames": gc.Frames, "latent": gc.Latent, "classes": gc.Classes, "embed": gc.Embed,
			"gen_channels": gc.GenChannels, "disc_channels": gc.DiscChannels, "ups": gc.Ups, "cond_dim": ganvit.CondDim,
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

type ganInstance struct {
	g    *ganvit.Generator
	d    *ganvit.Discriminator
	gan  *ganvit.GAN
	b    *data.Batch
	z    *torch.Tensor
	prec amp.Precision
	dev  torch.Device
	spec map[string]any
	// check: the build for the equality check, whose capturable step
	// takes z as StepLoss does.
	check bool
}

func bceTo(logits *torch.Tensor, target float64) *torch.Tensor {
	return torch.BCEWithLogits(logits, torch.FullLike(logits, target), nil, nil, torch.ReduceMean)
}

// Check computes, at the initial weights, the discriminator's loss and
// gradients and the generator's loss and gradients through the frozen
// discriminator (the two halves of GAN.Step before their optimizer
// steps, with the batch's z), and returns the sum of the losses.
func (in *ganInstance) Check() (loss float64, grads []nn.Named, err error) {
	err = torch.Main().DoErr(func() error {
		return torch.TidyErr(func() error {
			x, c, y := in.b.Fields["spec"], in.b.Fields["cond"], in.b.Fields["label"]
			run := func(f func() *torch.Tensor) {
				var l *torch.Tensor
				if in.prec != amp.FP32 && in.prec != "" {
					amp.Autocast(in.dev, in.prec.DType(), func() { l = f() })
					amp.ClearCache()
				} else {
					l = f()
				}
				l = l.ToDType(torch.Float32)
				loss += l.Item()
				l.Backward()
			}
			run(func() *torch.Tensor {
				var fake *torch.Tensor
				torch.NoGrad(func() { fake = in.g.Forward(in.z, c, y) })
				return bceTo(in.d.Forward(x, c, y), 1).Add(bceTo(in.d.Forward(fake, c, y), 0)).MulScalar(0.5)
			})
			trainable(in.d, false)
			run(func() *torch.Tensor { return bceTo(in.d.Forward(in.g.Forward(in.z, c, y), c, y), 1) })
			trainable(in.d, true)
			for _, m := range []struct {
				prefix string
				mod    nn.Module
			}{{"generator.", in.g}, {"discriminator.", in.d}} {
				for _, p := range nn.Parameters(m.mod) {
					if gr := p.T.Grad(); gr != nil {
						grads = append(grads, nn.Named{Name: m.prefix + p.Name, T: gr.Clone().Keep()})
					}
				}
			}
			in.gan.GOpt.ZeroGrad()
			in.gan.DOpt.ZeroGrad()
			return nil
		})
	})
	return loss, grads, err
}

func trainable(m nn.Module, on bool) {
	for _, p := range nn.Parameters(m) {
		p.T.SetRequiresGrad(on)
	}
}

// Step runs one GAN iteration.
func (in *ganInstance) Step() error {
	return torch.Main().DoErr(func() error {
		_, err := in.gan.Step(in.b)
		return err
	})
}

// StepLoss runs GAN.Step with the batch's fixed z (GAN.Step takes a
// batch's own noise) and returns the sum of the two networks' losses: the
// eager side of MeasureGraph, whose capturable step cannot draw noise on
// the host.
func (in *ganInstance) StepLoss() (float64, error) {
	var loss float64
	err := torch.Main().DoErr(func() error {
		r, err := in.gan.Step(ganvit.WithNoise(in.b, in.z))
		loss = r.DLoss + r.GLoss
		return err
	})
	return loss, err
}

// CaptureStep returns GAN.Step in the form a CUDA graph captures, with
// nothing read on the host: both networks' gradients set to nil; the
// discriminator's window (GAN.DiscriminatorLoss, the loss left on the
// device), clipping on the device (nn.ClipGradNormOnDevice) and its
// capturable AdamW; the generator's window through the frozen
// discriminator (GAN.GeneratorLoss), clipping and its AdamW; under fp16
// one GradScaler for both, updated once (optimStep). The GAN's Adam has
// no weight decay, where AdamW's update is Adam's. The loss is
// the sum of the two windows'. Its noise is the batch's fixed z in the
// check build (as StepLoss's), and otherwise N(0, 1) drawn on the device
// inside the step, as the Python twin draws it (a captured step draws
// afresh at each replay, from the device's generator).
func (in *ganInstance) CaptureStep() (*GraphStep, error) {
	if err := capturable(); err != nil {
		return nil, err
	}
	gan := in.gan
	var opts []*cudagraph.AdamW
	var scaler *amp.GradScaler
	err := torch.Main().DoErr(func() error {
		for _, o := range []*nn.Adam{gan.DOpt, gan.GOpt} {
			c, err := capturableAdam(o)
			if err != nil {
				return err
			}
			opts = append(opts, c)
		}
		// One scaler of its own for both, with the GAN's options.
		return torch.Try(func() { scaler = amp.NewGradScaler(in.dev, amp.ScalerOptions{Disabled: in.prec != amp.FP16}) })
	})
	if err != nil {
		for _, o := range opts {
			o.Free()
		}
		return nil, err
	}
	dOpt, gOpt := opts[0], opts[1]
	// What a failed run leaves is dropped, as GAN.Step's abandon does.
	abandon := func() {
		dOpt.ZeroGrad()
		gOpt.ZeroGrad()
		scaler.Reset()
	}
	n, latent := int64(in.b.Size()), gan.G.Cfg.Latent
	run := func() (*torch.Tensor, error) {
		dOpt.ZeroGrad()
		gOpt.ZeroGrad()
		z := in.z
		if !in.check {
			if err := torch.Try(func() { z = torch.Randn([]int64{n, latent}, in.dev).Keep() }); err != nil {
				return nil, err
			}
			defer z.Free()
		}
		b := ganvit.WithNoise(in.b, z)
		half := func(eng *train.Engine, loss train.LossFunc, key *nn.Adam, clip float64, opt *cudagraph.AdamW) (*torch.Tensor, error) {
			// A window redone after out-of-memory drops its own network's
			// gradients and scaler record, as train.Optim.Abandon does.
			reset := func() {
				opt.ZeroGrad()
				scaler.ResetOptimizer(key)
			}
			w, err := eng.Backward(b, train.Pass{Loss: loss, Scaler: scaler, Reset: reset, DeviceLoss: true})
			if err != nil {
				return nil, err
			}
			if err := optimStep(scaler, key, clip, opt); err != nil {
				w.LossTensor.Free()
				return nil, err
			}
			return w.LossTensor, nil
		}
		nn.SetTraining(in.g, true)
		nn.SetTraining(in.d, true)
		dl, err := half(gan.DEng, gan.DiscriminatorLoss, gan.DOpt, gan.DStep.ClipNorm, dOpt)
		if err != nil {
			abandon()
			return nil, fmt.Errorf("discriminator: %w", err)
		}
		defer dl.Free()
		trainable(in.d, false)
		gl, err := half(gan.GEng, gan.GeneratorLoss, gan.GOpt, gan.GStep.ClipNorm, gOpt)
		trainable(in.d, true)
		if err != nil {
			abandon()
			return nil, fmt.Errorf("generator: %w", err)
		}
		defer gl.Free()
		var sum *torch.Tensor
		err = torch.Try(func() {
			scaler.Update()
			sum = dl.Add(gl).Keep()
			amp.ClearCache()
		})
		if err != nil {
			abandon()
		}
		return sum, err
	}
	return &GraphStep{run: run, opts: opts, scaler: scaler}, nil
}

// capturableAdam is the capturable AdamW with o's groups and
// hyperparameters, for an Adam whose update AdamW's equals: no weight
// decay (Adam's L2 term is not AdamW's decoupled decay), no AMSGrad.
func capturableAdam(o *nn.Adam) (*cudagraph.AdamW, error) {
	var groups []nn.ParamGroup
	var cfg nn.AdamConfig
	for k, g := range o.Groups() {
		if g.WeightDecay != 0 || g.AMSGrad {
			return nil, fmt.Errorf("%w: Adam with weight decay %v or AMSGrad (%v): not the capturable AdamW's update", ErrNotCapturable, g.WeightDecay, g.AMSGrad)
		}
		if k == 0 {
			cfg = nn.AdamConfig{LR: g.LR, Beta1: g.Beta1, Beta2: g.Beta2, Eps: g.Eps, Maximize: g.Maximize}
		} else if g.Beta1 != cfg.Beta1 || g.Beta2 != cfg.Beta2 || g.Eps != cfg.Eps || g.Maximize != cfg.Maximize {
			return nil, fmt.Errorf("%w: Adam's groups differ in betas, eps or maximize", ErrNotCapturable)
		}
		groups = append(groups, nn.ParamGroup{Params: g.Params}.WithLR(g.LR))
	}
	return cudagraph.NewAdamW(groups, cfg)
}

// Export writes the spec, both networks' weights (generator.*,
// discriminator.*), the batch and z.
func (in *ganInstance) Export(path string, check *ptfile.Dict) error {
	spec := map[string]any{"model": in.spec, "precision": string(in.prec),
		"optim": map[string]any{"lr": 2e-4, "beta1": 0.5, "beta2": 0.999, "eps": 1e-8, "clip_norm": 1.0}}
	js, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	var sd torch.StateDict
	for _, m := range []struct {
		prefix string
		mod    nn.Module
	}{{"generator.", in.g}, {"discriminator.", in.d}} {
		for _, p := range nn.StateDict(m.mod) {
			sd = append(sd, torch.Named{Name: m.prefix + p.Name, T: p.T})
		}
	}
	batch := ptfile.NewDict("spec", in.b.Fields["spec"], "cond", in.b.Fields["cond"], "label", in.b.Fields["label"], "z", in.z)
	d := ptfile.NewDict("spec", string(js), "model", sd, "batch", batch)
	if check != nil {
		d.Set("check", check)
	}
	return ptfile.Save(path, d)
}

// Free releases the optimizers, the networks, the batch and z.
func (in *ganInstance) Free() {
	if in.gan != nil {
		in.gan.Free()
	}
	nn.Free(in.g)
	nn.Free(in.d)
	in.b.Free()
	in.z.Free()
}
