package asr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// TrainConfig is `torchfit asr train`: the harness's shared settings and
// the KonkaniVani guide's own knobs. Common.MemoryLimit and
// MemoryFraction cap the device's memory for the run; Common's data
// parallel settings apply with Group.
type TrainConfig struct {
	recipes.Common
	Preset        string // original, optimized, minimal, tiny
	DModel        int64  // overrides the preset when > 0
	EncoderLayers int
	DecoderLayers int
	Dropout       *float64 // overrides the preset's dropout (a new run)
	SpecAugment   bool
	ValidLimit    int // utterances scored each epoch (0: all)
	// PadMultiple pads a batch's frames to a multiple of it (0:
	// FrameMultiple; 1: to the longest utterance only).
	PadMultiple int
	// Events receives the run's events: the training core's and the
	// recipe's messages (nil: none). The CLI renders them (package report).
	Events train.Sink
	// Group makes training data parallel over its ranks (nil: one
	// process): MicroBatch and Accum are each rank's, so the global batch
	// is MicroBatch × Accum × ranks; every rank trains its shard of each
	// batch, gradients are all-reduced in buckets of Common.BucketMB MiB
	// (0: distributed.DefaultBucketBytes) during backward (after it with
	// AllReduceAfterBackward), rank 0 writes the checkpoints. ZeRO shards
	// the optimizer state over the ranks.
	Group *distributed.Group
}

// Result is what Train reports.
type Result struct {
	Params       int64
	Steps        int
	MicroBatch   int
	Accum        int
	CERStart     float64 // validation CER before training (NaN when resumed)
	CER          float64 // validation CER at the end
	ValidLoss    float64
	Checkpoint   string // the last checkpoint this run wrote ("" with no CheckpointDir)
	PeakMemory   int64
	OOMEvents    int
	EpochsDone   int
	Interrupted  bool
	FoundBatches *memplan.FindResult
	Precision    amp.Choice // the precision trained in, and why
}

// lossFn is the trainer's loss on a micro-batch.
func lossFn(m *Conformer) func(b *data.Batch) *torch.Tensor {
	return m.BatchLoss
}

// modelMeta is stored in checkpoints so eval/transcribe rebuild the model.
type modelMeta struct {
	Preset string      `json:"preset"`
	Config ModelConfig `json:"config"`
	Vocab  []string    `json:"vocab"`
}

func metaDict(preset string, cfg ModelConfig, v *Vocab) *ptfile.Dict {
	cfg.GradCheckpointing = false
	b, _ := json.Marshal(modelMeta{Preset: preset, Config: cfg, Vocab: v.Tokens()})
	return ptfile.NewDict("recipe", "asr", "model", string(b))
}

// Train trains (or resumes) a conformer on the corpus in cfg.Data.
func Train(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	torch.Main().Do(func() { res, err = trainConformer(ctx, cfg) })
	return res, err
}

// trainConformer is Train on libtorch's thread: the recipe's data and
// model, its optimizer and data parallelism, on the shared loop.
func trainConformer(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	run, err := recipes.Begin(cfg.Common, cfg.Events)
	if err != nil {
		return res, err
	}
	defer run.End()
	logf := run.Logf
	res.Precision, res.CERStart = run.Precision, math.NaN()
	d, err := loadData(cfg)
	if err != nil {
		return res, err
	}
	defer d.feat.Close()
	m, err := buildModel(cfg, d, logf)
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	res.Params = nn.NumParams(m)
	opt := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.01), nn.AdamWDefaults(cfg.LR))
	defer opt.Free()
	counted := &countedOptimizer{Optimizer: opt}
	p, err := parallelFor(cfg, m, counted, logf)
	if err != nil {
		return res, err
	}
	defer p.close()
	defer func() {
		if err == nil && p.dp != nil {
			err = logParallel(p.dp, counted, logf)
		}
	}()
	effective := cfg.EffectiveBatch()
	stepsPerEpoch := d.train.Len() / (effective * p.world)
	if stepsPerEpoch == 0 {
		return res, recipes.Usagef("asr: the training split has %d utterances, fewer than one effective batch of %d", d.train.Len(), effective*p.world)
	}
	sched := nn.NewSchedule(opt, nn.WarmupCosineLR(cfg.Warmup, recipes.TotalSteps(stepsPerEpoch, cfg.Epochs, cfg.MaxSteps), 0.05))
	defer sched.Free()
	evaluate := func() (float64, float64, error) {
		er, loss, err := scoreCorpus(m, d.valid, cfg.Device, cfg.MicroBatch*2, true)
		return er.CER(), loss, err
	}
	var lastVals map[string]float64
	lastAt := -1 // the step lastVals scored
	timer := &stepTimer{}
	job := recipes.Job{
		Model: m, Opt: p.stepper, Sched: sched, Loss: lossFn(m), Trainer: func(c *train.Config) { c.Parallel = p.par },
		Dataset: dataset(d.train), Collate: d.collate, Loader: func(o *data.Options) { o.Shard = data.Shard{Rank: p.rank, World: p.world} },
		Ready: func(tr *train.Trainer) { tr.OnStep = timer.observe },
		Start: func(tr *train.Trainer) error { return startRun(cfg, tr, d, &res, evaluate, logf) },
		Eval: func(epoch int) (map[string]float64, error) {
			d.train.SetEpoch(epoch)
			res.EpochsDone = epoch
			cer, loss, err := evaluate()
			lastVals, lastAt = map[string]float64{"val_cer": cer, "val_loss": loss}, timer.last
			return lastVals, err
		},
		Meta: metaDict(d.preset, d.mcfg, d.vocab),
	}
	tr, err := run.Trainer(job)
	if err != nil {
		return res, err
	}
	if cfg.DryRun { // the caller prints the table; nothing is trained or written
		found, err := recipes.AutoBatch(tr, longest(d.train), "utterances", func(string, ...any) {})
		res.FoundBatches = &found
		return res, err
	}
	out, err := run.Run(ctx, tr, job)
	res.Checkpoint, res.Interrupted = out.Checkpoint, out.Interrupted
	if err != nil {
		return res, err
	}
	timer.log(logf, counted.grew)
	res.Steps, res.MicroBatch, res.Accum, res.OOMEvents, res.PeakMemory = out.Steps, out.MicroBatch, out.Accum, out.OOMEvents, out.PeakMemory
	if lastVals == nil || lastAt != res.Steps || res.Interrupted { // steps after the last epoch's score (--max-steps): score the end
		res.CER, res.ValidLoss, err = evaluate()
		return res, err
	}
	res.CER, res.ValidLoss = lastVals["val_cer"], lastVals["val_loss"]
	return res, nil
}

// buildModel makes the run's conformer, its initial weights from the
// seed alone, on the device.
func buildModel(cfg TrainConfig, d corpora, logf func(string, ...any)) (*Conformer, error) {
	torch.ManualSeed(cfg.Seed)
	m, err := NewConformer(d.mcfg)
	if err != nil {
		return nil, err
	}
	m.Vocab = d.vocab
	if cfg.Device != torch.CPU {
		nn.To(m, cfg.Device, torch.Float32)
	}
	n := nn.NumParams(m)
	logf("model %s: d_model %d, %d encoder / %d decoder layers, %s parameters (%.2fM), vocabulary %d", d.preset, d.mcfg.DModel,
		d.mcfg.EncoderLayers, d.mcfg.DecoderLayers, recipes.Commas(n), float64(n)/1e6, d.vocab.Size())
	return m, nil
}

// corpora are a run's data: the vocabulary and model (the checkpoint's
// when resuming), the features, the splits and the collate function.
type corpora struct {
	preset       string
	vocab        *Vocab
	mcfg         ModelConfig
	feat         *Featurizer
	train, valid *Corpus
	collate      func([]data.Sample) (*data.Batch, error)
}

// checkCorpus refuses a data directory without a training manifest.
func checkCorpus(dir string) error {
	manifest := filepath.Join(dir, "train.jsonl")
	if _, err := os.Stat(manifest); err != nil {
		return recipes.Usagef("asr: no corpus in %s (%s missing): create one with `torchfit asr data --out %s`", dir, manifest, dir)
	}
	return nil
}

// loadData reads the corpus in cfg.Data and decides the model: a preset
// (with cfg's overrides) and a vocabulary from the training split, or the
// checkpoint's when resuming.
func loadData(cfg TrainConfig) (d corpora, err error) {
	if err := checkCorpus(cfg.Data); err != nil {
		return d, err
	}
	trainManifest := filepath.Join(cfg.Data, "train.jsonl")
	d.preset = cfg.Preset
	if cfg.Resume != "" {
		meta, err := ReadModelMeta(cfg.Resume)
		if err != nil {
			return d, err
		}
		if d.vocab, err = NewVocab(meta.Vocab); err != nil {
			return d, checkpointError(cfg.Resume, err)
		}
		if cfg.Preset != "" && meta.Preset != "" && !strings.EqualFold(cfg.Preset, meta.Preset) {
			return d, recipes.Usagef("asr: checkpoint %s was trained with preset %q, not %q (drop --preset or pass --preset %s)",
				cfg.Resume, meta.Preset, cfg.Preset, meta.Preset)
		}
		d.mcfg, d.preset = meta.Config, meta.Preset
	} else {
		if d.vocab, err = BuildVocabFromManifest(trainManifest); err != nil {
			return d, err
		}
		if d.mcfg, err = Preset(cfg.Preset, d.vocab.Size()); err != nil {
			return d, err
		}
		if cfg.DModel > 0 {
			d.mcfg.DModel = cfg.DModel
		}
		if cfg.EncoderLayers > 0 {
			d.mcfg.EncoderLayers = cfg.EncoderLayers
		}
		if cfg.DecoderLayers > 0 {
			d.mcfg.DecoderLayers = cfg.DecoderLayers
		}
		if cfg.Dropout != nil {
			d.mcfg.Dropout = *cfg.Dropout
		}
	}
	d.mcfg.GradCheckpointing = cfg.GradCheckpointing
	if d.feat, err = NewFeaturizer(16000, 400, 160, int(d.mcfg.NumMels)); err != nil {
		return d, err
	}
	fail := func(err error) (corpora, error) { d.feat.Close(); return d, err }
	if d.train, err = LoadCorpus(trainManifest, d.vocab, d.feat); err != nil {
		return fail(err)
	}
	if cfg.SpecAugment {
		d.train = d.train.WithSpecAugment(DefaultSpecAugment(), cfg.Seed)
	}
	if d.valid, err = LoadCorpus(filepath.Join(cfg.Data, "valid.jsonl"), d.vocab, d.feat); err != nil {
		return fail(err)
	}
	if cfg.ValidLimit > 0 && d.valid.Len() > cfg.ValidLimit {
		d.valid.Utts = d.valid.Utts[:cfg.ValidLimit]
	}
	d.collate = Collate
	if cfg.PadMultiple != 0 {
		d.collate = CollatePadded(cfg.PadMultiple)
	}
	return d, nil
}

// parallel is a run's data parallelism: the optimizer the trainer steps
// (ZeRO's shards or the counted AdamW), the all-reduce, and this rank.
type parallel struct {
	stepper     nn.Optimizer
	par         train.Parallel
	dp          *distributed.DataParallel
	rank, world int
}

func (p parallel) close() {
	if p.dp != nil {
		p.dp.Close()
	}
}

// parallelFor sets data parallelism up over cfg.Group (one process
// without it).
func parallelFor(cfg TrainConfig, m *Conformer, counted *countedOptimizer, logf func(string, ...any)) (parallel, error) {
	p := parallel{stepper: counted, world: 1}
	g := cfg.Group
	if g == nil {
		return p, nil
	}
	if cfg.AutoBatch {
		return p, recipes.Usagef("asr: --auto-batch and --dry-run measure one process: run them without a launcher")
	}
	p.rank, p.world = g.Rank(), g.Size()
	dp, err := distributed.NewDataParallel(g, m, distributed.DataParallelOptions{BucketBytes: int64(cfg.BucketMB) << 20, AfterBackward: cfg.AllReduceAfterBackward})
	if err != nil {
		return p, err
	}
	p.dp, p.par = dp, dp
	if cfg.ZeRO {
		z, err := distributed.NewZeRO(g, counted)
		if err != nil {
			dp.Close()
			return p, err
		}
		p.stepper = z
		logf("ZeRO-1: the optimizer state is sharded over the %d ranks", p.world)
	}
	logf("%v", dp)
	return p, nil
}

// startRun runs once Fit has resumed and checked the checkpoint
// directory: the --auto-batch search (a new run) and the baseline
// validation.
func startRun(cfg TrainConfig, tr *train.Trainer, d corpora, res *Result, evaluate func() (float64, float64, error), logf func(string, ...any)) error {
	if cfg.AutoBatch && cfg.Resume == "" {
		found, err := recipes.AutoBatch(tr, longest(d.train), "utterances", logf)
		if err != nil {
			return err
		}
		res.FoundBatches = &found
	}
	if cfg.Resume == "" {
		cer, loss, err := evaluate()
		if err != nil {
			return err
		}
		res.CERStart = cer
		logf("validation before training: CER %.3f, loss %.3f", cer, loss)
	}
	return nil
}

// stepTimer times the process's optimizer steps after its first (which
// pays for oneDNN's kernels; a resumed run's first is not step 1).
type stepTimer struct {
	total time.Duration
	n     int
	seen  bool
	first int // the first step timed
	last  int // the last step seen
}

func (t *stepTimer) observe(i train.StepInfo) {
	t.last = i.Step
	if !t.seen {
		t.seen = true
		return
	}
	if t.n == 0 {
		t.first = i.Step
	}
	t.total, t.n = t.total+i.Duration, t.n+1
}

func (t *stepTimer) log(logf func(string, ...any), optState int64) {
	if t.n > 0 {
		logf("mean step time %.1f ms (steps %d–%d); optimizer state %s (its tensors after the first update)",
			float64(t.total.Microseconds())/1e3/float64(t.n), t.first, t.last, torch.FormatBytes(optState))
	}
}

// longest returns a batch of c's n longest utterances: --auto-batch's
// worst case.
func longest(c *Corpus) func(n int) (*data.Batch, error) {
	order := make([]int, c.Len())
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return c.Frames(order[a]) > c.Frames(order[b]) })
	ds := dataset(c)
	return func(n int) (*data.Batch, error) { return recipes.CollateAt(ds, Collate, order[:min(n, len(order))]) }
}

// checkpointError is a asr checkpoint that cannot be used (the shared
// recipes.CheckpointError: a command line exits 2).
func checkpointError(path string, err error) error {
	return &recipes.CheckpointError{Recipe: "asr", Path: path, Err: err}
}

// Bounds on a checkpoint's model description, far above the presets: a
// description is checked against them before any of its numbers is
// multiplied or allocated, and then against the weights' shapes.
const (
	maxDModel    = 1 << 12
	maxLayers    = 1 << 10
	maxFFDim     = 1 << 18
	maxKernel    = 1 << 10
	maxVocab     = 1 << 20
	maxMels      = 1 << 12
	maxPositions = 1 << 16 // subsampled frames (43 minutes of audio): the positional tables, not in the file
)

// readCheckpoint loads an ASR checkpoint once and returns its model
// description and weights, checked against each other. free releases the
// weights.
func readCheckpoint(path string) (meta modelMeta, weights torch.StateDict, free func(), err error) {
	f, err := ckpt.ReadParts(path, "meta", "model") // not the optimizer's state
	if err != nil {
		var ce *ckpt.Error
		if errors.Is(err, torch.ErrOutOfMemory) || !errors.As(err, &ce) {
			return meta, nil, nil, fmt.Errorf("asr: checkpoint %s: %w", path, err)
		}
		return meta, nil, nil, checkpointError(path, ce.Err)
	}
	bad := func(format string, args ...any) (modelMeta, torch.StateDict, func(), error) {
		f.Free()
		return meta, nil, nil, checkpointError(path, fmt.Errorf(format, args...))
	}
	md := f.Meta()
	if md == nil {
		return bad("not an ASR checkpoint (no model description)")
	}
	if r, _ := md.Get("recipe"); r != nil && r != "asr" {
		return bad("is a torchfit %v checkpoint, not an ASR one", r)
	}
	str, ok := func() (string, bool) { x, _ := md.Get("model"); s, ok := x.(string); return s, ok }()
	if !ok {
		return bad("not an ASR checkpoint (no model description)")
	}
	if err := json.Unmarshal([]byte(str), &meta); err != nil {
		return bad("bad model description: %v", err)
	}
	if weights, err = f.Tensors("model"); err != nil {
		var ce *ckpt.Error
		if errors.As(err, &ce) {
			return bad("model weights: %v", ce.Err)
		}
		return bad("model weights: %v", err)
	}
	if err := checkMeta(meta, weights.Map()); err != nil {
		return bad("%v", err)
	}
	return meta, weights, f.Free, nil
}

// checkMeta checks a model description against sane bounds and against
// the shapes of the weights stored with it, so that a corrupt or crafted
// description cannot make NewConformer allocate more than the file holds.
func checkMeta(meta modelMeta, w map[string]*torch.Tensor) error {
	c := meta.Config
	for _, b := range []struct {
		name      string
		v, lo, hi int64
	}{
		{"d_model", c.DModel, 2, maxDModel},
		{"attention heads", c.Heads, 1, maxDModel},
		{"encoder layers", int64(c.EncoderLayers), 1, maxLayers},
		{"decoder layers", int64(c.DecoderLayers), 0, maxLayers},
		{"feed-forward size", c.FFDim, 1, maxFFDim},
		{"decoder feed-forward size", c.DecoderFFDim, 0, maxFFDim},
		{"convolution kernel", c.ConvKernel, 1, maxKernel},
		{"output classes", c.Vocab, UNKID + 1, maxVocab},
		{"mel bins", c.NumMels, 7, maxMels},
		{"maximum length", c.MaxLen, 0, maxPositions},
	} {
		if b.v < b.lo || b.v > b.hi {
			return fmt.Errorf("model description: %s %d outside [%d, %d]", b.name, b.v, b.lo, b.hi)
		}
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("model description: %w", err)
	}
	if int64(len(meta.Vocab)) != c.Vocab {
		return fmt.Errorf("model description: %d vocabulary tokens for %d output classes", len(meta.Vocab), c.Vocab)
	}
	d := c.DModel
	want := []struct {
		key   string
		shape []int64
	}{
		{"ctc_head.weight", []int64{c.Vocab, d}},
		{"encoder.subsample.conv.0.weight", []int64{d, 1, 3, 3}},
		{"encoder.subsample.out.weight", []int64{d, d * SubsampledLength(c.NumMels)}},
		{"encoder.layers.0.ff1.linear1.weight", []int64{c.FFDim, d}},
		{"encoder.layers.0.conv_module.depthwise_conv.weight", []int64{d, 1, c.ConvKernel}},
	}
	if c.DecoderLayers > 0 {
		want = append(want, []struct {
			key   string
			shape []int64
		}{
			{"decoder.embed.weight", []int64{c.Vocab, d}},
			{"decoder.out.weight", []int64{c.Vocab, d}},
			{"decoder.layers.0.linear1.weight", []int64{c.decFF(), d}},
		}...)
	}
	for _, x := range want {
		t, ok := w[x.key]
		if !ok {
			return fmt.Errorf("the weights have no %s", x.key)
		}
		if got := t.Shape(); !slices.Equal(got, x.shape) {
			return fmt.Errorf("model description (d_model %d, %d classes, %d mel bins, feed-forward %d/%d, kernel %d) disagrees with the weights: %s is %v, not %v",
				d, c.Vocab, c.NumMels, c.FFDim, c.decFF(), c.ConvKernel, x.key, got, x.shape)
		}
	}
	for _, part := range []struct {
		prefix string
		n      int
	}{{"encoder.layers.", c.EncoderLayers}, {"decoder.layers.", c.DecoderLayers}} {
		if got := recipes.CountLayers(w, part.prefix); got != part.n {
			return fmt.Errorf("model description says %d %s, the weights have %d", part.n, strings.TrimSuffix(strings.ReplaceAll(part.prefix, ".", " "), " "), got)
		}
	}
	return nil
}

// ReadModelMeta reads the model configuration and vocabulary stored in a
// torchfit ASR checkpoint, checked against the weights' shapes (a
// *recipes.CheckpointError when they disagree or the file is not an ASR checkpoint).
func ReadModelMeta(path string) (modelMeta, error) {
	meta, _, free, err := readCheckpoint(path)
	if err != nil {
		return meta, err
	}
	free()
	return meta, nil
}

// LoadModel rebuilds the model of a checkpoint, with its weights, for
// evaluation or transcription. The file is read once; its model
// description is checked against the weights before anything is built.
func LoadModel(path string, dev torch.Device) (*Conformer, error) {
	meta, weights, free, err := readCheckpoint(path)
	if err != nil {
		return nil, err
	}
	defer free()
	vocab, err := NewVocab(meta.Vocab)
	if err != nil {
		return nil, checkpointError(path, err)
	}
	m, err := NewConformer(meta.Config)
	if err != nil {
		return nil, checkpointError(path, err)
	}
	m.Vocab = vocab
	if _, err := nn.LoadStateDict(m, weights, true); err != nil {
		nn.Free(m)
		return nil, checkpointError(path, err)
	}
	if dev != torch.CPU {
		nn.To(m, dev, torch.Float32)
	}
	nn.SetTraining(m, false)
	return m, nil
}

// NonFiniteWeights names the model's parameters and buffers that hold NaN
// or infinite values (a checkpoint of a diverged run).
func NonFiniteWeights(m nn.Module) []string {
	var bad []string
	for _, p := range nn.StateDict(m) {
		if !p.T.DType().IsFloat() {
			continue
		}
		torch.Tidy(func() {
			if p.T.IsFinite().All().Item() == 0 {
				bad = append(bad, p.Name)
			}
		})
	}
	return bad
}

// countedOptimizer measures the state the wrapped optimizer holds after
// its first Step: the bytes of its state tensors (AdamW's moments and
// step counts), whether the step created them or a resumed checkpoint
// loaded them before it (the allocator's growth over the first step,
// counted before, is 0 after a resume or a restart). Under ZeRO it is the
// inner optimizer, which holds this rank's share only.
type countedOptimizer struct {
	nn.Optimizer
	steps int
	grew  int64
}

func (c *countedOptimizer) Step() {
	c.Optimizer.Step()
	if c.steps++; c.steps == 1 {
		c.grew = stateBytes(c.Optimizer)
	}
}

// stateBytes is the bytes of o's per-parameter state tensors ("state.*"
// in State, not the hyperparameters).
func stateBytes(o nn.Optimizer) int64 {
	var n int64
	for _, st := range o.State() {
		if strings.HasPrefix(st.Name, "state.") {
			n += st.T.NBytes()
		}
	}
	return n
}

// logParallel logs, on rank 0, what the gradient all-reduce cost and each
// rank's optimizer state (one all-reduce: every rank calls it).
func logParallel(dp *distributed.DataParallel, counted *countedOptimizer, logf func(string, ...any)) error {
	st := dp.Stats()
	bytes := make([]float64, dp.World())
	bytes[dp.Rank()] = float64(counted.grew)
	if err := dp.SumFloats(bytes); err != nil {
		return err
	}
	if dp.Rank() != 0 || st.Steps == 0 {
		return nil
	}
	per := make([]string, len(bytes))
	for r, b := range bytes {
		per[r] = torch.FormatBytes(int64(b))
	}
	logf("all-reduce: %d bucket(s), %s a step, %d of %d started during backward; waited %.1f ms a step after backward; optimizer state by rank: %s",
		st.Buckets, torch.FormatBytes(st.Bytes), st.InBackward, st.Steps*st.Buckets,
		float64(st.Wait.Microseconds())/1e3/float64(st.Steps), strings.Join(per, ", "))
	return nil
}

// Bounds Validate puts on a TrainConfig: past them a value is a typo or a
// unit mistake, not a training run (a micro-batch of 16M utterances, a
// d_model of 10M).
const (
	MaxBatch  = recipes.MaxBatch // micro-batch, accumulation steps and their product
	MaxDModel = 1 << 16
	MaxLayers = 1024
	maxEpochs = 1 << 20
)

// ConfigError is an invalid TrainConfig setting. Field is named as the
// `torchfit asr train` flag that sets it (lr, micro-batch, ...).
type ConfigError = recipes.ConfigError

// Validate checks every hyperparameter before anything is loaded or
// built: counts in range, learning rate and clipping norm finite, a known
// preset and precision, a memory limit torch.ParseMemory reads. It returns
// a *ConfigError naming the first bad setting. Train calls it.
func (c TrainConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := recipes.CheckRanges(
		recipes.Between("epochs", int64(c.Epochs), 1, maxEpochs),
		recipes.Between("d-model", c.DModel, 0, MaxDModel),
		recipes.Between("encoder-layers", int64(c.EncoderLayers), 0, MaxLayers),
		recipes.Between("decoder-layers", int64(c.DecoderLayers), 0, MaxLayers),
		recipes.Between("valid-limit", int64(c.ValidLimit), 0, math.MaxInt64),
		recipes.Between("workers", int64(c.Workers), 0, recipes.MaxWorkers),
		recipes.Between("pad-multiple", int64(c.PadMultiple), 0, 4096),
	); err != nil {
		return err
	}
	if c.Dropout != nil && !(*c.Dropout >= 0 && *c.Dropout < 1) {
		return &ConfigError{Field: "dropout", Value: *c.Dropout, Reason: "must be in [0, 1)"}
	}
	switch {
	case c.Preset != "":
		mc, err := Preset(c.Preset, int(UNKID)+1)
		if err != nil {
			return &ConfigError{Field: "preset", Value: c.Preset, Err: err}
		}
		// The preset's shapes with the flags' overrides, as a new run
		// builds them: a width the attention heads cannot split is the
		// flag's error, not a model that fails to build.
		if c.DModel > 0 {
			if c.DModel%2 != 0 || c.DModel%mc.Heads != 0 {
				return &ConfigError{Field: "d-model", Value: c.DModel,
					Reason: fmt.Sprintf("must be even and divisible by the %s preset's %d attention heads", c.Preset, mc.Heads)}
			}
			mc.DModel = c.DModel
		}
		if c.EncoderLayers > 0 {
			mc.EncoderLayers = c.EncoderLayers
		}
		if c.DecoderLayers > 0 {
			mc.DecoderLayers = c.DecoderLayers
		}
		if err := mc.Validate(); err != nil && c.Resume == "" {
			return &ConfigError{Field: "preset", Value: c.Preset, Err: err}
		}
	case c.Resume == "":
		return &ConfigError{Field: "preset", Value: c.Preset, Reason: "required unless resuming"}
	}
	if _, err := amp.ParsePrecision(c.Precision, c.Device); err != nil {
		return &ConfigError{Field: "mixed-precision", Value: c.Precision, Err: err}
	}
	if c.DryRun && !c.AutoBatch {
		return &ConfigError{Field: "dry-run", Value: true, Reason: "goes with auto-batch"}
	}
	return nil
}
