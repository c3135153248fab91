package ganvit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// Stages of a run.
const (
	StageAll        = "all"
	StageGAN        = "gan"
	StageClassifier = "classifier"
)

// TrainConfig configures Train: the harness's shared settings (the
// classifier's MicroBatch, Accum, LR, Warmup, Epochs; MaxSteps per stage,
// the step each stage stops at, a resumed run's steps counted)
// and the recipe's own. The CLI fills it from flags and presets.
type TrainConfig struct {
	recipes.Common
	// Preset sizes the spectrograms, the GAN's batch, NUM_SYNTHETIC and
	// the networks; its MicroBatch is the table's, the run's is
	// Common.MicroBatch.
	Preset Preset
	// ShapeSet says the spectrogram shape was given explicitly (flags),
	// so a checkpoint of another shape is refused rather than followed.
	ShapeSet bool
	Stage    string // all, gan or classifier
	// GANCheckpoint, for the classifier stage alone: the checkpoint whose
	// generator makes the synthetic spectrograms (and whose condition
	// normalisation is used). Empty with NumSynthetic 0: real data only.
	GANCheckpoint string
	NumSynthetic  int
	// GANAccum is both networks' accumulation steps; DAccum and GAccum
	// override it per network. The GAN's effective batch is
	// Preset.GANBatch × GANAccum, each network's micro-batch the effective
	// batch divided by its accumulation.
	GANAccum, DAccum, GAccum int
	GANEpochs                int
	GANLR                    float64
	// TrainClips, when > 0, trains on the first TrainClips clips of the
	// training split only (the genres alternate, so they stay balanced):
	// the low-data regime, where synthetic data may help.
	TrainClips   int
	Unfreeze     Schedule
	Pretrained   string // a torchvision ViT state dict to start from
	DataOnDevice bool
	// KeepLast is how many of this run's newest checkpoints of each kind
	// (GAN epochs, classifier epochs) stay (0: 3; negative: all).
	KeepLast   int
	NoOOMAdapt bool
	Events     train.Sink
}

// Result is what Train did.
type Result struct {
	// GANSteps and Steps count the GAN's and the classifier's optimizer
	// steps since the run began (a resumed run's included); GANTrained
	// says the GAN trained in this call (not when it resumed in the
	// classifier stage), DLoss and GLoss being its last losses (NaN when it
	// made no step in this call).
	GANSteps, Steps   int
	GANTrained        bool
	DLoss, GLoss      float64
	Real, Synthetic   int
	ValidAcc, TestAcc float64 // NaN when the classifier did not train
	Peak              int64
	Checkpoint        string
	Precision         amp.Choice
	// Interrupted: a signal (a cancelled context) stopped the run after a
	// step, and Checkpoint holds it.
	Interrupted bool
}

func (c *TrainConfig) logf(format string, args ...any) {
	if c.Events != nil {
		c.Events(train.Message{Text: fmt.Sprintf(format, args...)})
	}
}

func (c *TrainConfig) check() error {
	switch c.Stage {
	case "":
		c.Stage = StageAll
	case StageAll, StageGAN, StageClassifier:
	default:
		return fmt.Errorf("--stage %q: want all, gan or classifier", c.Stage)
	}
	if c.GANAccum < 1 {
		c.GANAccum = 1
	}
	if c.DAccum < 1 {
		c.DAccum = c.GANAccum
	}
	if c.GAccum < 1 {
		c.GAccum = c.GANAccum
	}
	if c.Accum < 1 {
		c.Accum = 1
	}
	p := c.Preset
	if p.GANBatch < 1 || c.MicroBatch < 1 || p.NumSynthetic < 0 {
		return fmt.Errorf("batch sizes %d (GAN) and %d (classifier) must be >= 1", p.GANBatch, c.MicroBatch)
	}
	eff := p.GANBatch * c.GANAccum
	for _, a := range []struct {
		name string
		v    int
	}{{"d-grad-accum", c.DAccum}, {"g-grad-accum", c.GAccum}} {
		if eff%a.v != 0 {
			return fmt.Errorf("--%s %d does not divide the GAN's effective batch %d (gan-batch-size × gan-grad-accum)", a.name, a.v, eff)
		}
	}
	if c.Stage == StageClassifier && c.NumSynthetic > 0 && c.GANCheckpoint == "" && c.Resume == "" {
		return errors.New("--stage classifier with --num-synthetic > 0 needs --gan CHECKPOINT (a trained generator); --num-synthetic 0 trains on real data only")
	}
	if c.GANEpochs < 1 || c.Epochs < 1 {
		return fmt.Errorf("epochs %d (GAN) and %d (classifier) must be >= 1", c.GANEpochs, c.Epochs)
	}
	if !(c.GANLR > 0) || !(c.LR > 0) || math.IsInf(c.LR, 0) || math.IsInf(c.GANLR, 0) {
		return fmt.Errorf("learning rates %v (GAN) and %v (classifier) must be finite and > 0", c.GANLR, c.LR)
	}
	return nil
}

// run is one Train call's state.
type run struct {
	cfg       *TrainConfig
	prec      amp.Choice
	meta      Meta
	owner     *train.Run // the run's checkpoints
	last      string     // the last checkpoint written
	monitor   *Monitor
	train     *Specs
	valid     *Specs
	test      *Specs
	dd        *DeviceData
	gen       *Generator
	disc      *Discriminator
	gan       *GAN
	vit       *ViT
	cls       *Classifier
	resume    *ckpt.Reader // the checkpoint resumed from, read a part at a time
	parts     []string     // its parts
	iteration int          // GAN and classifier iterations, for the cache cadence
}

// Train runs the recipe: the conditional GAN on the real training
// spectrograms, NumSynthetic generated spectrograms, the ViT on real +
// synthetic, with checkpoints per epoch. It computes on libtorch's main
// thread.
func Train(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	err = torch.Main().DoErr(func() error {
		res, err = trainOnThread(ctx, &cfg)
		return err
	})
	return res, err
}

func trainOnThread(ctx context.Context, cfg *TrainConfig) (Result, error) {
	res := Result{ValidAcc: math.NaN(), TestAcc: math.NaN(), DLoss: math.NaN(), GLoss: math.NaN()} // NaN: none this run
	if err := cfg.check(); err != nil {
		return res, &recipes.UsageError{Err: err}
	}
	session, err := recipes.Begin(cfg.Common, cfg.Events)
	if err != nil {
		return res, err
	}
	defer session.End()
	cfg.Events = session.Events() // after Begin's lines
	prec := session.Precision
	res.Precision = prec
	r := &run{cfg: cfg, prec: prec, monitor: &Monitor{Device: cfg.Device}}
	defer r.free()
	if err := r.setUp(ctx); err != nil {
		return res, err
	}
	session.Started()
	torch.ResetPeakMemory(cfg.Device)
	doGAN := cfg.Stage != StageClassifier && !(r.resume != nil && r.meta.Stage == StageClassifier)
	if doGAN {
		err = r.trainGAN(ctx, &res)
	}
	if err == nil && cfg.Stage != StageGAN {
		err = r.trainClassifier(ctx, &res)
	}
	res.Checkpoint = cmp.Or(r.last, cfg.Resume) // a resumed run that trained nothing wrote none
	if errors.Is(err, train.ErrInterrupted) {
		res.Interrupted, err = true, nil
	}
	if err != nil {
		return res, err
	}
	st, _ := torch.MemoryStats(cfg.Device)
	res.Peak = st.PeakAllocated
	return res, nil
}

func (r *run) free() {
	if r.gan != nil {
		r.gan.Free()
	}
	if r.cls != nil {
		r.cls.Free()
	}
	for _, m := range []nn.Module{r.gen, r.disc, r.vit} {
		if m != nil && !isNil(m) {
			nn.Free(m)
		}
	}
	if r.dd != nil {
		r.dd.Free()
	}
	r.releaseResume()
}

// releaseResume closes the checkpoint the run resumed from once all it
// needs from it is loaded.
func (r *run) releaseResume() {
	if r.resume != nil {
		r.resume.Close()
		r.resume = nil
	}
}

// loadResumed reads the named parts of the checkpoint the run resumed
// from, hands them to load, and frees them: the host holds one network's
// or one stage's optimizers' part of the file at a time, never all of it.
func (r *run) loadResumed(load func(*ckpt.File) error, parts ...string) error {
	f, err := r.resume.Parts(parts...)
	if err != nil {
		return err
	}
	defer f.Free()
	return load(f)
}

// stepsDone says whether a stage that has made steps optimizer steps is
// done by --max-steps (a run resumed there trains none).
func (r *run) stepsDone(steps int) bool { return r.cfg.MaxSteps > 0 && steps >= r.cfg.MaxSteps }

func isNil(m nn.Module) bool {
	switch m := m.(type) {
	case *Generator:
		return m == nil
	case *Discriminator:
		return m == nil
	case *ViT:
		return m == nil
	}
	return false
}

// setUp reads the checkpoint to resume from (its sizes win unless the
// shape was given explicitly and differs: a ShapeError), loads the data,
// builds the models and checks the checkpoint directory.
func (r *run) setUp(ctx context.Context) error {
	cfg := r.cfg
	r.meta = Meta{Preset: cfg.Preset.Name, Genres: Genres, GAN: cfg.Preset.GANConfig(len(Genres)), Seed: cfg.Seed,
		Unfreeze: cfg.Unfreeze.String(), NumSynthetic: cfg.NumSynthetic, Stage: StageGAN}
	vc, err := cfg.Preset.ViTConfig(len(Genres))
	if err != nil {
		return &recipes.UsageError{Err: err}
	}
	r.meta.ViT = vc
	if err := r.meta.GAN.Validate(); err != nil {
		return &recipes.UsageError{Err: fmt.Errorf("GAN: %w", err)}
	}
	if cfg.Unfreeze != nil {
		if err := cfg.Unfreeze.Check(vc.Layers, cfg.Epochs); err != nil {
			return err
		}
	}
	rc := train.RunConfig{Dir: cfg.CheckpointDir, Kinds: []train.Kind{ganKind, clsKind}, KeepLast: cfg.KeepLast,
		Overwrite: cfg.Overwrite, Logf: cfg.logf}
	if cfg.Resume != "" {
		rd, err := ckpt.Open(cfg.Resume)
		if err != nil {
			return err
		}
		r.resume = rd
		f, err := rd.Parts("meta", "run_id", "run_checkpoints") // no tensor
		if err != nil {
			return err
		}
		defer f.Free()
		r.parts = f.Keys()
		m, err := readMeta(f)
		if err != nil {
			return err
		}
		if cfg.ShapeSet && m.Shape() != r.meta.Shape() {
			return &ShapeError{Path: cfg.Resume, Want: m.Shape(), Have: r.meta.Shape()}
		}
		if m.Unfreeze != r.meta.Unfreeze && cfg.Unfreeze != nil {
			return &recipes.UsageError{Err: fmt.Errorf("--unfreeze %s differs from the checkpoint's %s", r.meta.Unfreeze, m.Unfreeze)}
		}
		if cfg.Unfreeze == nil {
			cfg.Unfreeze, _ = ParseSchedule(m.Unfreeze)
		}
		m.NumSynthetic, m.Seed = cfg.NumSynthetic, cfg.Seed
		if f.Has("classifier") {
			r.meta.ViT = m.ViT
		} else {
			m.ViT = r.meta.ViT
		}
		id, files, err := f.Run()
		if err != nil {
			return err
		}
		if len(files) == 0 {
			files = m.RunFiles // written by torchfit before run_checkpoints held them
		}
		m.RunFiles = nil
		r.meta = m
		rc.Resume, rc.ResumeID, rc.ResumeFiles = cfg.Resume, id, files
		cfg.logf("resuming %s: stage %s, GAN epoch %d (%d steps), classifier epoch %d (%d steps)", cfg.Resume, m.Stage, m.GANEpochs, m.GANSteps, m.Epochs, m.Steps)
	}
	if cfg.CheckpointDir == "" {
		return &recipes.UsageError{Err: errors.New("--checkpoint-dir is empty")}
	}
	if r.owner, err = train.StartRun(rc); err != nil {
		return err
	}
	if err := r.owner.Check(r.could); err != nil {
		var conflict *train.ConflictError
		if errors.As(err, &conflict) { // train.Fit's refusal, with this command line's ways out
			return &recipes.UsageError{Err: fmt.Errorf("%w: pass --resume FILE to continue that run, choose another --checkpoint-dir, or pass --overwrite", err)}
		}
		return err
	}
	if err := r.loadData(ctx); err != nil {
		return err
	}
	// Initial weights depend on the seed alone; a resumed run then
	// continues the generator's state where its checkpoint left it.
	torch.ManualSeed(cfg.Seed)
	if err := r.build(); err != nil {
		return err
	}
	if r.resume != nil {
		return r.loadResumed((*ckpt.File).RNG, "rng_state")
	}
	return nil
}

// could says whether the run may write checkpoint n of kind k (an epoch
// from the checkpoint's on, of a stage it trains).
func (r *run) could(k train.Kind, n int) bool {
	switch k.Name {
	case ganKind.Name:
		return r.cfg.Stage != StageClassifier && n > r.meta.GANEpochs && n <= r.cfg.GANEpochs
	case clsKind.Name:
		return r.cfg.Stage != StageGAN && n > r.meta.Epochs && n <= r.cfg.Epochs
	}
	return false
}

// The checkpoints a run writes: one per GAN epoch and one per classifier
// epoch (as the seed's checkpoint_epoch_15.pt), the newest KeepLast of each.
var (
	ganKind = train.Kind{Name: "checkpoint_gan_epoch_%d.pt", Prune: true}
	clsKind = train.Kind{Name: "checkpoint_epoch_%d.pt", Prune: true}
)

func ganPath(epoch int) string { return ganKind.File(epoch) }
func clsPath(epoch int) string { return clsKind.File(epoch) }

func (r *run) loadData(ctx context.Context) error {
	cfg := r.cfg
	shape := r.meta.Shape()
	start := time.Now()
	var err error
	if r.train, err = LoadSpecs(ctx, cfg.Data, SplitTrain, shape, cfg.Workers); err != nil {
		return err
	}
	if n := cfg.TrainClips; n > 0 && n < r.train.Len() {
		r.train.Truncate(n)
	}
	if r.valid, err = LoadSpecs(ctx, cfg.Data, SplitValid, shape, cfg.Workers); err != nil {
		return err
	}
	if r.test, err = LoadSpecs(ctx, cfg.Data, SplitTest, shape, cfg.Workers); err != nil {
		return err
	}
	if r.resume == nil && cfg.GANCheckpoint == "" {
		r.meta.Norm = NormOf(r.train)
	}
	if cfg.GANCheckpoint != "" && r.resume == nil {
		f, err := ckpt.ReadParts(cfg.GANCheckpoint, "meta")
		if err != nil {
			return err
		}
		m, err := readMeta(f)
		f.Free()
		if err != nil {
			return err
		}
		if m.Shape() != shape {
			return &ShapeError{Path: cfg.GANCheckpoint, Want: m.Shape(), Have: shape}
		}
		r.meta.GAN, r.meta.Norm, r.meta.GANEpochs, r.meta.GANSteps = m.GAN, m.Norm, m.GANEpochs, m.GANSteps
	}
	for _, s := range []*Specs{r.train, r.valid, r.test} {
		r.meta.Norm.Apply(s)
	}
	host := r.train.Bytes() + r.valid.Bytes() + r.test.Bytes()
	cfg.logf("data %s: %d train, %d valid, %d test clips → spectrograms of %v in %s; %s in host memory (not on the device)",
		cfg.Data, r.train.Len(), r.valid.Len(), r.test.Len(), shape, time.Since(start).Round(time.Millisecond), torch.FormatBytes(host))
	n := r.meta.Norm
	cfg.logf("conditions: tempo %.1f ± %.1f BPM, brightness %.3f ± %.3f (normalised to mean 0, std 1)", n.TempoMean, n.TempoStd, n.BrightnessMean, n.BrightnessStd)
	if cfg.DataOnDevice {
		before := torch.MustMemoryStats(cfg.Device).Allocated
		if r.dd, err = r.train.OnDevice(cfg.Device); err != nil {
			return fmt.Errorf("--data-on-device: %w", err)
		}
		after := torch.MustMemoryStats(cfg.Device).Allocated
		cfg.logf("--data-on-device: the whole training set is on %s first (the seed's mistake, kept to measure it): %s allocated",
			cfg.Device, torch.FormatBytes(after-before))
	}
	return nil
}

// build makes the networks the run trains (and loads the checkpoint's).
func (r *run) build() error {
	cfg := r.cfg
	// A classifier-only run (real data alone) has no generator to resume.
	needGAN := cfg.Stage != StageClassifier || cfg.GANCheckpoint != "" || (r.resume != nil && slices.Contains(r.parts, "generator"))
	if needGAN {
		r.gen, r.disc = NewGenerator(r.meta.GAN), NewDiscriminator(r.meta.GAN)
	}
	if cfg.Stage != StageGAN {
		v, err := NewViT(r.meta.ViT)
		if err != nil {
			return &recipes.UsageError{Err: err}
		}
		r.vit = v
		v.Checkpointing = cfg.GradCheckpointing
		if cfg.Pretrained != "" && r.resume == nil {
			if err := loadPretrained(v, cfg.Pretrained, cfg.logf); err != nil {
				return err
			}
		}
	}
	loadGAN := func(f *ckpt.File) error {
		if err := f.Module("generator", r.gen); err != nil {
			return err
		}
		if f.Has("discriminator") {
			return f.Module("discriminator", r.disc)
		}
		return nil
	}
	if r.gen != nil {
		var err error
		switch {
		case r.resume != nil:
			err = r.loadResumed(loadGAN, "generator", "discriminator")
		case cfg.GANCheckpoint != "":
			var f *ckpt.File
			if f, err = ckpt.ReadParts(cfg.GANCheckpoint, "generator", "discriminator"); err == nil { // not the optimizers' state
				err = loadGAN(f)
				f.Free()
			}
		}
		if err != nil {
			return err
		}
	}
	if r.resume != nil && r.vit != nil && slices.Contains(r.parts, "classifier") {
		load := func(f *ckpt.File) error { return f.Module("classifier", r.vit) }
		if err := r.loadResumed(load, "classifier"); err != nil {
			return err
		}
	}
	if r.gen != nil {
		cfg.logf("GAN: generator %s parameters, discriminator %s (latent %d, conditions %d + %d genres)",
			count(nn.NumParams(r.gen)), count(nn.NumParams(r.disc)), r.meta.GAN.Latent, CondDim, len(Genres))
	}
	if r.vit != nil {
		c := r.vit.Cfg
		cfg.logf("ViT %s: %d layers, hidden %d, %d heads, MLP %d, image %d × %d, patch %d: %s parameters",
			c.Name, c.Layers, c.Hidden, c.Heads, c.MLP, c.Image, c.Image, c.Patch, count(nn.NumParams(r.vit)))
	}
	return nil
}

func count(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// loadPretrained loads a torchvision ViT state dict (torch.save or
// safetensors: recipes.LoadStateDict); a head of another number of classes
// is left as initialised.
func loadPretrained(v *ViT, path string, logf func(string, ...any)) error {
	file, err := recipes.LoadStateDict(path)
	if err != nil {
		return checkpointError(path, err)
	}
	defer file.Free()
	sd := file // or, with another head, the model's own head instead of the file's
	head := v.Heads.Head.Weight.Shape()
	if w, ok := file.Get("heads.head.weight"); ok && fmt.Sprint(w.Shape()) != fmt.Sprint(head) {
		logf("--vit-weights %s: its head has %v classes, this one %d: the head starts from zero", path, w.Shape()[0], head[0])
		sd = nil
		for _, p := range file {
			if p.Name != "heads.head.weight" && p.Name != "heads.head.bias" {
				sd = append(sd, p)
			}
		}
		sd = append(sd, torch.Named{Name: "heads.head.weight", T: v.Heads.Head.Weight}, torch.Named{Name: "heads.head.bias", T: v.Heads.Head.Bias})
	}
	if _, err := nn.LoadStateDict(v, sd, true); err != nil {
		return checkpointError(path, fmt.Errorf("not a torchvision ViT of this shape (%s): %w", v.Cfg.Name, err))
	}
	return nil
}

// iterationDone empties the CUDA cache every EmptyCacheEvery iterations
// (the seed's `if i % 10 == 0: torch.cuda.empty_cache()`).
func (r *run) iterationDone() {
	r.iteration++
	if n := r.cfg.EmptyCacheEvery; n > 0 && r.iteration%n == 0 {
		torch.EmptyCache()
	}
}

func (r *run) memoryLines(point, at string) {
	for _, l := range r.monitor.Lines(point, at) {
		r.cfg.logf("%s", l)
	}
}

func (r *run) trainGAN(ctx context.Context, res *Result) error {
	cfg := r.cfg
	eff := cfg.Preset.GANBatch * cfg.GANAccum
	gan, err := NewGAN(r.gen, r.disc, GANOptions{Device: cfg.Device, Precision: r.prec.Precision, MicroD: eff / cfg.DAccum,
		MicroG: eff / cfg.GAccum, LR: cfg.GANLR, ClipD: cfg.ClipNorm, ClipG: cfg.ClipNorm, NoOOMAdapt: cfg.NoOOMAdapt, Events: cfg.Events})
	if err != nil {
		return err
	}
	r.gan = gan
	gan.Steps = r.meta.GANSteps
	r.owner.Register("generator", r.gen)
	r.owner.Register("discriminator", r.disc)
	r.owner.Register("optimizer_g", gan.GOpt)
	r.owner.Register("optimizer_d", gan.DOpt)
	r.owner.Register("scaler", gan.Scaler)
	if r.resume != nil && r.meta.Stage == StageGAN {
		load := func(f *ckpt.File) error { return r.owner.Load(f, "optimizer_g", "optimizer_d", "scaler") }
		if err := r.loadResumed(load, "optimizer_g", "optimizer_d", "scaler"); err != nil {
			return err
		}
	}
	r.releaseResume() // the classifier stage loads nothing from a GAN-stage file
	cfg.logf("GAN training: effective batch %d; discriminator micro-batch %d × %d, generator %d × %d; precision %s; %d epochs",
		eff, eff/cfg.DAccum, cfg.DAccum, eff/cfg.GAccum, cfg.GAccum, r.prec, cfg.GANEpochs)
	skip := r.meta.GANDone + r.meta.GANBatch*eff
	for epoch := r.meta.GANEpochs + 1; epoch <= cfg.GANEpochs && !r.stepsDone(gan.Steps); epoch++ {
		if err := r.ganEpoch(ctx, epoch, skip, res); err != nil {
			return err
		}
		skip = 0
	}
	res.GANSteps, res.GANTrained = gan.Steps, true
	return nil
}

// ganEpoch trains the GAN's epoch (counted from 1) after its first skip
// examples and saves a checkpoint; a signal saves where the epoch stands
// and returns train.ErrInterrupted.
func (r *run) ganEpoch(ctx context.Context, epoch, skip int, res *Result) error {
	cfg, gan, eff := r.cfg, r.gan, r.cfg.Preset.GANBatch*r.cfg.GANAccum
	// A loader per epoch, positioned at its start (or, resuming, after
	// the batches done): the order depends only on (seed, epoch), so a
	// resumed run sees the same batches.
	ld, err := r.loader(r.train, r.dd, eff, r.meta.GANEffective, cfg.Seed, epoch, skip, "GAN ")
	if err != nil {
		return err
	}
	emitTo(cfg.Events, train.EpochEvent{Epoch: epoch, Epochs: cfg.GANEpochs, Batches: ld.Len()})
	start := time.Now()
	var dSum, gSum float64
	n, interrupted := 0, false
	for b, err := range ld.Epoch(ctx) {
		if errors.Is(err, context.Canceled) {
			interrupted = true
			break
		}
		if err != nil {
			ld.Close()
			return err
		}
		st, err := gan.Step(b)
		b.Free()
		if err != nil {
			ld.Close()
			return fmt.Errorf("GAN step %d: %w", gan.Steps+1, err)
		}
		dSum, gSum, n = dSum+st.DLoss, gSum+st.GLoss, n+1
		if math.IsNaN(st.DLoss) || math.IsNaN(st.GLoss) {
			ld.Close()
			return fmt.Errorf("GAN step %d: the loss is NaN (D %v, G %v); try a lower --gan-lr: %w", st.Step, st.DLoss, st.GLoss, train.ErrNonFinite)
		}
		if cfg.MemoryEvery > 0 && gan.Steps%cfg.MemoryEvery == 0 {
			cfg.logf("GAN step %d: D loss %.4f, G loss %.4f (D micro-batch %d, G %d; %s)", st.Step, st.DLoss, st.GLoss, st.DMicro, st.GMicro, st.Duration.Round(time.Millisecond))
			r.memoryLines("GAN", fmt.Sprintf("GAN step %d", st.Step))
		}
		r.iterationDone()
		if ctx.Err() != nil {
			interrupted = true // a signal: this step is done, save it
			break
		}
		if r.stepsDone(gan.Steps) { // a resumed run's steps counted
			break
		}
	}
	ld.Close()
	if n > 0 {
		res.DLoss, res.GLoss = dSum/float64(n), gSum/float64(n)
	}
	res.GANSteps, res.GANTrained = gan.Steps, true
	r.meta.GANEpochs, r.meta.GANDone, r.meta.GANBatch, r.meta.GANSteps, r.meta.Stage = epoch, 0, 0, gan.Steps, StageGAN
	r.meta.GANEffective = eff
	if st := ld.State(); st.Epoch == epoch-1 && st.Batch < ld.Len() { // stopped by --max-steps or a signal: this epoch is not done
		r.meta.GANEpochs, r.meta.GANDone = epoch-1, skip+n*eff
	}
	cfg.logf("GAN epoch %d/%d: %d steps, D loss %.4f, G loss %.4f, %s", epoch, cfg.GANEpochs, n, res.DLoss, res.GLoss, time.Since(start).Round(time.Millisecond))
	torch.EmptyCache() // the seed's Option 1: after each epoch
	if err := r.save(ganPath(epoch)); err != nil {
		return err
	}
	if interrupted {
		cfg.logf("interrupted at GAN step %d: saved %s", gan.Steps, r.last)
		return train.ErrInterrupted
	}
	return nil
}

// loader returns epoch's loader (counted from 1) of effective batches
// batch, after its first skip examples (done before the checkpoint the
// run resumed from, in effective batches was: 0 when unknown).
func (r *run) loader(s *Specs, dd *DeviceData, batch, was int, seed uint64, epoch, skip int, what string) (*data.Loader[data.Sample, *data.Batch], error) {
	o := loaderOpts(r.cfg, dd, batch, seed, epoch-1)
	src := loaderSource(s, dd)
	if skip == 0 {
		return data.NewLoader[data.Sample, *data.Batch](src, data.Collate, o)
	}
	if n := src.Len(); skip >= n {
		return nil, checkpointError(r.cfg.Resume, fmt.Errorf("stopped after example %d of %sepoch %d, which has %d examples here: the training set differs from the run's", skip, what, epoch, n))
	}
	o.Resume.Samples, o.Resume.World = skip, 1
	ld, err := data.NewLoader[data.Sample, *data.Batch](src, data.Collate, o)
	if err != nil {
		return nil, err
	}
	if was > 0 && was != batch {
		r.cfg.logf("%sepoch %d: the effective batch changes from the checkpoint's %d to %d; going on after the %d examples done", what, epoch, was, batch, skip)
	} else {
		r.cfg.logf("%sepoch %d: going on after %d of its %d batches done", what, epoch, ld.State().Batch, ld.Len())
	}
	return ld, nil
}

func loaderSource(s *Specs, dd *DeviceData) data.Dataset[data.Sample] {
	if dd != nil {
		return dd.TensorDataset
	}
	return specDataset{s}
}

func loaderOpts(cfg *TrainConfig, dd *DeviceData, batch int, seed uint64, epoch int) data.Options {
	o := data.Options{BatchSize: batch, Shuffle: true, Seed: seed, Workers: cfg.Workers, Prefetch: 2, Device: cfg.Device,
		Resume: &data.State{Epoch: epoch, Seed: seed}}
	if dd != nil {
		o.Device, o.Workers = torch.CPU, 0
	}
	return o
}

// save writes a checkpoint of the parts registered now (the GAN's
// networks, optimizers and scaler while it trains; the generator and the
// classifier with its optimizer after) and the run's meta.
func (r *run) save(name string) error {
	ev, err := r.owner.Save(name, func(w *ckpt.Writer) { w.Meta(r.meta.dict()) })
	if err != nil {
		return err
	}
	r.last = ev.Path
	emitTo(r.cfg.Events, ev)
	return nil
}

// emitTo sends e when the sink is set.
func emitTo(s train.Sink, e train.Event) {
	if s != nil {
		s(e)
	}
}

// Synthesize draws n spectrograms from the generator with conditions and
// genres of randomly chosen real training clips (seeded), as host memory.
func Synthesize(g *Generator, real *Specs, n int, seed uint64, dev torch.Device, prec amp.Precision, batch int) (*Specs, error) {
	s := &Specs{Shape: real.Shape}
	if n == 0 {
		return s, nil
	}
	rng := mrand.New(mrand.NewPCG(seed, 0x5eed))
	for i := 0; i < n; i++ {
		k := rng.IntN(real.Len())
		s.Cond = append(s.Cond, real.Cond[k])
		s.Labels = append(s.Labels, real.Labels[k])
		s.Tempo = append(s.Tempo, real.Tempo[k])
		s.Brightness = append(s.Brightness, real.Brightness[k])
	}
	// The synthetic set depends only on the seed: the global generator is
	// seeded for it and restored afterwards.
	var state *torch.Tensor
	if err := torch.Try(func() { state = torch.RNGState().Keep() }); err != nil {
		return nil, err
	}
	defer func() { torch.SetRNGState(state); state.Free() }()
	torch.ManualSeed(seed ^ 0x9e3779b97f4a7c15)
	var err error
	s.Data, err = GenerateSpecs(g, dev, prec, s.Cond, s.Labels, batch)
	return s, err
}

func (r *run) trainClassifier(ctx context.Context, res *Result) error {
	cfg := r.cfg
	trainSet, err := r.classifierSet(res)
	if err != nil {
		return err
	}
	r.leaveGAN()
	var dd *DeviceData
	if cfg.DataOnDevice {
		if dd, err = trainSet.OnDevice(cfg.Device); err != nil {
			return fmt.Errorf("--data-on-device: %w", err)
		}
		defer dd.Free()
		if r.dd != nil {
			r.dd.Free()
			r.dd = nil
		}
	}
	eff := cfg.EffectiveBatch()
	perEpoch := (trainSet.Len() + eff - 1) / eff
	if err := r.newClassifier(recipes.TotalSteps(perEpoch, cfg.Epochs, cfg.MaxSteps)); err != nil {
		return err
	}
	cfg.logf("classifier training: effective batch %d = micro-batch %d × %d; precision %s; checkpointing %v; %d epochs of %d steps",
		eff, cfg.MicroBatch, cfg.Accum, r.prec, cfg.GradCheckpointing, cfg.Epochs, perEpoch)
	skip := r.meta.Done + r.meta.Batch*eff
	for epoch := r.meta.Epochs + 1; epoch <= cfg.Epochs && !r.stepsDone(r.cls.Steps); epoch++ {
		emitTo(cfg.Events, train.EpochEvent{Epoch: epoch, Epochs: cfg.Epochs, Batches: perEpoch})
		if err := r.classifierEpoch(ctx, epoch, trainSet, dd, skip, res); err != nil {
			return err
		}
		skip = 0
	}
	res.Steps = r.cls.Steps // a resumed run's, when it had none to make
	acc, err := Predict(ctx, r.vit, r.test, cfg.Device, r.prec.Precision, cfg.MicroBatch)
	if err != nil {
		return err
	}
	res.TestAcc = acc.Value()
	cfg.logf("test accuracy %.3f (%d/%d): %s", acc.Value(), acc.Correct, acc.N, perClass(acc))
	return nil
}

// classifierSet is what the classifier trains on: the real training
// spectrograms and NUM_SYNTHETIC the generator draws.
func (r *run) classifierSet(res *Result) (*Specs, error) {
	cfg := r.cfg
	trainSet := &Specs{Shape: r.train.Shape}
	trainSet.Append(r.train)
	res.Real = r.train.Len()
	if cfg.NumSynthetic > 0 && r.gen != nil {
		start := time.Now()
		if err := torch.Try(func() { nn.To(r.gen, cfg.Device, torch.Float32) }); err != nil {
			return nil, err
		}
		syn, err := Synthesize(r.gen, r.train, cfg.NumSynthetic, cfg.Seed, cfg.Device, r.prec.Precision, cfg.Preset.GANBatch)
		if err != nil {
			return nil, fmt.Errorf("synthesising: %w", err)
		}
		trainSet.Append(syn)
		res.Synthetic = syn.Len()
		cfg.logf("NUM_SYNTHETIC %d spectrograms generated in %s (host memory: %s); the classifier trains on %d real + %d synthetic",
			syn.Len(), time.Since(start).Round(time.Millisecond), torch.FormatBytes(syn.Bytes()), r.train.Len(), syn.Len())
	}
	return trainSet, nil
}

// leaveGAN frees the GAN's optimizers and discriminator; the generator
// stays (its weights go into every checkpoint).
func (r *run) leaveGAN() {
	if r.gan != nil {
		r.gan.Free()
		r.gan = nil
	}
	if r.disc != nil {
		nn.Free(r.disc)
		r.disc = nil
	}
	r.owner.Drop("discriminator", "optimizer_g", "optimizer_d", "scaler")
	if r.gen != nil {
		r.owner.Register("generator", r.gen)
	}
	torch.EmptyCache()
}

// newClassifier makes the ViT's trainer (its optimizer state, schedule
// and scaler the checkpoint's when resuming the classifier stage), and
// freezes what the unfreezing schedule has not reached.
func (r *run) newClassifier(total int) error {
	cfg := r.cfg
	cls, err := NewClassifier(r.vit, ClassifierOptions{Device: cfg.Device, Precision: r.prec.Precision, MicroBatch: cfg.MicroBatch,
		LR: cfg.LR, ClipNorm: cfg.ClipNorm, Warmup: cfg.Warmup, TotalSteps: total, NoOOMAdapt: cfg.NoOOMAdapt, Events: cfg.Events})
	if err != nil {
		return err
	}
	r.cls = cls
	r.owner.Register("classifier", r.vit)
	r.owner.Register("optimizer", cls.Opt)
	r.owner.Register("scheduler", cls.Sched)
	r.owner.Register("classifier_scaler", cls.Scaler)
	if r.resume != nil && r.meta.Stage == StageClassifier {
		load := func(f *ckpt.File) error { return r.owner.Load(f, "optimizer", "scheduler", "classifier_scaler") }
		if err := r.loadResumed(load, "optimizer", "scheduler", "classifier_scaler"); err != nil {
			return err
		}
		cls.Steps = r.meta.Steps
	}
	r.releaseResume()
	if cfg.Unfreeze != nil {
		r.vit.FreezeBackbone()
		if err := r.vit.UnfreezeLayers(cfg.Unfreeze.Until(r.meta.Epochs - 1)); err != nil {
			return &recipes.UsageError{Err: err}
		}
		cfg.logf("progressive unfreezing %s: training %s", cfg.Unfreeze, r.vit.Trainable())
	}
	return nil
}

// classifierEpoch trains the classifier's epoch (counted from 1) after
// its first skip batches, validates it and saves a checkpoint; a signal
// saves where the epoch stands and returns train.ErrInterrupted.
func (r *run) classifierEpoch(ctx context.Context, epoch int, trainSet *Specs, dd *DeviceData, skip int, res *Result) error {
	cfg, cls := r.cfg, r.cls
	if ls, ok := cfg.Unfreeze[epoch-1]; ok {
		before := stateBytes(cls.Opt)
		if err := r.vit.UnfreezeLayers(ls); err != nil {
			return &recipes.UsageError{Err: err}
		}
		cfg.logf("epoch %d (0-based, the schedule's): unfreezing encoder layers %v; training %s (optimizer state so far %s)", epoch-1, ls, r.vit.Trainable(), torch.FormatBytes(before))
	}
	ld, err := r.loader(trainSet, dd, cfg.EffectiveBatch(), r.meta.Effective, cfg.Seed+1, epoch, skip, "classifier ")
	if err != nil {
		return err
	}
	defer ld.Close()
	start := time.Now()
	var lossSum float64
	n, interrupted := 0, false
	for b, err := range ld.Epoch(ctx) {
		if errors.Is(err, context.Canceled) {
			interrupted = true
			break
		}
		if err != nil {
			return err
		}
		info, err := cls.Step(b)
		b.Free()
		if err != nil {
			return fmt.Errorf("classifier step %d: %w", cls.Steps+1, err)
		}
		lossSum, n = lossSum+info.Loss, n+1
		emitTo(cfg.Events, train.StepEvent{StepInfo: info, Epoch: epoch})
		if cfg.MemoryEvery > 0 && cls.Steps%cfg.MemoryEvery == 0 {
			r.memoryLines("classifier", fmt.Sprintf("classifier step %d (loss %.4f)", info.Step, info.Loss))
		}
		r.iterationDone()
		if ctx.Err() != nil {
			interrupted = true // a signal: this step is done, save it
			break
		}
		if r.stepsDone(cls.Steps) { // a resumed run's steps counted
			break
		}
	}
	ld.Close()
	res.Steps = cls.Steps
	if !interrupted {
		acc, err := Predict(ctx, r.vit, r.valid, cfg.Device, r.prec.Precision, cfg.MicroBatch)
		if err != nil {
			return err
		}
		res.ValidAcc = acc.Value()
		// One event, one line: the recipe's wording is the event's text.
		emitTo(cfg.Events, train.EvalEvent{Step: cls.Steps, Epoch: epoch, Values: map[string]float64{
			"train_loss": lossSum / float64(max(1, n)), "valid_accuracy": acc.Value()},
			Text: fmt.Sprintf("classifier epoch %d/%d: loss %.4f, valid accuracy %.3f (%d/%d), %s", epoch, cfg.Epochs, lossSum/float64(max(1, n)),
				acc.Value(), acc.Correct, acc.N, time.Since(start).Round(time.Millisecond))})
	}
	r.meta.Epochs, r.meta.Done, r.meta.Batch, r.meta.Steps, r.meta.Stage = epoch, 0, 0, cls.Steps, StageClassifier
	r.meta.Effective = cfg.EffectiveBatch()
	if st := ld.State(); st.Epoch == epoch-1 && st.Batch < ld.Len() { // stopped by --max-steps or a signal: this epoch is not done
		r.meta.Epochs, r.meta.Done = epoch-1, skip+n*cfg.EffectiveBatch()
	}
	torch.EmptyCache()
	if err := r.save(clsPath(epoch)); err != nil {
		return err
	}
	if interrupted {
		cfg.logf("interrupted at classifier step %d: saved %s", cls.Steps, r.last)
		return train.ErrInterrupted
	}
	return nil
}

func perClass(a Accuracy) string {
	parts := make([]string, len(a.PerClass))
	for i, c := range a.PerClass {
		parts[i] = fmt.Sprintf("%s %d/%d", Genres[i], c.Correct, c.N)
	}
	return strings.Join(parts, ", ")
}
