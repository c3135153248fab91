package memplan_test

import (
	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// resMLP is a stack of residual MLP blocks over (B, seq, dim) sequences,
// mean-pooled into a regression head: activations grow with the batch and
// checkpointing each block saves most of them.
type resMLP struct {
	nn.Base
	Blocks        *nn.ModuleList[*resBlock]
	Head          *nn.Linear
	Checkpointing bool
}

type resBlock struct {
	nn.Base
	Up, Down *nn.Linear
}

func (b *resBlock) Forward(x *torch.Tensor) *torch.Tensor {
	return b.Down.Forward(b.Up.Forward(x).Gelu()).Add(x)
}

const mlpSeq, mlpDim, mlpHidden = 16, 64, 256

func newResMLP(blocks int) *resMLP {
	torch.ManualSeed(3)
	m := &resMLP{}
	m.Blocks = nn.RegisterModule(&m.Base, "blocks", nn.NewModuleList[*resBlock]())
	for k := 0; k < blocks; k++ {
		b := &resBlock{}
		b.Up = nn.RegisterModule(&b.Base, "up", nn.NewLinear(mlpDim, mlpHidden, true))
		b.Down = nn.RegisterModule(&b.Base, "down", nn.NewLinear(mlpHidden, mlpDim, true))
		m.Blocks.Append(b)
	}
	m.Head = nn.RegisterModule(&m.Base, "head", nn.NewLinear(mlpDim, 1, true))
	return m
}

// loss is the loss of a synthetic micro-batch of n sequences (drawn from
// the generator: a dry run rewinds it).
func (m *resMLP) loss(n int) *torch.Tensor {
	x := torch.Randn([]int64{int64(n), mlpSeq, mlpDim})
	y := torch.Randn([]int64{int64(n), 1})
	h := x
	for _, b := range m.Blocks.Items {
		if m.Checkpointing {
			h = torch.Recompute(func(in []*torch.Tensor) []*torch.Tensor { return []*torch.Tensor{b.Forward(in[0])} }, h)[0]
		} else {
			h = b.Forward(h)
		}
	}
	return torch.MSELoss(m.Head.Forward(h.MeanDim([]int64{1}, false)), y, torch.ReduceMean)
}

// micro is one micro-batch of n out of an effective batch: forward under
// autocast at p, backward of the loss weighted by n/effective.
func (m *resMLP) micro(n, effective int, p amp.Precision) error {
	var loss *torch.Tensor
	if p == amp.FP32 {
		loss = m.loss(n)
	} else {
		amp.Autocast(torch.CPU, p.DType(), func() { loss = m.loss(n) })
	}
	loss.ToDType(torch.Float32).MulScalar(float64(n) / float64(effective)).Backward()
	return nil
}

// train runs steps optimizer steps of effective batch e as c says:
// micro-batches of c.MicroBatch (the last one smaller), gradients
// accumulated, then one AdamW step, then the autocast cache cleared. It is the test's own training loop,
// written with nn and amp only.
func train(m *resMLP, opt nn.Optimizer, c memplan.Candidate, e, steps int) (err error) {
	torch.Main().Do(func() {
		m.Checkpointing = c.Checkpointing
		defer opt.ZeroGrad()
		for s := 0; s < steps; s++ {
			for i := 0; i < e; i += c.MicroBatch {
				n := min(c.MicroBatch, e-i)
				if err = torch.TidyErr(func() error { return m.micro(n, e, c.Precision) }); err != nil {
					return
				}
			}
			if err = torch.TidyErr(func() error { opt.Step(); opt.ZeroGrad(); amp.ClearCache(); return nil }); err != nil {
				return
			}
		}
	})
	return err
}

// measurer returns the planner's Measure for m: a DryRun of the test's
// training step for the candidate.
func measurer(m *resMLP, opt nn.Optimizer, e int) memplan.Measure {
	return func(c memplan.Candidate) (memplan.Measurement, error) {
		m.Checkpointing = c.Checkpointing
		return memplan.DryRun{Device: torch.CPU, Model: m, Optimizers: []nn.Optimizer{opt}, Repeat: 2}.Run(c.Accum,
			func() error { return m.micro(c.MicroBatch, e, c.Precision) },
			func() error { opt.Step(); opt.ZeroGrad(); return nil })
	}
}
