package clip

import (
	"cmp"
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
	// MirrorPairs makes every second training image the one before it
	// mirrored, its caption's left and right swapped (MirrorPairs).
	MirrorPairs bool
	Events      train.Sink
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
	if err := recipes.CheckDecay(c.LR, c.WeightDecay); err != nil {
		return err
	}
	switch {
	case c.MicroBatch*c.Accum < 2:
		return bad("grad-accum", c.Accum, "a contrastive loss needs an effective batch of at least 2")
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
	Meta    modelMeta       // Config always set; Words, Preset only from torchfit checkpoints
	Tensors torch.StateDict // in file order, "module." prefixes removed
	free    func()
}

// Free releases the tensors; a second call does nothing.
func (w *Weights) Free() {
	if w != nil && w.free != nil {
		w.free()
		w.free, w.Tensors = nil, nil
	}
}

// ReadWeights reads a torchfit CLIP checkpoint or a CLIP state dict
// (torch.save(model.state_dict()), a dict with it under "model" or
// "state_dict", names optionally prefixed "module."; or a safetensors file
// of one, as safetensors.torch.save_file(model.state_dict(), path) writes
// it, read by recipes.LoadWeights). The configuration
// comes from the checkpoint's description, checked against the weights,
// or is inferred from a state dict's shapes as OpenAI's build_model does.
func ReadWeights(path string) (*Weights, error) {
	v, err := recipes.LoadWeights(path)
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
	for _, e := range sd.Entries {
		name, ok := e.Key.(string)
		t, isT := e.Value.(*torch.Tensor)
		if !ok || !isT {
			return fail("the state dict holds %v: %T, not a tensor", e.Key, e.Value)
		}
		w.Tensors = append(w.Tensors, torch.Named{Name: strings.TrimPrefix(name, "module."), T: t})
	}
	inferred, err := Infer(w.Tensors.Map())
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
	logf := run.Logf
	res.Precision = run.Precision
	set, trainItems, validItems, err := splits(cfg)
	if err != nil {
		return res, err
	}
	mm, init, tok, err := modelFor(cfg, set)
	if err != nil {
		return res, err
	}
	defer init.Free()
	res.Preset = mm.Preset
	m, err := buildModel(cfg, mm, init, logf)
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	// The file's tensors were copied into the model (--init) or are read
	// again by the run (--resume): a run does not hold them beside its own.
	init.Free()
	res.Params = nn.NumParams(m)
	effective := cfg.EffectiveBatch()
	logLoss(cfg, logf)
	if cfg.Stage == "train" && mm.Preset == "cpu" && cfg.LR < 1e-4 {
		logf("lr %g is the seed's, for fine-tuning OpenAI's ViT-B/32 (151M parameters); the cpu model (1.7M) pretrained by `torchfit clip pretrain` needs about 3e-4: pass --lr 3e-4 (recipes/clip/README.md measures both)", cfg.LR)
	}
	opt := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), cfg.WeightDecay),
		nn.AdamConfig{LR: cfg.LR, Beta1: 0.9, Beta2: 0.98, Eps: 1e-6, WeightDecay: cfg.WeightDecay})
	defer opt.Free()
	stepsPerEpoch := len(trainItems) / effective
	sched := nn.NewSchedule(opt, nn.WarmupCosineLR(cfg.Warmup, recipes.TotalSteps(stepsPerEpoch, cfg.Epochs, cfg.MaxSteps), 0))
	defer sched.Free()
	embed, batchLoss, microLoss := Objectives(m, cfg.Device)
	collate := data.Collate
	if cfg.MirrorPairs {
		if collate, err = MirrorPairs(tok); err != nil {
			return res, err
		}
		logf("mirrored pairs: every second training image is the one before it mirrored, its caption's left and right swapped (--mirror-pairs=false: off)")
		if cfg.MicroBatch%2 != 0 {
			logf("--mirror-pairs with an odd micro-batch (%d): some pairs straddle two micro-batches", cfg.MicroBatch)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	p := &progress{cfg: cfg, m: m, res: &res, stop: stop, logf: logf, perEpoch: max(1, stepsPerEpoch), score: func() (Scores, error) {
		return Score(m, tok, set, validItems, EvalOptions{Device: cfg.Device, Precision: run.Precision.Precision, MicroBatch: cfg.MicroBatch, LossBatch: effective})
	}}
	out, err := run.Fit(runCtx, recipes.Job{
		Model: m, Opt: opt, Sched: sched, Loss: microLoss,
		Trainer: func(c *train.Config) {
			if cfg.Mode == Exact {
				c.Contrastive = &train.Contrastive{Embed: embed, Loss: batchLoss}
			}
		},
		Dataset: &Dataset{Set: set, Items: trainItems, Res: int(mm.Config.ImageResolution), Tok: tok}, Collate: collate,
		Loader: func(o *data.Options) {
			if cfg.Device.IsCUDA() {
				o.Device = cfg.Device // pinned host batches, copied when handed over
			}
		},
		Ready: func(tr *train.Trainer) { tr.OnStep = p.step },
		Start: func(*train.Trainer) error { return p.begin() },
		Eval:  p.eval,
		Meta:  metaDict(mm),
	})
	res.CPUTime = p.cpuTime()
	res.Checkpoint = out.Checkpoint
	if p.stepErr != nil {
		return res, p.stepErr
	}
	if err != nil {
		return res, err
	}
	res.Interrupted = out.Interrupted && (!res.Budget || ctx.Err() != nil)
	res.Steps, res.MicroBatch, res.Accum, res.PeakMemory = out.Steps, out.MicroBatch, out.Accum, torch.MustMemoryStats(cfg.Device).PeakAllocated
	if !p.epochEnd {
		logf("%s", memoryLine(cfg.Device)) // a run stopped within an epoch
	}
	if p.last == nil || !p.epochEnd || res.Budget || res.Interrupted { // steps after the last epoch's score (--max-steps): score the end
		s, err := p.validate()
		if err != nil {
			return res, err
		}
		p.last = &s
	}
	res.Final = *p.last
	return res, nil
}

// splits reads the data set and its training and validation items (the
// test split when there is no validation split), at least one effective
// batch of training images.
func splits(cfg TrainConfig) (set *Set, trainItems, validItems []Item, err error) {
	if set, err = ReadSet(cfg.Data); err != nil {
		return nil, nil, nil, err
	}
	trainItems, validItems = set.Split(SplitTrain), set.Split(SplitValid)
	if len(validItems) == 0 {
		validItems = set.Split(SplitTest)
	}
	if cfg.ValidLimit > 0 && len(validItems) > cfg.ValidLimit {
		validItems = validItems[:cfg.ValidLimit]
	}
	if effective := cfg.EffectiveBatch(); len(trainItems) < effective {
		return nil, nil, nil, recipes.Usagef("clip: %s has %d training images, fewer than one effective batch of %d", cfg.Data, len(trainItems), effective)
	}
	return set, trainItems, validItems, nil
}

// modelFor decides the model: a preset, or the weights of --init or
// --resume (init, which the caller frees; nil for a preset).
func modelFor(cfg TrainConfig, set *Set) (mm modelMeta, init *Weights, tok *Tokenizer, err error) {
	switch {
	case cfg.Resume != "" || cfg.Init != "":
		path := cfg.Resume + cfg.Init
		if init, err = ReadWeights(path); err != nil {
			return mm, nil, nil, err
		}
		mm = init.Meta
		fail := func(err error) (modelMeta, *Weights, *Tokenizer, error) { init.Free(); return mm, nil, nil, err }
		if cfg.Resume != "" && mm.Stage == "" {
			return fail(checkpointError(path, errors.New("not a torchfit CLIP checkpoint (--resume needs one; start from a state dict with --init)")))
		}
		if cfg.Preset != "" {
			pc, err := Preset(cfg.Preset)
			if err != nil {
				return fail(&recipes.ConfigError{Field: "preset", Value: cfg.Preset, Err: err})
			}
			got := mm.Config
			pc.GradCheckpointing = got.GradCheckpointing
			if pc != got {
				return fail(checkpointError(path, fmt.Errorf("its model (%+v) is not preset %s (%+v): drop --preset or pass the preset it was trained with", got, cfg.Preset, pc)))
			}
		}
		if mm.Preset == "" {
			mm.Preset = presetOf(mm.Config)
		}
	default:
		name := cmp.Or(cfg.Preset, "cpu")
		c, err := Preset(name)
		if err != nil {
			return mm, nil, nil, &recipes.ConfigError{Field: "preset", Value: cfg.Preset, Err: err}
		}
		mm = modelMeta{Preset: strings.ToLower(name), Config: c}
	}
	mm.Config.GradCheckpointing = cfg.GradCheckpointing
	mm.Kind, mm.Stage = set.Kind.Name, cfg.Stage
	if tok, err = tokenizerFor(mm); err != nil {
		init.Free()
		return mm, nil, nil, err
	}
	mm.Words = tok.Words
	return mm, init, tok, nil
}

// buildModel makes the model (seeded) or loads --init's weights, on the
// device.
func buildModel(cfg TrainConfig, mm modelMeta, init *Weights, logf func(string, ...any)) (m *Model, err error) {
	torch.ManualSeed(cfg.Seed)
	if init != nil && cfg.Init != "" {
		if m, err = init.Load(cfg.Init); err != nil {
			return nil, err
		}
		m.SetGradCheckpointing(cfg.GradCheckpointing)
		logf("initialised from %s (%s, %s stage)", cfg.Init, mm.Preset, orUnknown(init.Meta.Stage))
	} else if m, err = NewModel(mm.Config); err != nil {
		return nil, err
	}
	if cfg.Device != torch.CPU {
		nn.To(m, cfg.Device, torch.Float32)
	}
	n, c := nn.NumParams(m), mm.Config
	logf("model %s: ViT %d layers × %d wide, patch %d, %d×%d images; text %d layers × %d wide, context %d; embeddings %d; %s parameters (%.2fM)",
		mm.Preset, c.VisionLayers, c.VisionWidth, c.VisionPatchSize, c.ImageResolution, c.ImageResolution,
		c.TransformerLayers, c.TransformerWidth, c.ContextLength, c.EmbedDim, recipes.Commas(n), float64(n)/1e6)
	if cfg.Stage == "train" && cfg.Init == "" && cfg.Resume == "" {
		logf("no --init: training from random weights (the seed fine-tunes a pretrained CLIP: run `torchfit clip pretrain` and pass --init)")
	}
	return m, nil
}

// logLoss says which contrastive loss the run computes.
func logLoss(cfg TrainConfig, logf func(string, ...any)) {
	effective := cfg.EffectiveBatch()
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
}

// progress is what a run does between steps: the seed's memory line
// after each epoch, where its training loop prints it ("GPU Memory -
// Allocated: X GB, Peak: Y GB" is an epoch's summary, not a step's:
// --memory-every is the core's "step N | memory" line), validation every EvalEvery steps and at epoch ends, and the CPU budget
// (training CPU time, validation not counted).
type progress struct {
	cfg      TrainConfig
	m        *Model
	res      *Result
	stop     context.CancelFunc
	logf     func(string, ...any)
	perEpoch int
	score    func() (Scores, error)
	cpuStart time.Duration
	evalCPU  time.Duration
	last     *Scores
	stepErr  error
	// epochEnd: the seed's memory line was logged after the last step
	// (at the end of its epoch).
	epochEnd bool
}

func (p *progress) cpuTime() time.Duration { return cpuTime() - p.cpuStart - p.evalCPU }

func (p *progress) validate() (Scores, error) {
	t0 := cpuTime()
	s, err := p.score()
	p.evalCPU += cpuTime() - t0
	return s, err
}

// begin runs before the first step: the baseline validation of a new run.
func (p *progress) begin() error {
	if p.cfg.Resume == "" {
		s, err := p.validate()
		if err != nil {
			return err
		}
		p.res.Start = s
		p.logf("validation before training (%d images, %d classes): zero-shot accuracy %.3f, text→image R@1 %.3f, loss %.3f",
			s.N, s.Classes, s.ZeroShot, s.R1, s.Loss)
	}
	p.cpuStart, p.evalCPU = cpuTime(), 0
	return nil
}

func (p *progress) step(info train.StepInfo) {
	cfg := p.cfg
	p.m.ClampLogitScale()
	p.epochEnd = false
	if cfg.EvalEvery > 0 && info.Step%cfg.EvalEvery == 0 && info.Step%p.perEpoch != 0 {
		s, err := p.validate()
		if err != nil {
			p.stepErr = err
			p.stop()
			return
		}
		vals := s.Values("val_")
		vals["cpu_minutes"] = p.cpuTime().Minutes()
		emitEvent(cfg.Events, train.EvalEvent{Step: info.Step, Epoch: info.Step/p.perEpoch + 1, Values: vals})
	}
	if cfg.CPUBudget > 0 && p.cpuTime() >= cfg.CPUBudget && !p.res.Budget {
		p.res.Budget = true
		p.logf("CPU budget of %v spent after step %d: stopping", cfg.CPUBudget, info.Step)
		p.stop()
	}
}

func (p *progress) eval(int) (map[string]float64, error) {
	p.logf("%s", memoryLine(p.cfg.Device))
	p.epochEnd = true
	s, err := p.validate()
	p.last = &s
	vals := s.Values("val_")
	vals["cpu_minutes"] = p.cpuTime().Minutes()
	return vals, err
}

// Objectives are the model's training functions: embed (a micro-batch's
// image and text embeddings), batchLoss (the contrastive loss of a whole
// window's embeddings: grad cache's, the exact mode) and microLoss (one
// micro-batch's own contrastive loss: the naive mode, which the engine
// weights by 1/accumulation steps, as the seed divides its loss). The
// losses are computed in float32 outside autocast.
func Objectives(m *Model, dev torch.Device) (embed train.EmbedFunc, batchLoss train.BatchLoss, microLoss train.LossFunc) {
	embed = func(mb *data.Batch) []*torch.Tensor {
		return []*torch.Tensor{m.EncodeImage(mb.Field("image")), m.EncodeText(mb.Field("text"))}
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
