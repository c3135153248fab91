package train_test

import (
	"errors"
	"fmt"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

func exampleBatch(n int64) *data.Batch {
	torch.ManualSeed(1)
	return &data.Batch{Fields: map[string]*torch.Tensor{
		"x": torch.Randn([]int64{n, 64}).Keep(),
		"y": torch.Randn([]int64{n, 1}).Keep(),
	}}
}

// The training loop: an effective batch of 64 in micro-batches of 32 under
// a memory cap that 32 does not fit — the window is redone at 16 × 4, the
// effective batch unchanged.
func ExampleTrainer() {
	torch.ManualSeed(0)
	m := nn.NewSequential(nn.NewLinear(64, 2048, true), nn.NewReLU(), nn.NewLinear(2048, 1, true))
	defer nn.Free(m)
	opt := nn.NewSGD(nn.Parameters(m), nn.SGDConfig{LR: 0.01})
	defer opt.Free()
	loss := func(b *data.Batch) *torch.Tensor {
		return torch.MSELoss(m.Forward(b.Field("x")), b.Field("y"), torch.ReduceMean)
	}
	var log []string
	tr, _ := train.New(m, opt, loss, train.Config{MicroBatch: 32, Accum: 2, Device: torch.CPU,
		Events: func(e train.Event) {
			if o, ok := e.(train.OOMEvent); ok {
				log = append(log, o.String())
			}
		}})
	b := exampleBatch(64)
	defer b.Free()
	// A step at micro-batch 16 needs 1.20 MB above this point, at 32 1.34 MB.
	torch.SetMemoryLimit(torch.CPU, torch.MustMemoryStats(torch.CPU).Allocated+1_270_000)
	info, err := tr.Step(b)
	torch.SetMemoryLimit(torch.CPU, 0)
	fmt.Println(err, log)
	fmt.Printf("step %d: %d samples in %d micro-batches of %d\n", info.Step, info.Samples, info.Micro, info.MicroBatch)
	// Output:
	// <nil> [out of memory at micro-batch 32 (step 1): redoing the window with micro-batch 16 × 4 accumulation steps; effective batch 64 unchanged]
	// step 1: 64 samples in 4 micro-batches of 16
}

// A grad-cache step: the exact 32-way contrastive gradient in micro-batches
// of 8 — each micro-batch embedded without grad, the loss of the whole
// batch backpropagated once to the embeddings (and the temperature), then
// each micro-batch re-embedded with grad and backpropagated.
func ExampleEngine_GradCache() {
	torch.ManualSeed(0)
	img, txt := nn.NewLinear(12, 8, true), nn.NewLinear(10, 8, true)
	clip := nn.NewCLIPLoss()
	defer nn.Free(img)
	defer nn.Free(txt)
	defer nn.Free(clip)
	b := &data.Batch{Fields: map[string]*torch.Tensor{
		"img": torch.Randn([]int64{32, 12}).Keep(), "txt": torch.Randn([]int64{32, 10}).Keep()}}
	defer b.Free()
	eng, _ := train.NewEngine(train.EngineConfig{MicroBatch: 8, Device: torch.CPU})
	w, err := eng.GradCache(b, train.CachePass{
		Embed: func(mb *data.Batch) []*torch.Tensor {
			return []*torch.Tensor{img.Forward(mb.Field("img")), txt.Forward(mb.Field("txt"))}
		},
		Loss: func(e []*torch.Tensor) *torch.Tensor { return clip.Forward(e[0], e[1]) },
	})
	g := clip.LogitScale.Grad()
	fmt.Println(err, w.Micro, "micro-batches; the temperature has a gradient:", g != nil)
	// Output:
	// <nil> 4 micro-batches; the temperature has a gradient: true
}

// A GAN from the core's parts: an Engine and an Optim per network, one
// GradScaler for both (its Update once per iteration) — the discriminator
// steps, then the generator.
func Example_gan() {
	torch.ManualSeed(0)
	gen := nn.NewSequential(nn.NewLinear(4, 16, true), nn.NewTanh(), nn.NewLinear(16, 2, true))
	disc := nn.NewSequential(nn.NewLinear(2, 16, true), nn.NewTanh(), nn.NewLinear(16, 1, true))
	defer nn.Free(gen)
	defer nn.Free(disc)
	dOpt := nn.NewAdam(nn.Parameters(disc), nn.AdamConfig{LR: 1e-3, Beta1: 0.5, Beta2: 0.999, Eps: 1e-8})
	gOpt := nn.NewAdam(nn.Parameters(gen), nn.AdamConfig{LR: 1e-3, Beta1: 0.5, Beta2: 0.999, Eps: 1e-8})
	defer dOpt.Free()
	defer gOpt.Free()
	scaler := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{Disabled: true}) // enabled for float16 on CUDA
	dStep := &train.Optim{Opt: dOpt, ClipNorm: 1, Scaler: scaler}
	gStep := &train.Optim{Opt: gOpt, ClipNorm: 1, Scaler: scaler}
	dEng, _ := train.NewEngine(train.EngineConfig{MicroBatch: 8, Device: torch.CPU})
	gEng, _ := train.NewEngine(train.EngineConfig{MicroBatch: 8, Device: torch.CPU})
	bce := func(logits *torch.Tensor, target float64) *torch.Tensor {
		return torch.BCEWithLogits(logits, torch.FullLike(logits, target), nil, nil, torch.ReduceMean)
	}
	b := &data.Batch{Fields: map[string]*torch.Tensor{
		"real": torch.Randn([]int64{16, 2}).Keep(), "z": torch.Randn([]int64{16, 4}).Keep()}}
	defer b.Free()
	var err error
	for it := 0; it < 3 && err == nil; it++ {
		_, err = dEng.Backward(b, train.Pass{Scaler: scaler, Reset: dStep.Abandon, Loss: func(mb *data.Batch) *torch.Tensor {
			fake := gen.Forward(mb.Field("z")).Detach()
			return bce(disc.Forward(mb.Field("real")), 1).Add(bce(disc.Forward(fake), 0))
		}})
		if err == nil {
			err = torch.TidyErr(func() (err error) { _, err = dStep.Step(); return err })
		}
		if err == nil {
			_, err = gEng.Backward(b, train.Pass{Scaler: scaler, Reset: gStep.Abandon, Loss: func(mb *data.Batch) *torch.Tensor {
				return bce(disc.Forward(gen.Forward(mb.Field("z"))), 1)
			}})
		}
		if err == nil {
			err = torch.TidyErr(func() (err error) { _, err = gStep.Step(); return err })
		}
		scaler.Update()
		dStep.Finish()
		gStep.Finish()
	}
	fmt.Println("3 iterations:", err == nil, errors.Is(err, torch.ErrOutOfMemory))
	// Output:
	// 3 iterations: true false
}

// block is a residual MLP block: x + fc2(relu(fc1(x))).
type block struct {
	nn.Base
	fc1, fc2 *nn.Linear
}

// net is a custom module: it embeds nn.Base, and RegisterModule gives each
// layer its state-dict name (as a PyTorch module's attributes do).
type net struct {
	nn.Base
	in     *nn.Linear
	blocks *nn.ModuleList[*block]
	out    *nn.Linear
}

func newNet(width int64, depth int) *net {
	m := &net{}
	m.in = nn.RegisterModule(&m.Base, "in", nn.NewLinear(4, width, true))
	m.blocks = nn.RegisterModule(&m.Base, "blocks", nn.NewModuleList[*block]())
	for range depth {
		b := &block{}
		b.fc1 = nn.RegisterModule(&b.Base, "fc1", nn.NewLinear(width, 2*width, true))
		b.fc2 = nn.RegisterModule(&b.Base, "fc2", nn.NewLinear(2*width, width, true))
		m.blocks.Append(b)
	}
	m.out = nn.RegisterModule(&m.Base, "out", nn.NewLinear(width, 1, true))
	return m
}

// Forward runs each block under activation checkpointing (torch.Recompute):
// a block's activations are not kept for backward, which recomputes them.
func (m *net) Forward(x *torch.Tensor) *torch.Tensor {
	h := m.in.Forward(x).Relu()
	for _, b := range m.blocks.Items {
		h = torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor {
			return []*torch.Tensor{in[0].Add(b.fc2.Forward(b.fc1.Forward(in[0]).Relu()))}
		}, h)[0]
	}
	return m.out.Forward(h)
}

// A custom module — nn.Base embedded, layers added with nn.RegisterModule,
// blocks checkpointed in its forward — trained with train.New and
// Trainer.Step. The loss reads the batch with Batch.Field, which names a
// misspelt field instead of passing nil on.
func Example_customModule() {
	torch.ManualSeed(0)
	m := newNet(8, 2)
	defer nn.Free(m)
	for _, p := range nn.Parameters(m)[:4] {
		fmt.Println(p.Name, p.T.Shape())
	}
	fmt.Println("parameters:", nn.NumParams(m))

	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-2))
	defer opt.Free()
	loss := func(b *data.Batch) *torch.Tensor {
		return torch.MSELoss(m.Forward(b.Field("x")), b.Field("y"), torch.ReduceMean)
	}
	tr, err := train.New(m, opt, loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU})
	if err != nil {
		fmt.Println(err)
		return
	}
	b := &data.Batch{Fields: map[string]*torch.Tensor{
		"x": torch.Randn([]int64{8, 4}).Keep(), "y": torch.Randn([]int64{8, 1}).Keep()}}
	defer b.Free()
	var first, last train.StepInfo
	for k := range 5 {
		info, err := tr.Step(b)
		if err != nil {
			fmt.Println(err)
			return
		}
		if k == 0 {
			first = info
		}
		last = info
	}
	fmt.Printf("step %d: %d samples in %d micro-batches of %d\n", last.Step, last.Samples, last.Micro, last.MicroBatch)
	fmt.Println("the loss went down:", last.Loss < first.Loss)

	// A misspelt field is the step's error, naming it.
	tr.Loss = func(b *data.Batch) *torch.Tensor {
		return torch.MSELoss(m.Forward(b.Field("inputs")), b.Field("y"), torch.ReduceMean)
	}
	_, err = tr.Step(b)
	fmt.Println(err)
	fmt.Println(errors.Is(err, data.ErrNoField))
	// Output:
	// in.weight [8 4]
	// in.bias [8]
	// blocks.0.fc1.weight [16 8]
	// blocks.0.fc1.bias [16]
	// parameters: 609
	// step 5: 8 samples in 2 micro-batches of 4
	// the loss went down: true
	// Batch.Field: batch has no field "inputs" (its fields: "x", "y")
	// true
}
