package tts

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// Recipe is the TTS recipe on the command line: torchfit tts
// data|train-codec|train|say|memory-test|eval.
// spec declares the recipe's train commands: its config-file keys, and
// why it trains in one process.
var spec = recipes.Spec{Name: "tts", Keys: configKeys, OneProcess: "its codec and GPT steps do not all-reduce gradients"}

type Recipe struct {
	// Transcribe scores `tts eval`'s speech with its --asr checkpoint
	// (EvalConfig.Transcribe): the registry wires in asr.TranscribeFiles.
	Transcribe Transcriber
}

// Name is the command's name.
func (Recipe) Name() string { return "tts" }

// Usage says what it trains.
func (Recipe) Usage() string {
	return "XTTS-style text-to-speech: a VQ-VAE codec over log-mels and a GPT over speaker latents, phonemes and codes"
}

// Commands are the recipe's verbs.
func (r Recipe) Commands() []*cli.Command {
	return []*cli.Command{dataCommand(), trainCodecCommand(), trainCommand(), sayCommand(r.Transcribe), evalCommand(r.Transcribe), memoryTestCommand()}
}

// configKeys maps the seed's config.yaml keys to flags. Other keys whose
// last part is a flag's name (training.learning_rate, training.epochs)
// are read too; any other key is an error naming it.
var configKeys = map[string]string{
	"training.batch_size":                  "micro-batch",
	"training.gradient_accumulation_steps": "grad-accum",
	"training.enable_memory_cleanup":       "memory-cleanup",
	"training.max_memory_fraction":         "memory-fraction",
	"data.batch_size":                      "data-batch-size",
	"data.prefetch_buffer_size":            "prefetch",
	"data.enable_memory_mapping":           "memory-mapping",
	"model.enable_gradient_checkpointing":  "grad-checkpointing",
	"model.text_encoder_dim":               "text-encoder-dim",
	"model.decoder_dim":                    "decoder-dim",
}

// dataFlags are the flags of the seed's data and training sections that
// the harness does not have.
func dataFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "memory-mapping", Aliases: []string{"enable_memory_mapping"}, Usage: "read the feature cache through a memory map (data.enable_memory_mapping)"},
		&cli.BoolFlag{Name: "memory-cleanup", Aliases: []string{"enable_memory_cleanup"}, Usage: "empty the CUDA cache after every step (training.enable_memory_cleanup; the CPU has no cache)"},
		&cli.IntFlag{Name: "data-batch-size", Usage: "the loader's batch (data.batch_size): must equal --micro-batch (0: the same)"},
		&cli.IntFlag{Name: "valid-limit", Value: 200, Usage: "validation utterances scored per epoch (0: all)"},
	}
}

func trainConfigFrom(c *cli.Context, run *recipes.Run) (TrainConfig, error) {
	cm := run.Common
	if n := c.Int("data-batch-size"); n != 0 && n != cm.MicroBatch {
		return TrainConfig{}, recipes.Reword(&recipes.ConfigError{Field: "data-batch-size", Value: n,
			Reason: fmt.Sprintf("differs from the training batch size %d: torchfit's loader builds the effective batch (batch size × accumulation) and the trainer splits it into micro-batches of the training batch size; set them equal, as the seed does, or leave data.batch_size out", cm.MicroBatch)}, run.FromFile)
	}
	if c.Bool("memory-cleanup") && !c.IsSet("empty-cache-every") && cm.Device.IsCUDA() {
		cm.EmptyCacheEvery = 1
	}
	// As the harness treats --empty-cache-every off CUDA (recipes.Prepare).
	if err := run.NotHere(c, "memory-cleanup", c.Bool("memory-cleanup") && !cm.Device.IsCUDA(),
		fmt.Sprintf("empties the CUDA cache, which %s does not have (--device cuda)", cm.Device)); err != nil {
		return TrainConfig{}, err
	}
	// The seed gives no per-GPU table for --vram to look up: refused,
	// never ignored.
	if err := run.NotHere(c, "vram", cm.VRAM != "", vramWhy); err != nil {
		return TrainConfig{}, err
	}
	cfg := TrainConfig{Common: cm, MemoryMapping: c.Bool("memory-mapping"), ValidLimit: c.Int("valid-limit"), Reference: c.String("reference"), Events: run.Events}
	return cfg, nil
}

// vramWhy is why --vram is refused: the harness's --vram looks a GPU size
// up in the recipe's guide, and MyXTTS's guide has no such table (one
// batch 4 × accumulation 8 configuration and a troubleshooting list).
const vramWhy = "the tts seed (MyXTTS's guide) gives no settings per GPU size; set --micro-batch, --grad-accum, " +
	"--mixed-precision and --grad-checkpointing (or --config with the seed's config.yaml), or let --auto-batch fit the micro-batch"

func trainCodecCommand() *cli.Command {
	def := DefaultCodecConfig()
	return &cli.Command{
		Name:  "train-codec",
		Usage: "train (or resume) the VQ-VAE codec over log-mel frames",
		Flags: append(append(recipes.HideFlags(recipes.Flags(codecDefaults), "vram"), dataFlags()...),
			&cli.Int64Flag{Name: "channels", Value: def.Channels, Usage: "convolution width"},
			&cli.Int64Flag{Name: "codes", Value: def.Codes, Usage: "codebook entries"},
			&cli.Int64Flag{Name: "code-dim", Value: def.CodeDim, Usage: "codebook vector size"},
			&cli.IntFlag{Name: "crop-frames", Value: 64, Usage: "frames per training crop"},
		),
		Action: func(c *cli.Context) error {
			run, err := recipes.Prepare(c, spec)
			if err != nil {
				return err
			}
			defer run.Close()
			cfg, err := trainConfigFrom(c, run)
			if err != nil {
				return err
			}
			cfg.CodecCfg = def
			cfg.CodecCfg.Channels, cfg.CodecCfg.Codes, cfg.CodecCfg.CodeDim = c.Int64("channels"), c.Int64("codes"), c.Int64("code-dim")
			if err := cfg.CodecCfg.Validate(); err != nil {
				return recipes.Usage(err)
			}
			cfg.CropFrames = c.Int("crop-frames")
			if cfg.Resume != "" {
				meta, err := readMeta(cfg.Resume, "codec")
				if err != nil {
					return err
				}
				m := meta.Codec
				if err := recipes.CheckResumed(c, run.FromFile, cfg.Resume, recipes.Stored{Flag: "channels", Value: m.Channels},
					recipes.Stored{Flag: "codes", Value: m.Codes}, recipes.Stored{Flag: "code-dim", Value: m.CodeDim}); err != nil {
					return err
				}
			}
			res, err := TrainCodec(run.Ctx, cfg)
			if cerr := run.Close(); err == nil {
				err = cerr
			}
			if err = userErr(err); err != nil {
				return err
			}
			start := "" // a resumed run scores no start
			if cfg.Resume == "" {
				start = fmt.Sprintf(" (start %.4f)", res.Start.Recon)
			}
			fmt.Printf("trained the codec %s; validation reconstruction MSE %.4f%s, %d of %d codes in use; peak memory %s; checkpoint %s\n",
				recipes.Plural(res.Steps, "step"), res.Valid.Recon, start, res.Valid.CodesUse, cfg.CodecCfg.Codes, torch.FormatBytes(res.PeakMemory), res.Checkpoint)
			return nil
		},
	}
}

func gptFlags() []cli.Flag {
	def := DefaultGPTConfig()
	return []cli.Flag{
		&cli.StringFlag{Name: "codec", Usage: "the codec checkpoint (from train-codec; required unless resuming)"},
		&cli.Int64Flag{Name: "decoder-dim", Aliases: []string{"decoder_dim"}, Value: def.DecoderDim, Usage: "the GPT's width (model.decoder_dim)"},
		&cli.Int64Flag{Name: "text-encoder-dim", Aliases: []string{"text_encoder_dim"}, Value: def.TextEncoderDim, Usage: "the phoneme embeddings' width (model.text_encoder_dim)"},
		&cli.IntFlag{Name: "layers", Value: def.Layers, Usage: "transformer blocks"},
		&cli.Int64Flag{Name: "heads", Value: def.Heads, Usage: "attention heads"},
		&cli.Int64Flag{Name: "ff", Usage: "feed-forward width (0: 4 × decoder-dim)"},
		&cli.Float64Flag{Name: "dropout", Value: def.Dropout},
		&cli.Int64Flag{Name: "cond-latents", Value: def.CondLatents, Usage: "speaker latents from the reference clip"},
		&cli.BoolFlag{Name: "aligned-positions", Value: def.AlignedPositions, Usage: "start the position embeddings as sinusoids, the codes' at the phonemes' average rate (=false: N(0, 0.02))"},
		&cli.StringFlag{Name: "reference", Value: RefSpeaker, Usage: "the clip conditioning each training utterance: speaker (another of the speaker's), style (one of the speaker's closest in speed and pitch) or self (a slice of the utterance, its codes not scored: XTTS's)"},
	}
}

// gptConfigFrom reads the GPT's flags and checks them before anything
// runs; the phoneme and code vocabularies, which the data and the codec
// give later, stand in at their least.
func gptConfigFrom(c *cli.Context) (GPTConfig, error) {
	g := DefaultGPTConfig()
	g.DecoderDim, g.TextEncoderDim, g.Layers, g.Heads = c.Int64("decoder-dim"), c.Int64("text-encoder-dim"), c.Int("layers"), c.Int64("heads")
	g.FF, g.Dropout, g.CondLatents = c.Int64("ff"), c.Float64("dropout"), c.Int64("cond-latents")
	g.AlignedPositions = c.Bool("aligned-positions")
	if g.FF == 0 {
		g.FF = 4 * g.DecoderDim
	}
	v := g
	v.Vocab, v.Codes = 3, 2
	if err := v.Validate(); err != nil {
		return g, recipes.Usage(err)
	}
	return g, nil
}

func trainFlags() []cli.Flag {
	return append(append(recipes.HideFlags(recipes.Flags(Defaults), "vram"), dataFlags()...), gptFlags()...)
}

func trainCommand() *cli.Command {
	return &cli.Command{
		Name:  "train",
		Usage: "train (or resume) the GPT over speaker latents, phonemes and the frozen codec's codes",
		Flags: trainFlags(),
		Action: func(c *cli.Context) error {
			run, err := recipes.Prepare(c, spec)
			if err != nil {
				return err
			}
			defer run.Close()
			cfg, err := trainConfigFrom(c, run)
			if err != nil {
				return err
			}
			cfg.Codec = c.String("codec")
			if cfg.GPT, err = gptConfigFrom(c); err != nil {
				return err
			}
			if cfg.Resume != "" {
				meta, err := readMeta(cfg.Resume, "gpt")
				if err != nil {
					return err
				}
				m, codec := meta.GPT, meta.CodecFile
				if a, err := os.Stat(c.String("codec")); err == nil {
					if b, err := os.Stat(codec); err == nil && os.SameFile(a, b) {
						codec = c.String("codec") // the same file, however named
					}
				}
				if err := recipes.CheckResumed(c, run.FromFile, cfg.Resume, recipes.Stored{Flag: "decoder-dim", Value: m.DecoderDim},
					recipes.Stored{Flag: "text-encoder-dim", Value: m.TextEncoderDim}, recipes.Stored{Flag: "layers", Value: m.Layers},
					recipes.Stored{Flag: "heads", Value: m.Heads}, recipes.Stored{Flag: "ff", Value: m.FF},
					recipes.Stored{Flag: "dropout", Value: m.Dropout}, recipes.Stored{Flag: "cond-latents", Value: m.CondLatents},
					recipes.Stored{Flag: "aligned-positions", Value: m.AlignedPositions},
					recipes.Stored{Flag: "codec", Value: codec}); err != nil {
					return err
				}
			}
			res, err := Train(run.Ctx, cfg)
			if cerr := run.Close(); err == nil {
				err = cerr
			}
			if err = userErr(err); err != nil {
				return err
			}
			if cfg.DryRun {
				if res.Planned != nil {
					res.Planned.Table(os.Stdout)
				} else if res.Found != nil {
					res.Found.Table(os.Stdout)
				}
				return nil
			}
			start := "" // a resumed run scores no start
			if cfg.Resume == "" {
				start = fmt.Sprintf(" (start %.3f)", res.Start.CodeCE)
			}
			fmt.Printf("trained %s (micro-batch %d × %d); validation code CE %.3f%s, code accuracy %.3f, text CE %.3f; peak memory %s; checkpoint %s\n",
				recipes.Plural(res.Steps, "step"), res.MicroBatch, res.Accum, res.Valid.CodeCE, start, res.Valid.CodeAcc, res.Valid.TextCE,
				torch.FormatBytes(res.PeakMemory), res.Checkpoint)
			return nil
		},
	}
}

// userErr turns the training core's refusals into the user's errors.
func userErr(err error) error {
	if errors.Is(err, train.ErrNonFinite) {
		return fmt.Errorf("%w; try a lower --lr or a --clip-norm", err)
	}
	var conflict *train.ConflictError
	if errors.As(err, &conflict) {
		return recipes.Usagef("%v: pass --resume FILE to continue that run, choose another --checkpoint-dir, or pass --overwrite", err)
	}
	return err
}

func dataCommand() *cli.Command {
	def := DefaultDataConfig()
	return &cli.Command{
		Name:  "data",
		Usage: "synthesise a multi-speaker corpus (the ASR recipe's, clean, one voice held out), its phonemes and log-mel cache",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: def.OutDir, Usage: "corpus directory"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace a data set already in --out (its hand-edited captions or transcripts too)"},
			&cli.IntFlag{Name: "utterances", Value: def.Utterances, Usage: "utterances over all splits"},
			&cli.Uint64Flag{Name: "seed", Value: def.Seed},
			&cli.IntFlag{Name: "workers", Usage: "parallel workers (0: all CPUs)"},
			&cli.StringFlag{Name: "held-out-voice", Value: def.HeldOutVoice, Usage: "the voice that reads only test sentences (the unseen speaker)"},
		},
		Action: func(c *cli.Context) error {
			replacing, err := recipes.CheckDataOut(c.String("out"), c.Bool("overwrite"), "train.jsonl", phonemesFile, featuresFile)
			if err != nil {
				return err
			}
			if replacing != "" {
				fmt.Fprintln(os.Stderr, "torchfit:", replacing)
			}
			cfg := def
			cfg.OutDir, cfg.Utterances, cfg.Seed = c.String("out"), c.Int("utterances"), c.Uint64("seed")
			cfg.Workers, cfg.HeldOutVoice = c.Int("workers"), c.String("held-out-voice")
			st, err := Generate(c.Context, cfg)
			if err != nil {
				return recipes.Usage(err) // its *ConfigError kept in the chain
			}
			fmt.Printf("corpus in %s: %d synthesised, %d already there, %.1f min of audio (train %d, valid %d, test %d); %d sentences phonemised; %d mel frames cached; %s\n",
				cfg.OutDir, st.Synthesised, st.Skipped, st.Seconds/60, st.Counts["train"], st.Counts["valid"], st.Counts["test"],
				st.Phonemised, st.Frames, st.Elapsed.Round(time.Millisecond))
			return nil
		},
	}
}

func sampleFlags() []cli.Flag {
	d := DefaultSampleOptions()
	return []cli.Flag{
		&cli.StringFlag{Name: "device", Value: "auto"},
		&cli.Float64Flag{Name: "temperature", Value: d.Temperature, Usage: "sampling temperature (0: greedy)"},
		&cli.IntFlag{Name: "top-k", Value: d.TopK, Usage: "sample among the k likeliest codes (0: all)"},
		&cli.Float64Flag{Name: "top-p", Value: d.TopP, Usage: "sample among the likeliest codes holding this probability (0 or 1: all)"},
		&cli.Float64Flag{Name: "repetition-penalty", Value: d.RepetitionPenalty, Usage: "divide the logits of codes already generated by this (0 or 1: none)"},
		&cli.Uint64Flag{Name: "seed", Value: d.Seed},
		&cli.IntFlag{Name: "max-codes", Usage: "stop after this many codes (0: 10 per phoneme + 50)"},
		&cli.IntFlag{Name: "candidates", Value: 1, Usage: "sample this many code sequences (seeds seed, seed+1, …) and keep the one the GPT finds likeliest (0 or 1: one)"},
		&cli.IntFlag{Name: "griffin-lim-iters", Value: 32, Usage: "Griffin-Lim iterations (1 to 1000)"},
		&cli.IntFlag{Name: "threads", Usage: "libtorch CPU threads (0: default)"},
	}
}

func sampleFrom(c *cli.Context) (torch.Device, SampleOptions, error) {
	dev, err := recipes.ParseDevice(c.String("device"))
	if err != nil {
		return dev, SampleOptions{}, recipes.Usagef("--device: %v", err)
	}
	if err := recipes.CheckRanges(recipes.Between("threads", int64(c.Int("threads")), 0, recipes.MaxThreads)); err != nil {
		return dev, SampleOptions{}, err
	}
	if n := c.Int("threads"); n > 0 {
		torch.SetNumThreads(n)
	}
	o := SampleOptions{Temperature: c.Float64("temperature"), TopK: c.Int("top-k"), TopP: c.Float64("top-p"), RepetitionPenalty: c.Float64("repetition-penalty"), Seed: c.Uint64("seed"), MaxCodes: c.Int("max-codes"), Candidates: c.Int("candidates")}
	return dev, o, o.Validate()
}

func sayCommand(transcribe Transcriber) *cli.Command {
	return &cli.Command{
		Name:  "say",
		Usage: "speak a text in the voice of a reference clip: phonemes → codes (KV-cached sampling) → codec → mel → Griffin-Lim → 16 kHz WAV",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "a checkpoint of `tts train` (required)"},
			&cli.StringFlag{Name: "text", Usage: "what to say (Konkani or Marathi in Devanagari)"},
			&cli.StringFlag{Name: "speaker", Usage: "reference clip of the voice (WAV, at least 0.5 s)"},
			&cli.StringFlag{Name: "out", Value: "out.wav", Usage: "WAV to write"},
			&cli.StringFlag{Name: "rank-asr", Usage: "an ASR checkpoint that keeps, of the --candidates, the one it transcribes closest to --text"},
		}, sampleFlags()...),
		Action: func(c *cli.Context) error {
			dev, o, err := sampleFrom(c)
			if err != nil {
				return err
			}
			if c.String("speaker") == "" {
				return recipes.Usagef("--speaker is required (a reference clip of the voice)")
			}
			if err := recipes.CheckOutput("out", c.String("out"), recipes.WAV); err != nil {
				return err
			}
			res, err := Say(c.Context, SayConfig{Checkpoint: c.String("checkpoint"), Text: c.String("text"), Speaker: c.String("speaker"),
				Out: c.String("out"), Device: dev, Sample: o, GLIters: c.Int("griffin-lim-iters"), Rank: c.String("rank-asr"), Transcribe: transcribe})
			if err != nil {
				return err
			}
			end := "the model ended it"
			if !res.Stopped {
				end = "cut at the length bound"
			}
			if res.Unknown > 0 {
				fmt.Fprintf(os.Stderr, "torchfit: warning: %d phonemes outside the model's vocabulary were read as <unk>\n", res.Unknown)
			}
			if c.String("rank-asr") != "" {
				end += fmt.Sprintf("; candidate %d of %d by the GPT's likelihood, kept by the ranker at CER %.3f", res.Pick+1, o.Candidates, res.CER)
			}
			fmt.Printf("wrote %s: %.2f s, %d codes (%s); phonemes: %s\n", c.String("out"), res.Seconds, res.Codes, end, res.Phonemes)
			return nil
		},
	}
}

func evalCommand(transcribe Transcriber) *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "intelligibility: synthesise held-out sentences with seen and unseen voices, transcribe them with an ASR model, report CER and mel L1",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "a checkpoint of `tts train` (required)"},
			&cli.StringFlag{Name: "asr", Usage: "an ASR checkpoint trained on the same corpus (required)"},
			&cli.StringFlag{Name: "rank-asr", Usage: "another ASR checkpoint (not --asr) that keeps, of the --candidates, the one it transcribes closest to the text"},
			&cli.StringFlag{Name: "data", Value: "data/tts"},
			&cli.StringFlag{Name: "split", Value: "test"},
			&cli.IntFlag{Name: "limit", Value: 40, Usage: "utterances per group of voices (0: all)"},
			&cli.StringFlag{Name: "out", Value: "eval", Usage: "directory for the WAVs and eval.json"},
		}, sampleFlags()...),
		Action: func(c *cli.Context) error {
			dev, o, err := sampleFrom(c)
			if err != nil {
				return err
			}
			if v := c.Int("limit"); v < 0 {
				return &recipes.ConfigError{Field: "limit", Value: v, Reason: "must be at least 0 (0: all)"}
			}
			if st, err := os.Stat(c.String("out")); err == nil && !st.IsDir() {
				return recipes.Usagef("--out %s is not a directory: name one for the WAVs and eval.json", c.String("out"))
			}
			log := report.NewLogger(os.Stderr)
			res, err := Evaluate(c.Context, EvalConfig{Checkpoint: c.String("checkpoint"), ASR: c.String("asr"), Rank: c.String("rank-asr"), Transcribe: transcribe, Data: c.String("data"),
				Split: c.String("split"), Limit: c.Int("limit"), Out: c.String("out"), Device: dev, Sample: o, GLIters: c.Int("griffin-lim-iters"), Logf: log.Printf})
			if err != nil {
				return err
			}
			res.Table(os.Stdout)
			fmt.Println()
			res.Transcripts(os.Stdout, 2)
			return nil
		},
	}
}

// memoryTestUnused are the training flags a memory test cannot honour,
// with why: it trains a fresh model at each of --batch-sizes for
// --duration and prints a table, saving, scoring and logging nothing
// else (recipes.Unused: hidden, refused, or logged from a config file).
var memoryTestUnused = []recipes.Unused{
	{Flag: "micro-batch", Why: "the memory test trains at each size of --batch-sizes"},
	{Flag: "data-batch-size", Why: "the memory test's batches are the sizes of --batch-sizes"},
	{Flag: "auto-batch", Why: "the memory test measures the sizes of --batch-sizes, with no out-of-memory adaptation"},
	{Flag: "dry-run", Why: "the memory test measures the sizes of --batch-sizes, with no out-of-memory adaptation"},
	{Flag: "epochs", Why: "the memory test trains each size for --duration"},
	{Flag: "max-steps", Why: "the memory test trains each size for --duration"},
	{Flag: "checkpoint-dir", Why: "the memory test saves no checkpoint"},
	{Flag: "checkpoint-every", Why: "the memory test saves no checkpoint"},
	{Flag: "overwrite", Why: "the memory test saves no checkpoint"},
	{Flag: "resume", Why: "the memory test trains a fresh model at each size"},
	{Flag: "metrics", Why: "the memory test writes no per-step metrics (its table is on stdout)"},
	{Flag: "tensorboard", Why: "the memory test writes no TensorBoard events (its table is on stdout)"},
	{Flag: "memory-every", Why: "the memory test writes each size's peak memory in its table, no memory lines"},
	{Flag: "max-nonfinite-steps", Why: "the memory test measures memory and time whatever the loss"},
	{Flag: "valid-limit", Why: "the memory test scores no validation split"},
}

func memoryTestCommand() *cli.Command {
	shared := recipes.Flags(recipes.Defaults{Data: Defaults.Data, MicroBatch: 1, Accum: 1, Precision: "no", Epochs: 1,
		LR: Defaults.LR, Warmup: Defaults.Warmup, ClipNorm: Defaults.ClipNorm, Workers: 1, Prefetch: 2})
	flags := append(append(append(shared, dataFlags()...), gptFlags()...),
		&cli.StringFlag{Name: "batch-sizes", Value: "2,4,6,8", Usage: "micro-batch sizes to try, comma-separated"},
		&cli.StringFlag{Name: "duration", Value: "60", Usage: "training time per size: seconds, or a duration (90s, 2m)"},
	)
	hidden := append([]string{"vram", "zero", "bucket-mb", "allreduce-after-backward"}, // refused by trainConfigFrom and Prepare
		recipes.Names(memoryTestUnused)...)
	return &cli.Command{
		Name:  "memory-test",
		Usage: "train at each batch size for a while and print peak memory, step time, samples/s and OOM (the seed's test_memory_optimization.py)",
		Flags: recipes.HideFlags(flags, hidden...),
		Action: func(c *cli.Context) error {
			sizes, err := parseSizes(c.String("batch-sizes"))
			if err != nil {
				return err
			}
			d, err := parseDuration(c.String("duration"))
			if err != nil {
				return err
			}
			run, err := recipes.Prepare(c, spec, memoryTestUnused...)
			if err != nil {
				return err
			}
			defer run.Close()
			cfg, err := trainConfigFrom(c, run)
			if err != nil {
				return err
			}
			cfg.Codec = c.String("codec")
			if cfg.GPT, err = gptConfigFrom(c); err != nil {
				return err
			}
			res, err := RunMemoryTest(run.Ctx, cfg, sizes, d)
			if cerr := run.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			res.Table(os.Stdout)
			return res.Failed()
		},
	}
}

// parseSizes reads "2,4,6,8".
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > recipes.MaxBatch {
			return nil, &recipes.ConfigError{Field: "batch-sizes", Value: s, Reason: "want positive integers separated by commas, e.g. 2,4,6,8"}
		}
		out = append(out, n)
	}
	return out, nil
}

// parseDuration reads seconds ("60", "0.5") or a Go duration ("90s").
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if ferr != nil {
			return 0, &recipes.ConfigError{Field: "duration", Value: s, Reason: "want seconds (60) or a duration (90s, 2m)"}
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 || d > 1000*time.Hour {
		return 0, &recipes.ConfigError{Field: "duration", Value: s, Reason: "must be positive (and under 1000 hours)"}
	}
	return d, nil
}
