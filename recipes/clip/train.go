package clip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
)

// Contrastive accumulation modes.
const (
	// Exact trains the effective batch's contrastive loss (every sample
	// against all the batch's negatives) by grad cache.
	Exact = "exact"
	// Naive accumulates each micro-batch's own contrastive loss divided
	// by the accumulation steps: the seed's gradient accumulation (each
	// sample sees its micro-batch's negatives only).
	Naive = "naive"
)

// TrainConfig is `torchfit clip train` (and pretrain): the harness's
// shared settings and the recipe's own.
type TrainConfig struct {
	recipes.Common
	Stage  string // "train" or "pretrain" (names the run in logs and checkpoints)
	Preset string // cpu, vit-b32 ("" with Init or Resume: the file's)
	// Init loads a state dict before training: a file of Python's
	// torch.save(model.state_dict()) with OpenAI's names, or a torchfit
	// CLIP checkpoint (its model).
	Init        string
	Mode        string // Exact or Naive
	WeightDecay float64
	// EvalEvery validates every N steps besides each epoch's end (0: only
	// at epoch ends).
	EvalEvery int
	// ValidLimit caps the validation images (0: all).
	ValidLimit int
	// CPUBudget stops training, with a checkpoint, once the process has
	// spent this much CPU time (user + system, all threads) on training
	// steps; validation does not count (0: no budget).
	CPUBudget time.Duration
	Events    train.Sink
}

// Validate checks the settings (a *recipes.ConfigError names the flag).
func (c TrainConfig) Validate() error {
	bad := func(field string, v any, reason string) error {
		return &recipes.ConfigError{Field: field, Value: v, Reason: reason}
	}
	if c.Mode != Exact && c.Mode != Naive {
		return bad("contrastive-accumulation", c.Mode, "want exact or naive")
	}
	if err := c.Common.Validate(); err != nil {
		return err
	}
	const most = math.MaxInt32
	if err := recipes.CheckRanges(
		recipes.Between("epochs", int64(c.Epochs), 1, most),
		recipes.Between("eval-every", int64(c.EvalEvery), 0, most),
		recipes.Between("valid-limit", int64(c.ValidLimit), 0, most),
	); err != nil {
		return err
	}
	switch {
	case c.MicroBatch*c.Accum < 2:
		return bad("grad-accum", c.Accum, "a contrastive loss needs an effective batch of at least 2")
	case !(c.WeightDecay >= 0) || math.IsInf(c.WeightDecay, 0):
		return bad("weight-decay", c.WeightDecay, "must be a finite number >= 0")
	case c.CPUBudget < 0:
		return bad("cpu-budget", c.CPUBudget, "must be at least 0")
	case c.Init != "" && c.Resume != "":
		return bad("init", c.Init, "--resume continues a run with its own weights; give one of --init and --resume")
	}
	return nil
}

// Result is what Train did.
type Result struct {
	Params      int64
	Preset      string
	Steps       int
	MicroBatch  int
	Accum       int
	Start       Scores // validation before training (zero when resumed)
	Final       Scores // validation at the end
	Checkpoint  string
	PeakMemory  int64
	Precision   amp.Choice
	CPUTime     time.Duration // process CPU time spent in training steps
	Budget      bool          // training stopped at the CPU budget
	Interrupted bool
}

// modelMeta is the model description stored in checkpoints.
type modelMeta struct {
	Preset string   `json:"preset"`
	Config Config   `json:"config"`
	Words  []string `json:"words"`
	Kind   string   `json:"kind"`
	Stage  string   `json:"stage"`
}

func metaDict(mm modelMeta) *ptfile.Dict {
	b, _ := json.Marshal(mm)
	return ptfile.NewDict("recipe", "clip", "model", string(b))
}

// checkpointError is a clip checkpoint that cannot be used (the shared
// recipes.CheckpointError: a command line exits 2).
func checkpointError(path string, err error) error {
	return &recipes.CheckpointError{Recipe: "clip", Path: path, Err: err}
}

// Weights are a model's description and state dict read from a file.
type Weights struct {
	Meta    modelMeta // Config always set; Words, Preset only from torchfit checkpoints
	Tensors map[string]*torch.Tensor
	free    func()
}

// Free releases the tensors.
func (w *Weights) Free() {
	if w.free != nil {
		w.free()
	}
}

// ReadWeights reads a torchfit CLIP checkpoint or a CLIP state dict
// (torch.save(model.state_dict()), a dict with it under "model" or
// "state_dict", names optionally prefixed "module."). The configuration
// comes from the checkpoint's description, checked against the weights,
// or is inferred from a state dict's shapes as OpenAI's build_model does.
func ReadWeights(path string) (*Weights, error) {
	v, err := ptfile.Load(path)
	if err != nil {
		return nil, checkpointError(path, err)
	}
	w := &Weights{free: func() { ptfile.FreeAll(v) }}
	fail := func(format string, args ...any) (*Weights, error) {
		w.Free()
		return nil, checkpointError(path, fmt.Errorf(format, args...))
	}
	d, ok := v.(*ptfile.Dict)
	if !ok {
		return fail("not a state dict or checkpoint (a %T)", v)
	}
	sdv := any(d)
	for _, key := range []string{"model", "state_dict"} {
		if x, ok := d.Get(key); ok {
			sdv = x
			break
		}
	}
	sd, ok := sdv.(*ptfile.Dict)
	if !ok {
		return fail("its model is not a state dict")
	}
	w.Tensors = map[string]*torch.Tensor{}
	for _, e := range sd.Entries {
		name, ok := e.Key.(string)
		t, isT := e.Value.(*torch.Tensor)
		if !ok || !isT {
			return fail("the state dict holds %v: %T, not a tensor", e.Key, e.Value)
		}
		w.Tensors[strings.TrimPrefix(name, "module.")] = t
	}
	inferred, err := Infer(w.Tensors)
	if err != nil {
		if m, ok := d.Get("meta"); ok {
			if md, ok := m.(*ptfile.Dict); ok {
				if r, _ := md.Get("recipe"); r != nil && r != "clip" {
					return fail("a checkpoint of the %v recipe, not CLIP", r)
				}
			}
		}
		return fail("%v", err)
	}
	w.Meta.Config = inferred
	if m, ok := d.Get("meta"); ok {
		md, _ := m.(*ptfile.Dict)
		if md != nil {
			if r, _ := md.Get("recipe"); r != nil && r != "clip" {
				return fail("a checkpoint of the %v recipe, not CLIP", r)
			}
			if s, ok := md.Get("model"); ok {
				str, _ := s.(string)
				var mm modelMeta
				if err := json.Unmarshal([]byte(str), &mm); err != nil {
					return fail("bad model description: %v", err)
				}
				if err := mm.Config.Validate(); err != nil {
					return fail("model description: %v", err)
				}
				got, want := mm.Config, inferred
				got.VisionHeads, got.TransformerHeads = want.VisionHeads, want.TransformerHeads
				if got != want {
					return fail("the model description (%+v) disagrees with the weights' shapes (%+v)", mm.Config, inferred)
				}
				w.Meta = mm
			}
		}
	}
	return w, nil
}

// Load returns a model built from the weights (strict: every name and
// shape must match).
func (w *Weights) Load(path string) (*Model, error) {
	m, err := NewModel(w.Meta.Config)
	if err != nil {
		return nil, checkpointError(path, err)
	}
	if _, err := nn.LoadStateDict(m, w.Tensors, true); err != nil {
		nn.Free(m)
		return nil, checkpointError(path, err)
	}
	return m, nil
}

// tokenizerFor returns the tokenizer of a model description (the default
// vocabulary when it names none).
func tokenizerFor(mm modelMeta) (*Tokenizer, error) {
	words := mm.Words
	if len(words) == 0 {
		words = vocabularyWords()
	}
	return NewTokenizer(words, mm.Config.VocabSize, mm.Config.ContextLength)
}

// cpuTime is the process's CPU time (user + system, every thread).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memoryLine is the seed's log line, "GPU Memory - Allocated: X GB, Peak:
// Y GB" (GiB, as torch.cuda.memory_allocated()/1024**3); on the CPU the
// same figures come from torchfit's counting allocator and the line says
// so.
func memoryLine(dev torch.Device) string {
	s, err := torch.MemoryStats(dev)
	if err != nil {
		return fmt.Sprintf("GPU Memory - unavailable on %v: %v", dev, err)
	}
	line := fmt.Sprintf("GPU Memory - Allocated: %.2f GB, Peak: %.2f GB", float64(s.Allocated)/(1<<30), float64(s.PeakAllocated)/(1<<30))
	if !dev.IsCUDA() {
		line += fmt.Sprintf(" (device %v: torchfit's counting allocator, %s allocated, %s peak)", dev, torch.FormatBytes(s.Allocated), torch.FormatBytes(s.PeakAllocated))
	}
	return line
}

// Train trains (pretrains, fine-tunes or resumes) a CLIP on a data
// directory, on libtorch's thread.
func Train(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	torch.Main().Do(func() { res, err = trainCLIP(ctx, cfg) })
	return res, err
}

func trainCLIP(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	run, err := recipes.Begin(cfg.Common, cfg.Events)
	if err != nil {
		return res, err
	}
	defer run.End()
	logf, precision := run.Logf, run.Precision
	res.Precision = precision
	set, err := ReadSet(cfg.Data)
	if err != nil {
		return res, err
	}
	trainItems, validItems := set.Split(SplitTrain), set.Split(SplitValid)
	if len(validItems) == 0 {
		validItems = set.Split(SplitTest)
	}
	if cfg.ValidLimit > 0 && len(validItems) > cfg.ValidLimit {
		validItems = validItems[:cfg.ValidLimit]
	}
	effective := cfg.EffectiveBatch()
	if len(trainItems) < effective {
		return res, recipes.Usagef("clip: %s has %d training images, fewer than one effective batch of %d", cfg.Data, len(trainItems), effective)
	}

	// The model: a preset, or the weights of --init or --resume.
	var mm modelMeta
	var init *Weights
	switch {
	case cfg.Resume != "" || cfg.Init != "":
		path := cfg.Resume + cfg.Init
		if init, err = ReadWeights(path); err != nil {
			return res, err
		}
		defer init.Free()
		mm = init.Meta
		if cfg.Resume != "" && mm.Stage == "" {
			return res, checkpointError(path, errors.New("not a torchfit CLIP checkpoint (--resume needs one; start from a state dict with --init)"))
		}
		if cfg.Preset != "" {
			pc, err := Preset(cfg.Preset)
			if err != nil {
				return res, &recipes.ConfigError{Field: "preset", Value: cfg.Preset, Err: err}
			}
			got := mm.Config
			pc.GradCheckpointing = got.GradCheckpointing
			if pc != got {
				return res, checkpointError(path, fmt.Errorf("its model (%+v) is not preset %s (%+v): drop --preset or pass the preset it was trained with", got, cfg.Preset, pc))
			}
		}
		if mm.Preset == "" {
			mm.Preset = presetOf(mm.Config)
		}
	default:
		name := cfg.Preset
		if name == "" {
			name = "cpu"
		}
		c, err := Preset(name)
		if err != nil {
			return res, &recipes.ConfigError{Field: "preset", Value: cfg.Preset, Err: err}
		}
		mm = modelMeta{Preset: strings.ToLower(name), Config: c}
	}
	mm.Config.GradCheckpointing = cfg.GradCheckpointing
	mm.Kind, mm.Stage = set.Kind.Name, cfg.Stage
	tok, err := tokenizerFor(mm)
	if err != nil {
		return res, err
	}
	mm.Words = tok.Words
	res.Preset = mm.Preset

	torch.ManualSeed(cfg.Seed)
	var m *Model
	if init != nil && cfg.Init != "" {
		if m, err = init.Load(cfg.Init); err != nil {
			return res, err
		}
		m.SetGradCheckpointing(cfg.GradCheckpointing)
		logf("initialised from %s (%s, %s stage)", cfg.Init, mm.Preset, orUnknown(init.Meta.Stage))
	} else if m, err = NewModel(mm.Config); err != nil {
		return res, err
	}
	defer nn.Free(m)
	if cfg.Device != torch.CPU {
		nn.To(m, cfg.Device, torch.Float32)
	}
	res.Params = nn.NumParams(m)
	c := mm.Config
	logf("model %s: ViT %d layers × %d wide, patch %d, %d×%d images; text %d layers × %d wide, context %d; embeddings %d; %s parameters (%.2fM)",
		mm.Preset, c.VisionLayers, c.VisionWidth, c.VisionPatchSize, c.ImageResolution, c.ImageResolution,
		c.TransformerLayers, c.TransformerWidth, c.ContextLength, c.EmbedDim, recipes.Commas(res.Params), float64(res.Params)/1e6)
	if cfg.Stage == "train" && cfg.Init == "" && cfg.Resume == "" {
		logf("no --init: training from random weights (the seed fine-tunes a pretrained CLIP: run `torchfit clip pretrain` and pass --init)")
	}
	logf("Effective batch size: %d", effective)
	switch {
	case cfg.Accum == 1:
		logf("contrastive loss: %d-way over one batch of %d", effective, effective)
	case cfg.Mode == Exact:
		logf("contrastive loss: exact %d-way over micro-batch %d × %d accumulation steps (grad cache: every sample against all %d negatives)",
			effective, cfg.MicroBatch, cfg.Accum, effective-1)
	default:
		logf("contrastive loss: naive accumulation, %d-way per micro-batch of %d × %d steps (the seed's: each sample sees %d negatives, not %d)",
			cfg.MicroBatch, cfg.MicroBatch, cfg.Accum, cfg.MicroBatch-1, effective-1)
	}

	opt := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), cfg.WeightDecay),
		nn.AdamConfig{LR: cfg.LR, Beta1: 0.9, Beta2: 0.98, Eps: 1e-6, WeightDecay: cfg.WeightDecay})
	defer opt.Free()
	stepsPerEpoch := len(trainItems) / effective
	total := stepsPerEpoch * cfg.Epochs
	if cfg.MaxSteps > 0 && cfg.MaxSteps < total {
		total = cfg.MaxSteps
	}
	sched := nn.NewSchedule(opt, nn.WarmupCosineLR(cfg.Warmup, total, 0))
	defer sched.Free()

	embed, batchLoss, microLoss := Objectives(m, cfg.Device)
	tcfg := train.Config{
		MicroBatch: cfg.MicroBatch, Accum: cfg.Accum, Device: cfg.Device, Precision: precision.Precision,
		ClipNorm: cfg.ClipNorm, EmptyCacheEvery: cfg.EmptyCacheEvery, Events: cfg.Events, MaxNonFinite: cfg.MaxNonFinite,
	}
	if cfg.Mode == Exact {
		tcfg.Contrastive = &train.Contrastive{Embed: embed, Loss: batchLoss}
	}
	tr, err := train.New(m, opt, microLoss, tcfg)
	if err != nil {
		return res, err
	}
	tr.Sched = sched

	evalOpts := EvalOptions{Device: cfg.Device, Precision: precision.Precision, MicroBatch: cfg.MicroBatch, LossBatch: effective}
	var evalCPU time.Duration
	validate := func() (Scores, error) {
		t0 := cpuTime()
		s, err := Score(m, tok, set, validItems, evalOpts)
		evalCPU += cpuTime() - t0
		return s, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var cpuStart time.Duration
	var stepErr error
	tr.OnStep = func(info train.StepInfo) {
		m.ClampLogitScale()
		if cfg.MemoryEvery > 0 && info.Step%cfg.MemoryEvery == 0 {
			logf("%s", memoryLine(cfg.Device))
		}
		if cfg.EvalEvery > 0 && info.Step%cfg.EvalEvery == 0 && info.Step%max(1, stepsPerEpoch) != 0 {
			s, err := validate()
			if err != nil {
				stepErr = err
				stop()
				return
			}
			vals := s.Values("val_")
			vals["cpu_minutes"] = (cpuTime() - cpuStart - evalCPU).Minutes()
			emitEvent(cfg.Events, train.EvalEvent{Step: info.Step, Epoch: info.Step/max(1, stepsPerEpoch) + 1, Values: vals})
		}
		if cfg.CPUBudget > 0 && cpuTime()-cpuStart-evalCPU >= cfg.CPUBudget && !res.Budget {
			res.Budget = true
			logf("CPU budget of %v spent after step %d: stopping", cfg.CPUBudget, info.Step)
			stop()
		}
	}
	start := func() error {
		if cfg.Resume == "" {
			s, err := validate()
			if err != nil {
				return err
			}
			res.Start = s
			logf("validation before training (%d images, %d classes): zero-shot accuracy %.3f, text→image R@1 %.3f, loss %.3f",
				s.N, s.Classes, s.ZeroShot, s.R1, s.Loss)
		}
		torch.ResetPeakMemory(cfg.Device)
		cpuStart, evalCPU = cpuTime(), 0
		return nil
	}
	newLoader := func(st *data.State) (train.Loader, error) {
		opts := data.Options{BatchSize: effective, Shuffle: true, Seed: cfg.Seed, DropLast: true,
			Workers: cfg.Workers, Prefetch: cfg.Prefetch, Resume: st}
		if cfg.Device.IsCUDA() {
			opts.Device = cfg.Device // pinned host batches, copied when handed over
		}
		return data.NewLoader[data.Sample, *data.Batch](&Dataset{Set: set, Items: trainItems, Res: int(c.ImageResolution), Tok: tok}, data.Collate, opts)
	}
	var last *Scores
	fit, err := train.Fit(runCtx, tr, newLoader, train.FitConfig{
		Epochs: cfg.Epochs, MaxSteps: cfg.MaxSteps, CheckpointDir: cfg.CheckpointDir, CheckpointEvery: cfg.CheckpointEvery,
		Overwrite: cfg.Overwrite, Resume: cfg.Resume, Meta: metaDict(mm), Start: start,
		Eval: func(int) (map[string]float64, error) {
			s, err := validate()
			last = &s
			vals := s.Values("val_")
			vals["cpu_minutes"] = (cpuTime() - cpuStart - evalCPU).Minutes()
			return vals, err
		},
	})
	res.CPUTime = cpuTime() - cpuStart - evalCPU
	res.Checkpoint = fit.Checkpoint
	if stepErr != nil {
		return res, stepErr
	}
	if errors.Is(err, train.ErrInterrupted) {
		res.Interrupted = !res.Budget || ctx.Err() != nil
		err = nil
	}
	if err != nil {
		return res, err
	}
	res.Steps, res.MicroBatch = tr.Steps(), tr.MicroBatch()
	res.Accum = (effective + res.MicroBatch - 1) / res.MicroBatch
	res.PeakMemory = torch.MustMemoryStats(cfg.Device).PeakAllocated
	logf("%s", memoryLine(cfg.Device))
	if last == nil || res.Budget || res.Interrupted {
		s, err := validate()
		if err != nil {
			return res, err
		}
		last = &s
	}
	res.Final = *last
	return res, nil
}

// Objectives are the model's training functions: embed (a micro-batch's
// image and text embeddings), batchLoss (the contrastive loss of a whole
// window's embeddings: grad cache's, the exact mode) and microLoss (one
// micro-batch's own contrastive loss: the naive mode, which the engine
// weights by 1/accumulation steps, as the seed divides its loss). The
// losses are computed in float32 outside autocast.
func Objectives(m *Model, dev torch.Device) (embed train.EmbedFunc, batchLoss train.BatchLoss, microLoss train.LossFunc) {
	embed = func(mb *data.Batch) []*torch.Tensor {
		return []*torch.Tensor{m.EncodeImage(mb.Fields["image"]), m.EncodeText(mb.Fields["text"])}
	}
	batchLoss = func(embs []*torch.Tensor) *torch.Tensor { return m.Loss(embs[0], embs[1]) }
	microLoss = func(mb *data.Batch) *torch.Tensor {
		e := embed(mb)
		var loss *torch.Tensor
		amp.Float32(dev, func() { loss = m.Loss(e[0].ToDType(torch.Float32), e[1].ToDType(torch.Float32)) })
		return loss
	}
	return embed, batchLoss, microLoss
}

func emitEvent(s train.Sink, e train.Event) {
	if s != nil {
		s(e)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "state dict"
	}
	return s
}
