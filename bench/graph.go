package bench

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/cudagraph"
	"github.com/torchfit/torchfit/train"
)

// ErrNotCapturable is a twin whose training step cannot be captured as a
// CUDA graph: GraphResult.NA says why.
var ErrNotCapturable = errors.New("bench: the step cannot be captured as a CUDA graph")

// A Capturable instance can also train with a step that a CUDA graph can
// capture (package cudagraph): the same model, loss and batch, with
// nothing that waits for the device.
type Capturable interface {
	Instance
	// StepLoss runs Step and returns the step's loss.
	StepLoss() (float64, error)
	// CaptureStep returns the capturable step. It trains the instance's
	// model with an optimizer of its own: use one or the other.
	CaptureStep() (*GraphStep, error)
}

// GraphStep is a training step in the form a CUDA graph captures: the
// gradients set to nil, forward and backward over the micro-batches of
// the instance's fixed batch (static tensors), the autocast cache
// cleared, clipping on the device (nn.ClipGradNormOnDevice), the
// capturable AdamW (cudagraph.AdamW: PyTorch's fused AdamW with device
// step counters), under fp16 a GradScaler of its own whose skip and
// update stay on the device, and the recipe's after-step hook. The loss
// stays on the device. A run that fails drops its gradients and the
// scaler's records, so the next run starts afresh.
type GraphStep struct {
	run    func() (*torch.Tensor, error)
	opts   []*cudagraph.AdamW
	scaler *amp.GradScaler // fp16's, its own (disabled otherwise)
	loss   *torch.Tensor
}

// Step runs the step once (eagerly, or inside a capture).
func (g *GraphStep) Step() error {
	l, err := g.run()
	if err != nil {
		return err
	}
	if g.loss != nil {
		g.loss.Free()
	}
	g.loss = l
	return nil
}

// Loss is the last run's loss, a scalar on the device (float64 when
// summed over micro-batches, as train.Window's): after a capture, the
// tensor each replay writes.
func (g *GraphStep) Loss() *torch.Tensor { return g.loss }

// Free releases the optimizers' state, the scaler and the loss.
func (g *GraphStep) Free() {
	for _, o := range g.opts {
		o.Free()
	}
	g.scaler.Free()
	if g.loss != nil {
		g.loss.Free()
		g.loss = nil
	}
}

// StepLoss runs the trainer's step and returns its loss.
func (s *SingleModel) StepLoss() (float64, error) {
	info, err := s.tr.Step(s.Batch)
	return info.Loss, err
}

// CaptureStep returns the step a CUDA graph captures. The trainer's
// step reads the loss on the host and clips with the norm read there;
// this one keeps both on the device and otherwise computes what the
// trainer's does: the trainer's engine runs the batch's micro-batches
// (train.Pass.DeviceLoss) with GraphLoss where it is set, then clipping
// at ClipNorm, AdamW with the same groups and hyperparameters, OnStep.
// CLIP's exact step (Contrastive) is the trainer's grad cache with its
// loss left on the device and no generator snapshots, which a capture
// cannot hold: only for a model that draws no random numbers (NoRNG),
// where the snapshots change nothing. Under fp16 its GradScaler (one of
// its own) unscales, skips and updates on the device (optimStep).
func (s *SingleModel) CaptureStep() (*GraphStep, error) {
	switch {
	case s.Contrastive != nil && !s.NoRNG:
		return nil, fmt.Errorf("%w: the grad-cache step restores the generators' state between its passes (its model draws random numbers)", ErrNotCapturable)
	case s.NoCUDAGraph != "" && s.Device.IsCUDA():
		return nil, fmt.Errorf("%w: %s", ErrNotCapturable, s.NoCUDAGraph)
	}
	if err := capturable(); err != nil {
		return nil, err
	}
	var opt *cudagraph.AdamW
	var scaler *amp.GradScaler
	err := s.tr.Thread().DoErr(func() error {
		var err error
		if opt, err = cudagraph.NewAdamW(s.groups, s.adam); err != nil {
			return err
		}
		// A scaler of its own, with the trainer's options.
		if err = torch.Try(func() { scaler = amp.NewGradScaler(s.Device, amp.ScalerOptions{Disabled: !s.Precision.Scaled()}) }); err != nil {
			opt.Free()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// What a failed window or run leaves is dropped, as the trainer's
	// Optim.Abandon does.
	abandon := func() {
		opt.ZeroGrad()
		scaler.ResetOptimizer(s.opt)
	}
	lossFn := s.Loss
	if s.GraphLoss != nil {
		lossFn = s.GraphLoss
	}
	run := func() (*torch.Tensor, error) {
		opt.ZeroGrad()
		nn.SetTraining(s.Model, true)
		var w train.Window
		var err error
		if c := s.Contrastive; c != nil {
			w, err = s.tr.Engine().GradCache(s.Batch, train.CachePass{Embed: c.Embed, Loss: c.Loss, Scaler: scaler, Reset: abandon, DeviceLoss: true, NoRNG: true})
		} else {
			w, err = s.tr.Engine().Backward(s.Batch, train.Pass{Loss: lossFn, Scaler: scaler, Reset: abandon, DeviceLoss: true})
		}
		if err != nil {
			abandon()
			return nil, err
		}
		loss := w.LossTensor
		fail := func(err error) (*torch.Tensor, error) {
			loss.Free()
			abandon()
			return nil, err
		}
		if err := torch.Try(amp.ClearCache); err != nil {
			return fail(err)
		}
		if err := optimStep(scaler, s.opt, s.ClipNorm, opt); err != nil {
			return fail(err)
		}
		if err := torch.Try(scaler.Update); err != nil {
			return fail(err)
		}
		if s.OnStep != nil {
			if err := torch.Try(s.OnStep); err != nil {
				return fail(err)
			}
		}
		return loss, nil
	}
	return &GraphStep{run: run, opts: []*cudagraph.AdamW{opt}, scaler: scaler}, nil
}

// optimStep is train.Optim.Step in the form a CUDA graph captures: the
// gradients unscaled on the device (fp16: scaler enabled), clipped on the
// device at clip (0: not), and opt's update, which the kernel itself
// skips when the scaler found inf or nan (cudagraph.AdamW.StepUnlessInf:
// torch.optim.AdamW(fused=True) under a GradScaler). key is the
// trainer's optimizer over the same parameters: what the trainer clips,
// and what the scaler keeps its record by.
func optimStep(scaler *amp.GradScaler, key amp.Optimizer, clip float64, opt *cudagraph.AdamW) error {
	if scaler.Enabled() {
		if err := torch.Try(func() { scaler.Unscale(key) }); err != nil {
			return err
		}
	}
	if clip > 0 {
		norm, err := nn.ClipGradNormOnDevice(key.Parameters(), clip, 2)
		if err != nil {
			return err
		}
		norm.Free()
	}
	if scaler.Enabled() {
		return opt.StepUnlessInf(scaler.FoundInf(key))
	}
	return opt.Step()
}

// capturable refuses a libtorch without the capturable AdamW. (Every
// precision is capturable: under fp16 the GradScaler's skip and update
// stay on the device, optimStep.)
func capturable() error {
	if _, err := torch.OpSchema("aten::_fused_adamw_", ""); err != nil {
		maj, min, _ := torch.LibtorchVersion()
		return fmt.Errorf("%w: libtorch %d.%d has no _fused_adamw_ (the capturable AdamW; PyTorch 2.0 and later)", ErrNotCapturable, maj, min)
	}
	return nil
}

// GraphResult is a twin's step captured as a CUDA graph (MeasureGraph).
type GraphResult struct {
	Twin   string
	Config Config
	// NA says why the step was not captured ("" when it was, or, on the
	// CPU, when it could be: everything but the capture ran).
	NA string
	// Transfers are the capturable step's calls that move values between
	// Go and tensors (torch.HostTransfers of one step): a step with any
	// cannot be captured, and on a GPU each of them waits for the device.
	Transfers []torch.CallStat
	// Captured: a graph was captured and replayed (CUDA only).
	Captured bool
	// Losses of the same steps from the same weights (dropout off): the
	// trainer's eager step, and the capturable step (replays of its graph
	// on CUDA, eager runs of it on the CPU).
	EagerLoss, GraphLoss []float64
	// Worst is the largest relative difference of the two, Tol its bound.
	Worst, Tol float64
	// GraphMS is the median milliseconds per replay, each followed by a
	// device synchronisation as every timed step is (CUDA only), of a graph
	// of the step with the recipe's dropout.
	GraphMS float64
}

// graphSteps is how many steps' losses MeasureGraph compares.
const graphSteps = 5

// graphTol bounds the relative difference of a step's loss, the
// capturable step against the trainer's: the same computation but for
// the optimizer's implementation (PyTorch's fused AdamW against the
// trainer's; the same kernel on CUDA) and, in a capture, cuBLAS's choice
// of algorithms.
func graphTol(p amp.Precision) float64 {
	if p == amp.BF16 || p == amp.FP16 {
		return 1e-2
	}
	return 1e-4
}

// MeasureGraph captures tw's training step at cfg as a CUDA graph and
// replays it: the losses of graphSteps replays against the trainer's
// eager steps from the same weights (dropout off), then, of a second
// build with the recipe's dropout, the time per replay (o's warm-up,
// repetitions and steps). A step that moves any value between Go and a
// tensor (counted on its first run) is not captured: NA says which calls.
// On the CPU nothing is captured and nothing timed; the capturable step
// runs eagerly against the trainer's, which checks what it computes on
// any machine. An error is a failure; a step that cannot be captured is
// not one (NA).
func MeasureGraph(tw Twin, cfg Config, o Options) (GraphResult, error) {
	res := GraphResult{Twin: tw.Name(), Config: cfg, Tol: graphTol(cfg.Precision)}
	dev := cfg.Dev()
	chk := cfg
	chk.Check = true
	err := capturable() // before a build this libtorch may refuse (fp16 on 1.13's CPU)
	var gi Instance
	var gs *GraphStep
	if err == nil {
		gi, gs, err = buildGraphStep(tw, chk)
	}
	if err != nil {
		if errors.Is(err, ErrNotCapturable) {
			res.NA = strings.TrimPrefix(err.Error(), ErrNotCapturable.Error()+": ")
			return res, nil
		}
		return res, err
	}
	defer gi.Free()
	defer gs.Free()
	// The first run, counted: a transfer would wait for the device in an
	// eager step, and cannot be captured.
	if res.Transfers, err = countedStep(gs); err != nil {
		return res, fmt.Errorf("bench: %s: the capturable step: %w", tw.Name(), err)
	}
	if len(res.Transfers) > 0 {
		var names []string
		for _, s := range res.Transfers {
			names = append(names, fmt.Sprintf("%s ×%d", s.Name, s.Calls))
		}
		res.NA = "its step moves values between Go and tensors (" + strings.Join(names, ", ") + "): on a GPU each waits for the device, and none can be captured"
		return res, nil
	}

	inst, err := tw.Build(chk)
	if err != nil {
		return res, fmt.Errorf("bench: %s: build: %w", tw.Name(), err)
	}
	defer inst.Free()
	eager := inst.(Capturable)
	// The eager side catches up with the capturable one: its first run,
	// and on CUDA the capture's warm-up runs.
	catchUp := 1
	var g *cudagraph.Graph
	if dev.IsCUDA() {
		g, err = cudagraph.Capture(dev, gs.Step, cudagraph.Options{})
		if err != nil {
			return res, fmt.Errorf("bench: %s: %w", tw.Name(), err)
		}
		defer g.Free()
		res.Captured = true
		catchUp += cudagraph.DefaultWarmup
	} else {
		res.NA = "a CUDA graph needs CUDA: the capturable step ran eagerly"
	}
	for i := 0; i < catchUp; i++ {
		if _, err := eager.StepLoss(); err != nil {
			return res, fmt.Errorf("bench: %s: eager step: %w", tw.Name(), err)
		}
	}
	for i := 0; i < graphSteps; i++ {
		l, err := eager.StepLoss()
		if err != nil {
			return res, fmt.Errorf("bench: %s: eager step: %w", tw.Name(), err)
		}
		res.EagerLoss = append(res.EagerLoss, l)
		var gl float64
		err = torch.Main().DoErr(func() error {
			if g != nil {
				if err := g.Replay(); err != nil {
					return err
				}
			} else if err := gs.Step(); err != nil {
				return err
			}
			return torch.Try(func() { gl = gs.Loss().Item() })
		})
		if err != nil {
			return res, fmt.Errorf("bench: %s: graph step: %w", tw.Name(), err)
		}
		res.GraphLoss = append(res.GraphLoss, gl)
		res.Worst = math.Max(res.Worst, math.Abs(gl-l)/math.Max(math.Abs(l), 1e-12))
	}
	if !(res.Worst <= res.Tol) {
		return res, fmt.Errorf("bench: %s: the capturable step's losses %v differ from the trainer's %v by %.1e (tolerance %.0e)",
			tw.Name(), res.GraphLoss, res.EagerLoss, res.Worst, res.Tol)
	}
	if g == nil {
		return res, nil
	}
	res.GraphMS, err = timeGraph(tw, cfg, o)
	return res, err
}

// buildGraphStep builds tw at cfg and its capturable step.
func buildGraphStep(tw Twin, cfg Config) (Instance, *GraphStep, error) {
	inst, err := tw.Build(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %s: build: %w", tw.Name(), err)
	}
	c, ok := inst.(Capturable)
	if !ok {
		inst.Free()
		return nil, nil, fmt.Errorf("%w: its step is not one model's trainer step", ErrNotCapturable)
	}
	gs, err := c.CaptureStep()
	if err != nil {
		inst.Free()
		return nil, nil, err
	}
	return inst, gs, nil
}

// countedStep runs gs once and returns its calls that move values
// between Go and tensors.
func countedStep(gs *GraphStep) ([]torch.CallStat, error) {
	var err error
	stats := torch.CountCalls(func() { err = torch.Main().DoErr(gs.Step) })
	return torch.HostTransfers(stats), err
}

// timeGraph captures tw's step at cfg (the recipe's dropout on) and
// returns the median milliseconds per replay.
func timeGraph(tw Twin, cfg Config, o Options) (float64, error) {
	dev := cfg.Dev()
	inst, gs, err := buildGraphStep(tw, cfg)
	if err != nil {
		return 0, err
	}
	defer inst.Free()
	defer gs.Free()
	// Dropout's path is checked as the rest was: nothing crosses to Go.
	tr, err := countedStep(gs)
	if err != nil {
		return 0, fmt.Errorf("bench: %s (dropout on): %w", tw.Name(), err)
	}
	if len(tr) > 0 {
		return 0, fmt.Errorf("bench: %s: with dropout on, the capturable step moves values between Go and tensors: %v", tw.Name(), tr)
	}
	g, err := cudagraph.Capture(dev, gs.Step, cudagraph.Options{})
	if err != nil {
		return 0, fmt.Errorf("bench: %s (dropout on): %w", tw.Name(), err)
	}
	defer g.Free()
	var per []float64
	err = torch.Main().DoErr(func() error {
		one := func() error {
			if err := g.Replay(); err != nil {
				return err
			}
			return torch.Synchronize(dev)
		}
		for i := 0; i < o.warmup(); i++ {
			if err := one(); err != nil {
				return err
			}
		}
		for r := 0; r < o.reps(); r++ {
			start := time.Now()
			for i := 0; i < o.steps(); i++ {
				if err := one(); err != nil {
					return err
				}
			}
			per = append(per, 1000*time.Since(start).Seconds()/float64(o.steps()))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bench: %s: replay: %w", tw.Name(), err)
	}
	sort.Float64s(per)
	return per[len(per)/2], nil
}
