package bench

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
)

// Config is one measured configuration of a twin.
type Config struct {
	Threads   int
	Precision amp.Precision // amp.FP32 or amp.BF16
	Batch     int           // samples per step (one micro-batch)
	Length    int           // sequence length (frames, tokens; 0: the twin's default)
	Seed      uint64
	// Check builds the model for the equality check: dropout off, so that
	// both sides compute the same function of the same weights.
	Check bool
	// Device is where both sides train (the zero value: the CPU). On CUDA
	// the Go side's model and batch move there once built and the Python
	// twin loads them there (scripts/twins/run.py); each timed step ends
	// with the device synchronised on both sides, and no peak is measured.
	Device torch.Device
}

// Dev is the configuration's device: Device when it is a CUDA device,
// torch.CPU otherwise.
func (c Config) Dev() torch.Device {
	if c.Device.IsCUDA() {
		return c.Device
	}
	return torch.CPU
}

// A Twin is a recipe's model that has a Python twin.
type Twin interface {
	// Name is "recipe/preset", e.g. "asr/tiny".
	Name() string
	// Script is the Python side, relative to the repository root.
	Script() string
	// Build makes the model (seeded), its optimizer and a fixed batch.
	Build(cfg Config) (Instance, error)
}

// PyPeakLimited is a Twin whose Python peak (measured with torch.profiler,
// which holds memory for every op it records) cannot be measured at every
// size: PyPeakUnmeasured returns why not at cfg, or "" when it can be.
// The table then shows the reason in place of the Python peak.
type PyPeakLimited interface {
	PyPeakUnmeasured(cfg Config) string
}

// Instance is a built twin: the Go side of one configuration.
type Instance interface {
	// Check runs one forward and backward at the initial weights without
	// updating them, and returns the loss and the gradients by parameter
	// name (copies the caller frees).
	Check() (loss float64, grads []nn.Named, err error)
	// Step runs one training step.
	Step() error
	// Export writes what the Python side loads: "spec" (JSON text),
	// "model" (the state dict), "batch", and check when not nil.
	Export(path string, check *ptfile.Dict) error
	// Free releases the model, optimizer and batch.
	Free()
}

var registry struct {
	mu    sync.Mutex
	twins map[string]Twin
}

// Register adds a twin (recipes call it from an init function).
func Register(t Twin) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.twins == nil {
		registry.twins = map[string]Twin{}
	}
	if _, dup := registry.twins[t.Name()]; dup {
		panic(fmt.Sprintf("bench: twin %q registered twice", t.Name()))
	}
	registry.twins[t.Name()] = t
}

// Twins returns the registered twins by name.
func Twins() []Twin {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	out := make([]Twin, 0, len(registry.twins))
	for _, t := range registry.twins {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Lookup returns the twin called name.
func Lookup(name string) (Twin, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	t, ok := registry.twins[name]
	if !ok {
		return nil, fmt.Errorf("bench: no twin %q", name)
	}
	return t, nil
}

// SingleModel is the Instance of a recipe with one model and one AdamW
// optimizer: its step is train.Trainer's (one micro-batch of the whole
// batch, clipping, AdamW with weight decay on matrices, zero grads), and
// the Python side runs the same loop (scripts/twins/run.py).
type SingleModel struct {
	Model nn.Module
	Loss  func(*data.Batch) *torch.Tensor
	Batch *data.Batch
	// PyBatch is the batch as the Python twin reads it (data["batch"]).
	PyBatch *ptfile.Dict
	// Spec is the recipe's own part of the Python spec (spec["model"]).
	Spec      map[string]any
	Precision amp.Precision
	LR        float64
	Decay     float64 // AdamW weight decay on parameters of two or more dimensions
	ClipNorm  float64
	// Groups are AdamW's parameter groups when the recipe chooses them
	// itself (nil: weight decay Decay on parameters of two or more
	// dimensions, none on the others).
	Groups []nn.ParamGroup
	// Beta2 and Eps are AdamW's (0: PyTorch's defaults, 0.999 and 1e-8).
	Beta2, Eps float64
	// Accum splits the batch into this many micro-batches per step (0 or
	// 1: one), which the trainer accumulates as the recipe does.
	Accum int
	// Contrastive makes every step a grad-cache pass over the batch
	// (train.Config.Contrastive: CLIP's exact mode); Loss is then unused
	// by Step and Check.
	Contrastive *train.Contrastive
	// NoRNG: the model draws no random numbers in training (no dropout,
	// as CLIP's towers), so a grad-cache step needs no generator
	// snapshots, and CaptureStep can capture one (train.CachePass.NoRNG).
	NoRNG bool
	// OnStep runs after each optimizer step (CLIP clamps its temperature).
	OnStep func()
	// GraphLoss is Loss in the form the capturable step computes (nil:
	// Loss): the same loss with ops that neither read from the device nor
	// copy to it inside them (ASR's CTC, asr.Conformer.CapturableBatchLoss).
	GraphLoss func(*data.Batch) *torch.Tensor
	// NoCUDAGraph says why the step cannot be captured as a CUDA graph on
	// CUDA although nothing in it crosses to Go ("": it can): an op
	// that copies between the host and the device itself. On the CPU
	// the capturable step still runs (bench.MeasureGraph).
	NoCUDAGraph string
	// Device is where the model and the batch train (Config.Dev): Init
	// moves them there.
	Device torch.Device

	opt *nn.Adam
	tr  *train.Trainer
	// The optimizer's groups and configuration (CaptureStep makes its own).
	groups []nn.ParamGroup
	adam   nn.AdamConfig
}

// Init moves the model and the batch to Device and creates the optimizer
// and the trainer; call it once the fields are set.
func (s *SingleModel) Init() error {
	if !s.Device.IsCUDA() {
		s.Device = torch.CPU
	} else {
		dev := s.Device
		if err := torch.Try(func() {
			nn.To(s.Model, dev, torch.Float32)
			b := s.Batch.Slice(0, s.Batch.Size(), dev)
			s.Batch.Free()
			s.Batch = b
		}); err != nil {
			s.Free() // the caller drops s
			return fmt.Errorf("bench: moving the model and batch to %v: %w", dev, err)
		}
	}
	groups := s.Groups
	if groups == nil {
		groups = nn.DecayGroups(nn.Parameters(s.Model), s.Decay)
	}
	ac := nn.AdamWDefaults(s.LR)
	if s.Beta2 > 0 {
		ac.Beta2 = s.Beta2
	}
	if s.Eps > 0 {
		ac.Eps = s.Eps
	}
	s.groups, s.adam = groups, ac
	s.opt = nn.NewAdamWGroups(groups, ac)
	tr, err := train.New(s.Model, s.opt, s.Loss, train.Config{
		MicroBatch: s.micro(), Accum: max(1, s.Accum), Device: s.Device, Precision: s.Precision, ClipNorm: s.ClipNorm,
		MaxNonFinite: -1, Contrastive: s.Contrastive,
	})
	if err != nil {
		s.opt.Free()
		return err
	}
	if s.OnStep != nil {
		tr.OnStep = func(train.StepInfo) { s.OnStep() }
	}
	s.tr = tr
	return nil
}

// micro is the micro-batch: the batch over Accum, rounded up.
func (s *SingleModel) micro() int {
	a := max(1, s.Accum)
	return (s.Batch.Size() + a - 1) / a
}

// Step runs one training step with the trainer.
func (s *SingleModel) Step() error {
	_, err := s.tr.Step(s.Batch)
	return err
}

// Check computes the loss and gradients at the current weights.
func (s *SingleModel) Check() (loss float64, grads []nn.Named, err error) {
	err = s.tr.Thread().DoErr(func() error {
		return torch.TidyErr(func() error {
			s.opt.ZeroGrad()
			if s.Contrastive != nil || s.Accum > 1 {
				// The trainer's own window: grad cache or accumulation.
				nn.SetTraining(s.Model, true)
				var w train.Window
				var err error
				if c := s.Contrastive; c != nil {
					w, err = s.tr.Engine().GradCache(s.Batch, train.CachePass{Embed: c.Embed, Loss: c.Loss})
				} else {
					w, err = s.tr.Engine().Backward(s.Batch, train.Pass{Loss: s.Loss})
				}
				if err != nil {
					return err
				}
				loss = w.Loss
				grads = s.copyGrads()
				s.opt.ZeroGrad()
				return nil
			}
			var l *torch.Tensor
			if s.Precision != amp.FP32 && s.Precision != "" {
				amp.Autocast(s.Device, s.Precision.DType(), func() { l = s.Loss(s.Batch) })
				amp.ClearCache()
			} else {
				l = s.Loss(s.Batch)
			}
			l = l.ToDType(torch.Float32)
			loss = l.Item()
			l.Backward()
			grads = s.copyGrads()
			s.opt.ZeroGrad()
			return nil
		})
	})
	return loss, grads, err
}

func (s *SingleModel) copyGrads() (grads []nn.Named) {
	for _, p := range nn.Parameters(s.Model) {
		if g := p.T.Grad(); g != nil {
			grads = append(grads, nn.Named{Name: p.Name, T: g.Clone().Keep()})
		}
	}
	return grads
}

// Export writes the spec, the weights, the batch and the check.
func (s *SingleModel) Export(path string, check *ptfile.Dict) error {
	groups := s.opt.Groups()
	var pyGroups []map[string]any
	for _, g := range groups {
		names := make([]string, len(g.Params))
		for k, p := range g.Params {
			names[k] = p.Name
		}
		pyGroups = append(pyGroups, map[string]any{"params": names, "weight_decay": g.WeightDecay})
	}
	g0 := groups[0]
	spec := map[string]any{
		"model":     s.Spec,
		"precision": string(s.Precision),
		// The trainer's micro-batch (twins that accumulate read it).
		"micro_batch": s.micro(),
		"optim": map[string]any{"lr": s.LR, "beta1": g0.Beta1, "beta2": g0.Beta2, "eps": g0.Eps,
			"clip_norm": s.ClipNorm, "groups": pyGroups},
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	d := ptfile.NewDict("spec", string(js), "model", nn.StateDict(s.Model), "batch", s.PyBatch)
	if check != nil {
		d.Set("check", check)
	}
	return ptfile.Save(path, d)
}

// Free releases the optimizer, the model and the batch.
func (s *SingleModel) Free() {
	if s.opt != nil {
		s.opt.Free()
	}
	nn.Free(s.Model)
	s.Batch.Free()
	for _, k := range s.PyBatch.Keys() {
		if t := s.PyBatch.Tensor(k); t != nil {
			t.Free()
		}
	}
}

// A Precisioner is a Twin whose recipe trains in some precisions only:
// bench-recipes skips the others, saying so.
type Precisioner interface {
	Precisions() []amp.Precision
}

// Supports reports whether tw is measured at precision p (every
// precision unless tw is a Precisioner).
func Supports(tw Twin, p amp.Precision) bool {
	pr, ok := tw.(Precisioner)
	if !ok {
		return true
	}
	for _, q := range pr.Precisions() {
		if q == p {
			return true
		}
	}
	return false
}
