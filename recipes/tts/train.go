package tts

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// TrainConfig is `torchfit tts train` and `train-codec`: the harness's
// shared settings and the recipe's own.
type TrainConfig struct {
	recipes.Common
	// Codec is the codec checkpoint the GPT trains over (train).
	Codec string
	// GPT sizes the GPT (train; Vocab, Codes and TextRatio are filled in
	// from the data and the codec).
	GPT GPTConfig
	// CodecCfg sizes the codec (train-codec) and CropFrames is the length
	// of its training crops.
	CodecCfg   CodecConfig
	CropFrames int
	// MemoryMapping reads the feature cache through a memory map
	// (data.enable_memory_mapping).
	MemoryMapping bool
	// ValidLimit bounds the validation utterances scored per epoch (0:
	// all).
	ValidLimit int
	// Reference is how the GPT's training and validation utterances are
	// conditioned: RefSpeaker (when empty), RefStyle or RefSelf.
	Reference string
	// Events receives the run's events (nil: none).
	Events train.Sink
}

// Result is what a training run reports.
type Result struct {
	Params      int64
	Steps       int
	MicroBatch  int
	Accum       int
	Valid       Scores // at the end
	Start       Scores // before training (zero when resumed)
	Checkpoint  string
	PeakMemory  int64
	OOMEvents   int
	Interrupted bool
	Found       *memplan.FindResult
	Planned     *memplan.Result
	Precision   amp.Choice
}

// Scores are a model's validation figures.
type Scores struct {
	Loss     float64 // the training loss
	Recon    float64 // codec: mean squared error of the normalised mels
	CodeCE   float64 // GPT: mean cross-entropy of the code targets (nats)
	TextCE   float64 // GPT: mean cross-entropy of the phoneme targets
	CodeAcc  float64 // GPT: top-1 accuracy of the code targets
	CodesUse int     // codec: distinct codes used on the validation split
}

func (c *TrainConfig) logf(format string, args ...any) {
	if c.Events != nil {
		c.Events(train.Message{Text: fmt.Sprintf(format, args...)})
	}
}

func (c *TrainConfig) check() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if c.Reference != "" && !slices.Contains(RefModes, c.Reference) {
		return &recipes.ConfigError{Field: "reference", Value: c.Reference, Reason: "must be one of " + strings.Join(RefModes, ", ")}
	}
	if c.ValidLimit < 0 {
		return &recipes.ConfigError{Field: "valid-limit", Value: c.ValidLimit, Reason: "must be >= 0"}
	}
	if _, err := os.Stat(filepath.Join(c.Data, "train.jsonl")); err != nil {
		return recipes.Usagef("tts: no corpus in %s: create one with `torchfit tts data --out %s`", c.Data, c.Data)
	}
	return nil
}

// openData opens the feature cache and the train and valid splits.
func openData(cfg *TrainConfig, vocab *Vocab) (store *FeatureStore, tr, va *Corpus, err error) {
	if store, err = OpenFeatures(cfg.Data, cfg.MemoryMapping); err != nil {
		return nil, nil, nil, recipes.Usage(err)
	}
	if tr, err = LoadCorpus(cfg.Data, "train", store, vocab, cfg.Seed); err == nil {
		va, err = LoadCorpus(cfg.Data, "valid", store, vocab, cfg.Seed)
	}
	if err != nil {
		store.Close()
		return nil, nil, nil, err
	}
	if va.Len() == 0 {
		store.Close()
		return nil, nil, nil, recipes.Usage(fmt.Errorf("tts: %s holds no utterances (%w): the run would have no validation score; make a corpus of at least %d utterances with `torchfit tts data`",
			filepath.Join(cfg.Data, "valid.jsonl"), ErrEmptySplit, minUtterances()))
	}
	va.Ref = tr // validation utterances are conditioned on training clips of their speaker
	if err := useReference(cfg, tr, va); err != nil {
		store.Close()
		return nil, nil, nil, err
	}
	if cfg.ValidLimit > 0 && va.Len() > cfg.ValidLimit {
		va.Utts, va.Items, va.Phonemes = va.Utts[:cfg.ValidLimit], va.Items[:cfg.ValidLimit], va.Phonemes[:cfg.ValidLimit]
		if va.Text != nil {
			va.Text = va.Text[:cfg.ValidLimit]
		}
	}
	mode := "positioned reads"
	if store.Mapped() {
		mode = "a memory map"
	}
	cfg.logf("corpus %s: %d train / %d valid utterances; features through %s", cfg.Data, tr.Len(), va.Len(), mode)
	if cfg.Reference != "" && cfg.Reference != RefSpeaker {
		cfg.logf("reference clips: %s", cfg.Reference)
	}
	return store, tr, va, nil
}

// ErrEmptySplit is wrapped by the error for a corpus split with no
// utterances: a validation score of nothing would be a made-up 0.
var ErrEmptySplit = errors.New("empty split")

// useReference sets how the corpora's utterances are conditioned
// (cfg.Reference), refusing --reference style for a corpus without the
// speeds and pitches it chooses by.
func useReference(cfg *TrainConfig, cs ...*Corpus) error {
	for _, c := range cs {
		c.RefMode = cfg.Reference
		if cfg.Reference != RefStyle {
			continue
		}
		for _, u := range c.Utts {
			if u.Speed == 0 {
				return recipes.Usagef("tts: --reference style needs every utterance's speed and pitch (`torchfit tts data` writes them); %s's %s.jsonl has none for %s", cfg.Data, c.Split, u.ID)
			}
		}
	}
	return nil
}

// schedule builds AdamW (XTTS's betas 0.9, 0.96; weight decay 0.01 on
// matrices) with warmup and cosine decay over the run.
func schedule(cfg *TrainConfig, params []nn.Named, n int) (*nn.Adam, *nn.Schedule, int) {
	ac := nn.AdamWDefaults(cfg.LR)
	ac.Beta2 = 0.96
	opt := nn.NewAdamWGroups(nn.DecayGroups(params, 0.01), ac)
	total := recipes.TotalSteps(max(n/cfg.EffectiveBatch(), 1), cfg.Epochs, cfg.MaxSteps)
	return opt, nn.NewSchedule(opt, nn.WarmupCosineLR(cfg.Warmup, total, 0.05)), total
}

// MaxCropFrames bounds the codec's training crops: 16384 frames (262 s of
// audio, 5 MiB of log-mels a crop), far beyond any utterance.
const MaxCropFrames = 1 << 14

// checkCrop refuses a crop length the codec cannot train on (not a
// multiple of Down, shorter than two codes) or one past MaxCropFrames,
// before anything is read or allocated.
func checkCrop(frames int) error {
	if frames < 2*Down || frames > MaxCropFrames || frames%Down != 0 {
		return &recipes.ConfigError{Field: "crop-frames", Value: frames,
			Reason: fmt.Sprintf("must be a multiple of %d in [%d, %d]", Down, 2*Down, MaxCropFrames)}
	}
	return nil
}

// TrainCodec trains (or resumes) the codec on crops of the training split.
func TrainCodec(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	torch.Main().Do(func() { res, err = trainCodec(ctx, cfg) })
	return res, err
}

func trainCodec(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	if err := checkCrop(cfg.CropFrames); err != nil {
		return res, err
	}
	if err := cfg.check(); err != nil {
		return res, err
	}
	session, err := recipes.Begin(cfg.Common, cfg.Events)
	if err != nil {
		return res, err
	}
	defer session.End()
	cfg.Events = session.Events() // after Begin's lines
	precision := session.Precision
	res.Precision = precision
	ccfg := cfg.CodecCfg
	if cfg.Resume != "" {
		meta, err := readMeta(cfg.Resume, "codec")
		if err != nil {
			return res, err
		}
		ccfg = meta.Codec
	}
	store, tr, va, err := openData(&cfg, nil)
	if err != nil {
		return res, err
	}
	defer store.Close()
	torch.ManualSeed(cfg.Seed)
	c, err := NewCodec(ccfg)
	if err != nil {
		return res, buildError(err)
	}
	defer nn.Free(c)
	if cfg.Device != torch.CPU {
		nn.To(c, cfg.Device, torch.Float32)
	}
	res.Params = nn.NumParams(c)
	cfg.logf("codec: %d channels, %d codes of %d dimensions, %d frames per code, %s parameters", ccfg.Channels, ccfg.Codes, ccfg.CodeDim, Down, recipes.Commas(res.Params))
	opt, sched, total := schedule(&cfg, nn.Parameters(c), tr.Len())
	defer opt.Free()
	defer sched.Free()
	usage := newCodeUsage(ccfg.Codes)
	defer usage.free()
	cfg.logf("%s of %d crops of %d frames", recipes.Plural(total, "optimizer step"), cfg.EffectiveBatch(), cfg.CropFrames)
	validSet := va.CropDataset(cfg.CropFrames)
	evaluate := func() (Scores, error) { return scoreCodec(c, validSet, cfg.Device) }
	job := recipes.Job{
		Model: c, Opt: opt, Sched: sched,
		Loss: func(b *data.Batch) *torch.Tensor {
			l := c.Loss(b.Field("mel"))
			usage.observe(l.Codes, l.Z)
			return l.Total
		},
		Ready: func(t *train.Trainer) {
			t.OnStep = func(si train.StepInfo) {
				if si.Step%restartEvery == 0 {
					if n := usage.restart(c); n > 0 {
						cfg.logf("step %d: %d unused codes restarted from encoder outputs", si.Step, n)
					}
				}
			}
		},
		Start: func(*train.Trainer) error {
			if cfg.Resume == "" {
				s, err := evaluate()
				if err != nil {
					return err
				}
				res.Start = s
				cfg.logf("validation before training: reconstruction MSE %.4f, %d codes in use", s.Recon, s.CodesUse)
			}
			return nil
		},
		Dataset: tr.CropDataset(cfg.CropFrames), Collate: data.PadCollate(map[string]data.Pad{}),
		Meta: metaDict(modelMeta{Kind: "codec", Codec: ccfg, Mean: store.Index.Mean, Std: store.Index.Std, Data: cfg.Data}),
	}
	t, err := session.Trainer(job)
	if err != nil {
		return res, err
	}
	return fitRun(ctx, session, tr, job, t, evaluate, &res)
}

// fitRun trains job with t by the shared loop (recipes.Session.Run) and
// fills res, scoring the validation split after each epoch (the corpus's
// epoch set first) and at the end when steps followed the last epoch's
// score (--max-steps within an epoch) or none ended.
func fitRun(ctx context.Context, session *recipes.Session, corpus *Corpus, job recipes.Job, t *train.Trainer,
	evaluate func() (Scores, error), res *Result) (Result, error) {
	var last *Scores
	lastAt := -1 // the step last scored
	job.Eval = func(epoch int) (map[string]float64, error) {
		corpus.SetEpoch(epoch)
		s, err := evaluate()
		last, lastAt = &s, t.Steps()
		return s.values(), err
	}
	out, err := session.Run(ctx, t, job)
	res.Checkpoint, res.Interrupted = out.Checkpoint, out.Interrupted
	if err != nil {
		return *res, err
	}
	res.Steps, res.MicroBatch, res.Accum, res.OOMEvents, res.PeakMemory = out.Steps, out.MicroBatch, out.Accum, out.OOMEvents, out.PeakMemory
	if last == nil || lastAt != res.Steps || res.Interrupted { // --max-steps stops within an epoch: score the end, not the last epoch
		s, err := evaluate()
		if err != nil {
			return *res, err
		}
		last = &s
	}
	res.Valid = *last
	return *res, nil
}

func (s Scores) values() map[string]float64 {
	v := map[string]float64{"val_loss": s.Loss}
	if s.CodesUse > 0 {
		v["val_recon_mse"], v["val_codes_used"] = s.Recon, float64(s.CodesUse)
	} else {
		v["val_code_ce"], v["val_text_ce"], v["val_code_acc"] = s.CodeCE, s.TextCE, s.CodeAcc
	}
	return v
}

// restartEvery is how often (optimizer steps) codes unused since the last
// restart are moved onto recent encoder outputs.
const restartEvery = 50

// codeUsage counts the codes the codec picked and keeps a few recent
// encoder outputs to restart unused codes from (the remedy for codebook
// collapse of Jukebox and SoundStream).
type codeUsage struct {
	counts []int64
	recent *torch.Tensor // (n, D), kept
}

func newCodeUsage(k int64) *codeUsage { return &codeUsage{counts: make([]int64, k)} }

func (u *codeUsage) free() { u.recent.Free() }

func (u *codeUsage) observe(codes, z *torch.Tensor) {
	for _, c := range codes.Int64s() {
		u.counts[c]++
	}
	flat := z.Reshape(-1, z.Size(-1))
	n := min(flat.Size(0), 256)
	idx := torch.Randperm(flat.Size(0), z.Device()).Narrow(0, 0, n)
	r := flat.IndexSelect(0, idx).Detach().ToDevice(torch.CPU).Keep()
	u.recent.Free()
	u.recent = r
}

// restart moves unused codes onto random recent encoder outputs and
// resets the counts; it returns how many moved.
func (u *codeUsage) restart(c *Codec) int {
	var dead []int64
	for k, n := range u.counts {
		if n == 0 {
			dead = append(dead, int64(k))
		}
		u.counts[k] = 0
	}
	if len(dead) == 0 || u.recent == nil {
		return 0
	}
	torch.Tidy(func() {
		torch.NoGrad(func() {
			src := torch.Randint(0, u.recent.Size(0), []int64{int64(len(dead))})
			vals := u.recent.IndexSelect(0, src).Add(torch.RandnLike(u.recent.IndexSelect(0, src)).MulScalar(0.01))
			idx := torch.FromSlice(dead, nil).ToDevice(c.Codebook.Device())
			torch.CallOp("aten::index_put_", "", c.Codebook, []*torch.Tensor{idx}, vals.ToDevice(c.Codebook.Device()), false)
		})
	})
	return len(dead)
}

// scoreCodec returns the codec's reconstruction error and codebook use on
// a dataset of crops.
func scoreCodec(c *Codec, ds data.Dataset[data.Sample], dev torch.Device) (Scores, error) {
	var s Scores
	if ds.Len() == 0 {
		return s, fmt.Errorf("tts: no validation crops to score: %w", ErrEmptySplit) // not a perfect MSE 0
	}
	training := c.Training()
	nn.SetTraining(c, false)
	defer nn.SetTraining(c, training)
	var sum float64
	used := map[int64]bool{}
	collate := data.PadCollate(map[string]data.Pad{})
	for start := 0; start < ds.Len(); start += 32 {
		end := min(start+32, ds.Len())
		err := torch.TidyErr(func() error {
			b, err := recipes.CollateAt(ds, collate, span(start, end))
			if err != nil {
				return err
			}
			mel := b.Field("mel").ToDevice(dev)
			torch.NoGrad(func() {
				l := c.Loss(mel)
				sum += l.Recon.Item() * float64(end-start)
				for _, k := range l.Codes.Int64s() {
					used[k] = true
				}
			})
			return nil
		})
		if err != nil {
			return s, err
		}
	}
	s.Recon = sum / float64(ds.Len())
	s.Loss = s.Recon
	s.CodesUse = len(used)
	return s, nil
}

func span(a, b int) []int {
	out := make([]int, 0, b-a)
	for i := a; i < b; i++ {
		out = append(out, i)
	}
	return out
}

// Train trains (or resumes) the GPT over the frozen codec's codes.
func Train(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	torch.Main().Do(func() { res, err = trainGPT(ctx, cfg) })
	return res, err
}

func trainGPT(ctx context.Context, cfg TrainConfig) (res Result, err error) {
	if err := cfg.check(); err != nil {
		return res, err
	}
	session, err := recipes.Begin(cfg.Common, cfg.Events)
	if err != nil {
		return res, err
	}
	defer session.End()
	cfg.Events = session.Events() // after Begin's lines
	precision := session.Precision
	res.Precision = precision
	g, err := buildGPT(&cfg)
	if err != nil {
		return res, err
	}
	defer g.close()
	m, gcfg, ccfg, vocab, codecFile, store, tr, va := g.m, g.gcfg, g.ccfg, g.vocab, g.codecFile, g.store, g.tr, g.va
	gptParams := nn.Parameters(m.GPT)
	for _, p := range gptParams {
		res.Params += p.T.Numel()
	}
	cfg.logf("GPT: %d wide (text embeddings %d), %d layers, %d heads, %d speaker latents, %d phonemes, %d codes; %s parameters (codec %s, frozen)",
		gcfg.DecoderDim, gcfg.TextEncoderDim, gcfg.Layers, gcfg.Heads, gcfg.CondLatents, gcfg.Vocab, gcfg.Codes,
		recipes.Commas(res.Params), recipes.Commas(nn.NumParams(m.Codec)))
	opt, sched, total := schedule(&cfg, gptParams, tr.Len())
	defer opt.Free()
	defer sched.Free()
	cfg.logf("schedule: %s%s", recipes.Plural(total, "optimizer step"), map[bool]string{true: "; gradient checkpointing per block", false: ""}[gcfg.GradCheckpointing])
	collate := Collate(gcfg)
	validSet := va.Dataset()
	evaluate := func() (Scores, error) { return scoreGPT(m, validSet, collate, cfg.Device) }
	job := recipes.Job{
		Model: m, Opt: opt, Sched: sched, Loss: m.Loss, Trainer: func(c *train.Config) { c.Count = CountCodes },
		Dataset: tr.Dataset(), Collate: collate,
		Start: func(t *train.Trainer) error {
			if cfg.AutoBatch && cfg.Resume == "" {
				if err := autoBatch(&cfg, m, t, opt, tr, collate, &res); err != nil {
					return err
				}
			}
			if cfg.Resume == "" {
				s, err := evaluate()
				if err != nil {
					return err
				}
				res.Start = s
				cfg.logf("validation before training: code CE %.3f, text CE %.3f, code accuracy %.3f", s.CodeCE, s.TextCE, s.CodeAcc)
			}
			return nil
		},
		Meta: metaDict(modelMeta{Kind: "gpt", Codec: ccfg, GPT: &gcfg, Vocab: vocab.Tokens, Mean: store.Index.Mean, Std: store.Index.Std,
			Data: cfg.Data, CodecFile: codecFile}),
	}
	t, err := session.Trainer(job)
	if err != nil {
		return res, err
	}
	if cfg.DryRun {
		return res, autoBatch(&cfg, m, t, opt, tr, collate, &res)
	}
	return fitRun(ctx, session, tr, job, t, evaluate, &res)
}

// gptRun is what trainGPT trains: the model (the codec's weights frozen
// in it), its sizes and vocabulary, and the data.
type gptRun struct {
	m         *Model
	gcfg      GPTConfig
	ccfg      CodecConfig
	vocab     *Vocab
	codecFile string
	store     *FeatureStore
	tr, va    *Corpus
	free      []func()
}

func (g *gptRun) close() {
	for i := len(g.free) - 1; i >= 0; i-- {
		g.free[i]()
	}
}

// buildGPT reads the codec (or the checkpoint resumed), the vocabulary of
// the training split's phonemes and the data, and makes the model.
func buildGPT(cfg *TrainConfig) (_ *gptRun, err error) {
	g := &gptRun{}
	defer func() {
		if err != nil {
			g.close() // what was made before the failure
		}
	}()
	gcfg := cfg.GPT
	var vocab *Vocab
	var ccfg CodecConfig
	var codecW torch.StateDict
	codecFile := cfg.Codec
	if cfg.Resume != "" {
		meta, err := readMeta(cfg.Resume, "gpt")
		if err != nil {
			return nil, err
		}
		if vocab, err = NewVocab(meta.Vocab); err != nil {
			return nil, checkpointError(cfg.Resume, err)
		}
		gcfg, ccfg, codecFile = *meta.GPT, meta.Codec, meta.CodecFile
	} else {
		if err := needFile("codec", cfg.Codec); err != nil {
			return nil, err
		}
		meta, w, free, err := readCheckpoint(cfg.Codec, "codec")
		if err != nil {
			return nil, err
		}
		// The codec's weights are copied into the model below: the file
		// (its optimizer state too) is not held through the run.
		defer free()
		ccfg, codecW = meta.Codec, w
		ph, err := readPhonemes(cfg.Data)
		if err != nil {
			return nil, recipes.Usage(err)
		}
		utts, err := readManifestTexts(cfg.Data, "train")
		if err != nil {
			return nil, err
		}
		var trainPh []string
		for _, t := range utts {
			p, ok := ph[t]
			if !ok {
				return nil, recipes.Usagef("tts: %s has no phonemes for %q: run `torchfit tts data --out %s --overwrite` again", filepath.Join(cfg.Data, phonemesFile), t, cfg.Data)
			}
			trainPh = append(trainPh, p)
		}
		if vocab, err = BuildVocab(trainPh); err != nil {
			return nil, recipes.Usagef("tts: %s: %v", filepath.Join(cfg.Data, phonemesFile), err)
		}
		gcfg.Vocab, gcfg.Codes = int64(vocab.Size()), ccfg.Codes
	}
	gcfg.GradCheckpointing = cfg.GradCheckpointing
	store, tr, va, err := openData(cfg, vocab)
	if err != nil {
		return nil, err
	}
	g.free = append(g.free, func() { store.Close() })
	if cfg.Resume == "" {
		var texts, codes int64
		for i := range tr.Len() {
			texts += int64(len(tr.Text[i])) + 1
			codes += CodeLen(int64(tr.Items[i].Frames)) + 1
		}
		gcfg.TextRatio = float64(codes) / float64(texts)
	}
	torch.ManualSeed(cfg.Seed)
	m, err := NewModel(ccfg, gcfg)
	if err != nil {
		return nil, buildError(err)
	}
	g.free = append(g.free, func() { nn.Free(m) })
	if codecW != nil {
		if _, err := nn.LoadStateDict(m.Codec, codecW, true); err != nil {
			return nil, checkpointError(cfg.Codec, err)
		}
		nn.Freeze(m, "codec.")
	}
	m.Vocab = vocab
	if cfg.Device != torch.CPU {
		nn.To(m, cfg.Device, torch.Float32)
	}
	g.m, g.gcfg, g.ccfg, g.vocab, g.codecFile, g.store, g.tr, g.va = m, gcfg, ccfg, vocab, codecFile, store, tr, va
	return g, nil
}

func readManifestTexts(dir, split string) ([]string, error) {
	utts, err := speech.ReadManifest(filepath.Join(dir, split+".jsonl"))
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(utts))
	for i, u := range utts {
		texts[i] = u.Text
	}
	return texts, nil
}

// scoreGPT returns the validation cross-entropies (teacher forcing) and
// code accuracy.
func scoreGPT(m *Model, ds data.Dataset[data.Sample], collate func([]data.Sample) (*data.Batch, error), dev torch.Device) (Scores, error) {
	training := m.Training()
	nn.SetTraining(m, false)
	defer nn.SetTraining(m, training)
	var textSum, codeSum, texts, codes, correct, loss float64
	for start := 0; start < ds.Len(); start += 16 {
		end := min(start+16, ds.Len())
		err := torch.TidyErr(func() error {
			b, err := recipes.CollateAt(ds, collate, span(start, end))
			if err != nil {
				return err
			}
			mb := b.Slice(0, b.Size(), dev)
			torch.NoGrad(func() {
				l := m.Losses(mb)
				textSum += l.TextSum.Item()
				codeSum += l.CodeSum.Item()
				texts += l.Texts.Item()
				c := l.Codes.Item()
				codes += c
				correct += l.Correct.Item()
				loss += l.Total.Item() * c
			})
			return nil
		})
		if err != nil {
			return Scores{}, err
		}
	}
	if codes == 0 {
		return Scores{}, fmt.Errorf("tts: no validation codes to score: %w", ErrEmptySplit)
	}
	return Scores{Loss: loss / codes, CodeCE: codeSum / codes, TextCE: textSum / math.Max(texts, 1), CodeAcc: correct / codes}, nil
}

// autoBatch finds the micro-batch for the run (--auto-batch): with a
// memory budget (--memory-limit or --memory-fraction), the core's planner
// measures dry runs of this model on the longest utterances (the loader's
// batches held as training holds them, recipes.Worst) and picks the
// micro-batch and checkpointing for the budget; without one, the largest
// micro-batch that fits the device is searched. Either way the effective
// batch is kept.
func autoBatch(cfg *TrainConfig, m *Model, t *train.Trainer, opt nn.Optimizer, tr *Corpus, collate func([]data.Sample) (*data.Batch, error), res *Result) error {
	effective := cfg.EffectiveBatch()
	order := tr.longest()
	ds := tr.Dataset()
	worst := func(n int) (*data.Batch, error) { return recipes.CollateAt(ds, collate, order[:min(n, len(order))]) }
	st := torch.MustMemoryStats(cfg.Device)
	budget := st.Limit
	if budget == 0 && cfg.MemoryFraction > 0 && st.DeviceTotal > 0 {
		budget = int64(cfg.MemoryFraction * float64(st.DeviceTotal))
	}
	if budget > 0 {
		longest, err := recipes.NewWorst(ds, collate, order, effective, cfg.Device, data.Options{Workers: cfg.Workers, Prefetch: cfg.Prefetch})
		if err != nil {
			return err
		}
		defer longest.Free()
		ckpt := []bool{false, true}
		if cfg.GradCheckpointing {
			ckpt = []bool{true}
		}
		precision := t.Config().Precision
		var b strings.Builder
		plan, err := memplan.Plan(memplan.PlanOptions{Budget: budget, EffectiveBatch: effective, Checkpointing: ckpt, Precisions: []amp.Precision{precision},
			Report: func(r memplan.Row) {
				cfg.logf("plan: %v: need %s%s", r.Candidate, torch.FormatBytes(r.Need()), map[bool]string{true: "", false: " (does not fit)"}[r.Fits])
			}},
			func(c memplan.Candidate) (memplan.Measurement, error) {
				m.GPT.Cfg.GradCheckpointing = c.Checkpointing
				defer func() { m.GPT.Cfg.GradCheckpointing = cfg.GradCheckpointing }()
				eng := t.Engine()
				return memplan.DryRun{Device: cfg.Device, Model: m, Optimizers: []nn.Optimizer{opt}}.Run(c.Accum,
					func() error {
						return torch.TidyErr(func() error {
							mbd := longest.Micro(c.MicroBatch, cfg.Device)
							var loss *torch.Tensor
							eng.Autocast(func() { loss = m.Loss(mbd) })
							loss.Backward()
							return nil
						})
					},
					func() error { opt.Step(); opt.ZeroGrad(); return nil })
			})
		if err != nil {
			return err
		}
		plan.Table(&b)
		cfg.logf("memory plan for a budget of %s:\n%s", torch.FormatBytes(budget), b.String())
		res.Planned = &plan
		micro := plan.Plan.MicroBatch
		t.SetMicroBatch(micro)
		m.GPT.Cfg.GradCheckpointing = plan.Plan.Checkpointing
		cfg.GradCheckpointing = plan.Plan.Checkpointing
		cfg.logf("auto batch: micro-batch %d × %d accumulation steps keeps the effective batch %d; gradient checkpointing %v",
			micro, plan.Plan.Accum, effective, plan.Plan.Checkpointing)
		return nil
	}
	found, err := recipes.AutoBatch(t, worst, "utterances", cfg.logf)
	if err != nil {
		return err
	}
	res.Found = &found
	return nil
}
