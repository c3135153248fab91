package mamba

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// TrainConfig is `torchfit mamba train`: the harness's shared settings
// (the seed's schedule among them: LR, MaxSteps, Warmup, CheckpointEvery,
// ClipNorm) and the seed's model, vram and training sections.
type TrainConfig struct {
	recipes.Common
	Model ModelConfig
	// ModelSize names the model for the log ("" when a config file or
	// flags gave it).
	ModelSize string
	// SeqLen is the training sequence length (the vram section's
	// max_seq_len); at most Model.MaxSeqLen.
	SeqLen     int
	CPUOffload bool
	Optim      Optim
	Scan       string // fused, chunked, sequential, parallel
	ScanChunk  int
	// EvalTokens caps the held-out tokens scored per evaluation (0: all).
	EvalTokens int
	// Settings says where the settings came from (the --vram row), for
	// the run's log ("": nothing to say).
	Settings string
	Events   train.Sink
}

// Validate checks the settings a user gives.
func (c TrainConfig) Validate() error {
	if err := c.Model.withDefaults().Validate(); err != nil {
		return &recipes.ConfigError{Field: "model", Value: "", Err: err}
	}
	if c.Model.VocabSize != VocabSize {
		return &recipes.ConfigError{Field: "vocab-size", Value: c.Model.VocabSize,
			Reason: fmt.Sprintf("the GPT-2 tokenizer (%s) has %d tokens", TokenizerName, VocabSize)}
	}
	if c.SeqLen < 1 || c.SeqLen > MaxSeqLimit {
		return &recipes.ConfigError{Field: "max-seq-len", Value: c.SeqLen, Reason: fmt.Sprintf("must be in [1, %d]", MaxSeqLimit)}
	}
	if c.Model.MaxSeqLen > 0 && c.SeqLen > c.Model.MaxSeqLen {
		return &recipes.ConfigError{Field: "max-seq-len", Value: c.SeqLen,
			Reason: fmt.Sprintf("longer than the model's max_seq_len %d", c.Model.MaxSeqLen)}
	}
	if err := c.Common.Validate(); err != nil {
		return err
	}
	o := c.Optim
	for _, f := range []struct {
		name string
		v    float64
		ok   bool
	}{
		{"adam-beta1", o.Beta1, o.Beta1 >= 0 && o.Beta1 < 1},
		{"adam-beta2", o.Beta2, o.Beta2 >= 0 && o.Beta2 < 1},
		{"adam-epsilon", o.Eps, o.Eps > 0},
		{"label-smoothing", o.LabelSmoothing, o.LabelSmoothing >= 0 && o.LabelSmoothing < 1},
	} {
		if !f.ok || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return &recipes.ConfigError{Field: f.name, Value: f.v, Reason: "out of range"}
		}
	}
	if err := recipes.CheckDecay(c.LR, o.WeightDecay); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"eval-interval", o.EvalInterval}, {"logging-steps", o.LoggingSteps}, {"eval-tokens", c.EvalTokens}} {
		if f.v < 0 {
			return &recipes.ConfigError{Field: f.name, Value: f.v, Reason: "must not be negative"}
		}
	}
	if _, err := scan.Parse(c.Scan, c.ScanChunk); err != nil {
		return &recipes.ConfigError{Field: "scan", Value: c.Scan, Err: err}
	}
	return nil
}

// Result is what Train reports.
type Result struct {
	Params      int64
	Steps       int
	MicroBatch  int
	Accum       int
	TrainLoss   float64 // mean of the last logged window
	Eval        EvalResult
	Start       EvalResult // before training (zero when resumed)
	Checkpoint  string
	PeakMemory  int64
	TokensPerS  float64 // training tokens per wall second
	CPUTime     time.Duration
	Precision   amp.Choice
	Interrupted bool
	// Curve is the held-out loss at every evaluation, with the process's
	// CPU time then.
	Curve []CurvePoint
}

// CurvePoint is one evaluation during training.
type CurvePoint struct {
	Step       int
	CPUMinutes float64
	Eval       EvalResult
}

// checkpoint meta: what eval and generate need to rebuild the model.
type modelMeta struct {
	Recipe    string      `json:"recipe"`
	Model     ModelConfig `json:"model"`
	Tokenizer string      `json:"tokenizer"`
	SeqLen    int         `json:"seq_len"`
	Scan      string      `json:"scan"`
	ScanChunk int         `json:"scan_chunk"`
}

func metaDict(m modelMeta) *ptfile.Dict {
	b, _ := json.Marshal(m)
	return ptfile.NewDict("recipe", "mamba", "config", string(b))
}

// ReadModelMeta reads a checkpoint's model settings.
func ReadModelMeta(f *ckpt.File) (modelMeta, error) {
	var mm modelMeta
	meta := f.Meta()
	if meta == nil {
		return mm, checkpointError(f.Path, errors.New("no meta: not a torchfit checkpoint"))
	}
	r, _ := meta.Get("recipe")
	if r != "mamba" {
		return mm, checkpointError(f.Path, fmt.Errorf("a checkpoint of recipe %v, not mamba", r))
	}
	s, _ := meta.Get("config")
	str, ok := s.(string)
	if !ok {
		return mm, checkpointError(f.Path, errors.New("meta.config missing"))
	}
	if err := json.Unmarshal([]byte(str), &mm); err != nil {
		return mm, checkpointError(f.Path, fmt.Errorf("meta.config: %w", err))
	}
	if err := mm.Model.Validate(); err != nil {
		return mm, checkpointError(f.Path, err)
	}
	return mm, nil
}

// checkpointError is a mamba checkpoint that cannot be used (the shared
// recipes.CheckpointError: a command line exits 2).
func checkpointError(path string, err error) error {
	return &recipes.CheckpointError{Recipe: "mamba", Path: path, Err: err}
}

// windows is a token file cut into sequences of seq+1 tokens, one after
// another: sample i holds inputs x = tokens[i·seq : i·seq+seq] and targets
// y shifted by one.
type windows struct {
	ids []uint16
	seq int
	n   int
}

func newWindows(t *Tokens, seq, limit int) windows {
	ids := t.IDs()
	if limit > 0 && len(ids) > limit+1 {
		ids = ids[:limit+1]
	}
	return windows{ids: ids, seq: seq, n: max(len(ids)-1, 0) / seq}
}

func (w windows) Len() int { return w.n }

func (w windows) Get(i int) (data.Sample, error) {
	xs := make([]int64, w.seq+1)
	for k := range xs {
		xs[k] = int64(w.ids[i*w.seq+k])
	}
	return data.Sample{"x": torch.FromSlice(xs[:w.seq], nil), "y": torch.FromSlice(xs[1:], nil)}, nil
}

// tokenCount is the engine's CountFunc: the micro-batch's target tokens.
func tokenCount(mb *data.Batch) float64 { return float64(mb.Field("y").Numel()) }

// ParamGroups splits the model's parameters for AdamW as the recipe trains
// it: weight decay wd for the projections and the convolution, none for
// norms, biases, A_log, D and the (tied) embedding.
func (m *LM) ParamGroups(wd float64) []nn.ParamGroup {
	var decay, none []nn.Named
	for _, p := range nn.Parameters(m) {
		name := p.Name
		switch {
		case p.T.Dim() < 2, strings.HasSuffix(name, ".A_log"), strings.HasSuffix(name, ".D"),
			strings.HasSuffix(name, "bias"), strings.Contains(name, "embedding"), strings.Contains(name, "norm"):
			none = append(none, p)
		default:
			decay = append(decay, p)
		}
	}
	return []nn.ParamGroup{
		nn.ParamGroup{Params: decay}.WithWeightDecay(wd),
		nn.ParamGroup{Params: none}.WithWeightDecay(0),
	}
}

// cpuTime is the process's CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Train trains (or resumes) a Mamba LM on the token files in cfg.Data.
func Train(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	// In a tensor scope: what set-up leaves behind (initialisers'
	// intermediates, the offload's copies) is freed when it ends.
	torch.Main().Do(func() { err = torch.TidyErr(func() error { res, err = trainLM(ctx, cfg); return err }) })
	return res, err
}

func trainLM(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	run, err := recipes.Begin(cfg.Common, cfg.Events)
	if err != nil {
		return res, err
	}
	defer run.End()
	logf := run.Logf
	if cfg.Settings != "" {
		logf("%s", cfg.Settings)
	}
	res.Precision = run.Precision
	cpu0 := cpuTime()
	d, err := openData(cfg)
	if err != nil {
		return res, err
	}
	defer d.close()
	mcfg, err := modelFor(cfg, logf)
	if err != nil {
		return res, err
	}
	sc, _ := scan.Parse(cfg.Scan, cfg.ScanChunk)
	torch.ManualSeed(cfg.Seed)
	m, err := NewLM(mcfg)
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	m.Scan, m.Checkpointing = sc, cfg.GradCheckpointing
	if cfg.Device != torch.CPU {
		nn.To(m, cfg.Device, torch.Float32)
	}
	res.Params = nn.NumParams(m)
	name := modelLabel(cfg, mcfg)
	logf("model %s: d_model %d, %d layers, d_state %d, expand %d, %s parameters (%.1fM, %s of float32 weights); scan %s (chunks of %d)",
		name, mcfg.DModel, mcfg.NLayers, mcfg.DState, mcfg.Expand, recipes.Commas(res.Params), float64(res.Params)/1e6,
		torch.FormatBytes(nn.ParamBytes(m)), sc.Name(), max(cfg.ScanChunk, scan.DefaultChunk*boolInt(cfg.ScanChunk == 0)))
	logf("data %s: %s training tokens, %s held out; unigram baseline %.3f nats/token", cfg.Data,
		recipes.Commas(d.meta.TrainTokens), recipes.Commas(d.meta.ValidTokens), d.meta.Unigram)
	if cfg.Device.IsCUDA() {
		logf("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set by torchfit)")
	}
	opt, free, err := optimizerFor(cfg, m, logf)
	if err != nil {
		return res, err
	}
	defer free()
	effective := cfg.EffectiveBatch()
	total := cmp.Or(cfg.MaxSteps, d.train.Len()/effective*cfg.Epochs)
	sched := nn.NewSchedule(opt, schedule(cfg.Warmup, max(total, 1)))
	defer sched.Free()
	p := &progress{cfg: cfg, m: m, d: d, res: &res, cpu0: cpu0, logf: logf, emit: run.Events(), precision: run.Precision.Precision,
		perEpoch: max(1, d.train.Len()/effective)}
	ls := cfg.Optim.LabelSmoothing
	out, err := run.Fit(ctx, recipes.Job{
		Model: m, Opt: opt, Sched: sched, Trainer: func(c *train.Config) { c.Count = tokenCount },
		Loss:    func(b *data.Batch) *torch.Tensor { return m.Loss(b.Field("x"), b.Field("y"), ls) },
		Dataset: d.train, Collate: data.Collate,
		Ready: func(tr *train.Trainer) { tr.OnStep = p.step },
		Start: func(*train.Trainer) error { return p.begin() },
		Meta:  metaDict(modelMeta{Recipe: "mamba", Model: mcfg, Tokenizer: TokenizerName, SeqLen: cfg.SeqLen, Scan: sc.Name(), ScanChunk: cfg.ScanChunk}),
	})
	res.Checkpoint, res.Interrupted = out.Checkpoint, out.Interrupted
	if err != nil {
		return res, err
	}
	if p.evalErr != nil {
		return res, p.evalErr
	}
	res.Steps, res.MicroBatch, res.Accum, res.PeakMemory = out.Steps, out.MicroBatch, out.Accum, out.PeakMemory
	if !p.wallStart.IsZero() {
		res.TokensPerS = p.tokens / time.Since(p.wallStart).Seconds()
	}
	if len(res.Curve) == 0 || res.Curve[len(res.Curve)-1].Step != res.Steps {
		if err := p.record(res.Steps); err != nil {
			return res, err
		}
	}
	res.CPUTime = cpuTime() - cpu0
	return res, nil
}

// schedule is the run's learning rate: Hugging Face's cosine schedule
// (linear warm-up over warmup steps, then a half cosine to 0.1 of the
// base at step total), except that the warm-up counts the optimizer step
// being taken (step+1), as nanoGPT's get_lr does: the first step trains
// at lr/warmup, not at 0 — a 1-step run, or the first step of a 2000-step
// warm-up, learns something. Without a warm-up it is Hugging Face's.
func schedule(warmup, total int) nn.LRLambda {
	f := nn.WarmupCosineLR(warmup, total, 0.1)
	return func(step int) float64 {
		if step < warmup {
			return float64(step+1) / float64(warmup)
		}
		return f(step)
	}
}

// lmData is a run's token files and their windows.
type lmData struct {
	meta                 Meta
	trainToks, validToks *Tokens
	train, valid         windows
}

func (d *lmData) close() {
	d.trainToks.Close()
	d.validToks.Close()
}

// openData opens the token files in cfg.Data and cuts them into
// sequences of cfg.SeqLen: a training split of at least one effective
// batch and a held-out split of at least one sequence.
func openData(cfg TrainConfig) (*lmData, error) {
	meta, err := ReadMeta(cfg.Data)
	if err != nil {
		return nil, err
	}
	d := &lmData{meta: meta}
	if d.trainToks, err = OpenTokens(filepath.Join(cfg.Data, trainFile), VocabSize); err != nil {
		return nil, err
	}
	if d.validToks, err = OpenTokens(filepath.Join(cfg.Data, validFile), VocabSize); err != nil {
		d.trainToks.Close()
		return nil, err
	}
	d.train, d.valid = newWindows(d.trainToks, cfg.SeqLen, 0), newWindows(d.validToks, cfg.SeqLen, cfg.EvalTokens)
	switch {
	case d.train.Len() < cfg.EffectiveBatch():
		d.close()
		return nil, recipes.Usagef("mamba: %s holds %d sequences of %d tokens, fewer than one effective batch of %d", cfg.Data, d.train.Len(), cfg.SeqLen, cfg.EffectiveBatch())
	case d.valid.Len() == 0:
		d.close()
		return nil, recipes.Usagef("mamba: the held-out split has %d tokens, fewer than one sequence of %d", d.validToks.Len(), cfg.SeqLen)
	}
	return d, nil
}

// modelFor is the model a run trains: cfg's, or the checkpoint's when
// resuming.
func modelFor(cfg TrainConfig, logf func(string, ...any)) (ModelConfig, error) {
	mcfg := cfg.Model.withDefaults()
	if cfg.Resume == "" {
		return mcfg, nil
	}
	f, err := ckpt.ReadParts(cfg.Resume, "meta") // no tensor: the trainer reads the file once more
	if err != nil {
		return mcfg, err
	}
	mm, err := ReadModelMeta(f)
	f.Free()
	if err != nil {
		return mcfg, err
	}
	if mm.Model != mcfg {
		logf("resuming %s: its model, d_model %d, %d layers, d_state %d", cfg.Resume,
			mm.Model.DModel, mm.Model.NLayers, mm.Model.DState)
	}
	return mm.Model, nil
}

// optimizerFor is the seed's AdamW over the model's parameter groups,
// with its state on the CPU under cfg.CPUOffload; free releases it.
func optimizerFor(cfg TrainConfig, m *LM, logf func(string, ...any)) (nn.Optimizer, func(), error) {
	o := cfg.Optim
	adam := nn.AdamConfig{LR: cfg.LR, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay}
	groups := m.ParamGroups(o.WeightDecay)
	if !cfg.CPUOffload {
		a := nn.NewAdamWGroups(groups, adam)
		return a, a.Free, nil
	}
	off, err := train.NewOffload(groups, func(g []nn.ParamGroup) nn.Optimizer { return nn.NewAdamWGroups(g, adam) }, train.OffloadOptions{})
	if err != nil {
		return nil, nil, err
	}
	logf("use_cpu_offload: AdamW's state lives on the CPU (%s host copies)", torch.FormatBytes(off.HostBytes()))
	return off, off.Free, nil
}

// progress is what a run logs and records as it trains: the seed's
// logging_steps lines (loss, learning rate, gradient norm, tokens/s) and
// its eval_interval held-out scores, the curve of which Result keeps.
type progress struct {
	cfg       TrainConfig
	m         *LM
	d         *lmData
	res       *Result
	cpu0      time.Duration
	logf      func(string, ...any)
	emit      train.Sink // the run's events (nil: none)
	perEpoch  int        // optimizer steps in an epoch
	precision amp.Precision
	wallStart time.Time
	tokens    float64
	window    struct {
		loss, count float64
		start       time.Time
	}
	evalErr error
}

// begin runs before the first step: the baseline score of a new run.
func (p *progress) begin() error {
	if p.cfg.Resume == "" {
		if err := p.record(0); err != nil {
			return err
		}
		p.res.Start = p.res.Eval
	}
	p.wallStart = time.Now()
	p.window.start = p.wallStart
	return nil
}

func (p *progress) step(info train.StepInfo) {
	o := p.cfg.Optim
	p.tokens += info.Count
	p.window.loss += info.Loss * info.Count
	p.window.count += info.Count
	if o.LoggingSteps > 0 && info.Step%o.LoggingSteps == 0 {
		el := time.Since(p.window.start).Seconds()
		p.res.TrainLoss = p.window.loss / p.window.count
		p.logf("step %d: loss %.4f, lr %.2e, grad norm %.3f, %.0f tokens/s, memory %s (peak %s)", info.Step, p.res.TrainLoss, info.LR, info.GradNorm,
			p.window.count/el, torch.FormatBytes(info.Memory.Allocated), torch.FormatBytes(info.Memory.PeakAllocated))
		p.window.loss, p.window.count, p.window.start = 0, 0, time.Now()
	}
	if o.EvalInterval > 0 && info.Step%o.EvalInterval == 0 && p.evalErr == nil {
		p.evalErr = p.record(info.Step)
	}
}

// record scores the held-out split after step and adds it to the curve.
func (p *progress) record(step int) error {
	r, err := evalWindows(p.m, p.d.valid, p.cfg.MicroBatch*2, p.cfg.Device, p.precision)
	if err != nil {
		return err
	}
	r.finish(p.d.meta, int64(p.d.valid.Len()*p.d.valid.seq))
	p.res.Eval = r
	cpuMin := (cpuTime() - p.cpu0).Minutes()
	p.res.Curve = append(p.res.Curve, CurvePoint{Step: step, CPUMinutes: cpuMin, Eval: r})
	epoch := 0 // the baseline, before training
	if step > 0 {
		epoch = (step-1)/p.perEpoch + 1
	}
	// One event, one line: the recipe's wording is the event's text (the
	// front end's "epoch N: values" would say it twice).
	if p.emit == nil {
		return nil
	}
	p.emit(train.EvalEvent{Step: step, Epoch: epoch, Values: map[string]float64{"val_loss": r.Loss, "val_bits_per_char": r.BitsPerChar,
		"val_perplexity": r.Perplexity, "cpu_minutes": cpuMin},
		Text: fmt.Sprintf("step %d: held-out loss %.4f nats/token (%.3f bits/char, perplexity %.1f) after %.2f CPU minutes", step, r.Loss,
			r.BitsPerChar, r.Perplexity, cpuMin)})
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
