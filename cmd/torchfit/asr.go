package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

func asrCommand() *cli.Command {
	return &cli.Command{
		Name:  "asr",
		Usage: "Konkani speech recognition: a conformer with CTC and attention decoder",
		Subcommands: []*cli.Command{
			asrDataCommand(),
			asrTrainCommand(),
			asrEvalCommand(),
			asrTranscribeCommand(),
			asrMemoryTableCommand(),
		},
	}
}

func asrDataCommand() *cli.Command {
	def := asr.DefaultGenerateConfig()
	return &cli.Command{
		Name:  "data",
		Usage: "synthesise a Konkani corpus with espeak-ng (Marathi voices) and sox",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: def.OutDir, Usage: "corpus directory"},
			&cli.IntFlag{Name: "utterances", Value: def.Utterances, Usage: "utterances over all splits"},
			&cli.Uint64Flag{Name: "seed", Value: def.Seed},
			&cli.IntFlag{Name: "workers", Value: 0, Usage: "parallel synthesis workers (0: all CPUs)"},
			&cli.Float64Flag{Name: "noise", Value: def.NoiseFraction, Usage: "fraction of utterances with added noise"},
		},
		Action: func(c *cli.Context) error {
			cfg := def
			cfg.OutDir, cfg.Utterances, cfg.Seed = c.String("out"), c.Int("utterances"), c.Uint64("seed")
			cfg.Workers, cfg.NoiseFraction = c.Int("workers"), c.Float64("noise")
			st, err := asr.Generate(c.Context, cfg)
			if err != nil {
				return userErr("%v", err)
			}
			fmt.Printf("corpus in %s: %d synthesised, %d already there, %.1f min of audio in %s (train %d, valid %d, test %d)\n",
				cfg.OutDir, st.Synthesised, st.Skipped, st.Seconds/60, st.Elapsed.Round(time.Millisecond),
				st.Counts[asr.Train], st.Counts[asr.Valid], st.Counts[asr.Test])
			return nil
		},
	}
}

func trainFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "data", Value: "data/asr", Usage: "corpus directory (from `torchfit asr data`)"},
		&cli.StringFlag{Name: "config", Usage: "JSON or YAML (.yaml, .yml) file with any of these flags (flags override it)"},
		&cli.StringFlag{Name: "preset", Value: "optimized", Usage: "model size: original, optimized, minimal, tiny"},
		&cli.StringFlag{Name: "vram", Usage: "pick batch/accumulation/precision/checkpointing for an 8gb, 12gb, 16gb or 24gb GPU"},
		&cli.Int64Flag{Name: "d-model", Usage: "override the preset's d_model"},
		&cli.IntFlag{Name: "encoder-layers", Usage: "override the preset's encoder layers"},
		&cli.IntFlag{Name: "decoder-layers", Usage: "override the preset's decoder layers"},
		&cli.IntFlag{Name: "batch-size", Value: 2, Usage: "micro-batch"},
		&cli.IntFlag{Name: "grad-accum", Value: 4, Usage: "gradient accumulation steps (effective batch = batch-size × grad-accum)"},
		&cli.StringFlag{Name: "mixed-precision", Value: "no", Usage: "no, auto (fp16 on CUDA, bf16 on CPU), bf16 or fp16"},
		&cli.StringFlag{Name: "device", Value: "auto", Usage: "cpu, cuda, cuda:N or auto"},
		&cli.IntFlag{Name: "epochs", Value: 20},
		&cli.IntFlag{Name: "max-steps", Usage: "stop after this many optimizer steps"},
		&cli.Float64Flag{Name: "lr", Value: 1e-3},
		&cli.IntFlag{Name: "warmup", Value: 100, Usage: "warmup steps"},
		&cli.Float64Flag{Name: "clip-norm", Value: 5},
		&cli.IntFlag{Name: "empty-cache-every", Value: 50, Usage: "empty the CUDA cache every N steps (0: never)"},
		&cli.BoolFlag{Name: "grad-checkpointing", Usage: "recompute conformer blocks in backward instead of keeping activations"},
		&cli.StringFlag{Name: "memory-limit", Usage: "cap device memory: a size (6GiB, 512MB, 1.5g), bytes (>= 1 MiB) or a fraction in (0, 1] (0.9)"},
		&cli.BoolFlag{Name: "auto-batch", Usage: "find the largest micro-batch that fits; keep the effective batch with accumulation"},
		&cli.BoolFlag{Name: "dry-run", Usage: "with --auto-batch: print the batch-size table and exit"},
		&cli.StringFlag{Name: "checkpoint-dir", Value: "checkpoints"},
		&cli.IntFlag{Name: "checkpoint-every", Value: 100, Usage: "steps between checkpoints"},
		&cli.StringFlag{Name: "resume", Usage: "checkpoint to resume from"},
		&cli.BoolFlag{Name: "overwrite", Usage: "replace checkpoints of another run in --checkpoint-dir that have the names this run writes"},
		&cli.StringFlag{Name: "metrics", Usage: "append per-step metrics (JSONL) here"},
		&cli.IntFlag{Name: "workers", Value: 2, Usage: "data loader workers"},
		&cli.BoolFlag{Name: "spec-augment", Usage: "SpecAugment masks on training features"},
		&cli.Uint64Flag{Name: "seed", Value: 1},
		&cli.IntFlag{Name: "valid-limit", Usage: "validation utterances scored per epoch (0: all)"},
		&cli.IntFlag{Name: "memory-every", Value: 25, Usage: "log a memory line every N steps"},
		&cli.IntFlag{Name: "threads", Usage: "libtorch CPU threads (0: default)"},
		&cli.IntFlag{Name: "pad-multiple", Value: asr.FrameMultiple, Usage: "pad each batch's frames to a multiple of this (1: to the longest utterance only)"},
		&cli.IntFlag{Name: "max-nonfinite-steps", Value: train.DefaultMaxNonFinite,
			Usage: "stop when the loss has been NaN or infinite for this many steps in a row (-1: never)"},
	}
}

// maxThreads bounds --threads.
const maxThreads = 1024

func trainConfig(c *cli.Context) (asr.TrainConfig, error) {
	fromFile, err := applyConfigFile(c)
	if err != nil {
		return asr.TrainConfig{}, err
	}
	if err := finiteFloats(c); err != nil {
		return asr.TrainConfig{}, configError(err, fromFile)
	}
	dev, err := torch.ParseDevice(c.String("device"))
	if err != nil {
		return asr.TrainConfig{}, userErr("%v", err)
	}
	if dev.IsCUDA() && !torch.CUDAAvailable() {
		return asr.TrainConfig{}, userErr("--device %s: CUDA is not available in this build or machine", c.String("device"))
	}
	if n := c.Int("threads"); n < 0 || n > maxThreads {
		return asr.TrainConfig{}, configError(&asr.ConfigError{Field: "threads", Value: n,
			Reason: fmt.Sprintf("must be from 0 (libtorch's default) to %d", maxThreads)}, fromFile)
	}
	preset := c.String("preset")
	if c.String("resume") != "" && !c.IsSet("preset") {
		preset = "" // the checkpoint's
	}
	cfg := asr.TrainConfig{
		Data: c.String("data"), Preset: preset, DModel: c.Int64("d-model"),
		EncoderLayers: c.Int("encoder-layers"), DecoderLayers: c.Int("decoder-layers"),
		BatchSize: c.Int("batch-size"), GradAccum: c.Int("grad-accum"), Precision: c.String("mixed-precision"),
		Device: dev, Epochs: c.Int("epochs"), MaxSteps: c.Int("max-steps"), LR: c.Float64("lr"), Warmup: c.Int("warmup"),
		ClipNorm: c.Float64("clip-norm"), EmptyCacheEvery: c.Int("empty-cache-every"), GradCheckpointing: c.Bool("grad-checkpointing"),
		MemoryLimit: c.String("memory-limit"), AutoBatch: c.Bool("auto-batch") || c.Bool("dry-run"), DryRun: c.Bool("dry-run"), CheckpointDir: c.String("checkpoint-dir"),
		CheckpointEvery: c.Int("checkpoint-every"), Overwrite: c.Bool("overwrite"), Resume: c.String("resume"),
		Workers: c.Int("workers"), SpecAugment: c.Bool("spec-augment"), Seed: c.Uint64("seed"),
		ValidLimit: c.Int("valid-limit"), MemoryEvery: c.Int("memory-every"), PadMultiple: c.Int("pad-multiple"),
		MaxNonFinite: c.Int("max-nonfinite-steps"),
	}
	if v := c.String("vram"); v != "" {
		preset, batch, accum, mixed, ckpt, err := asr.VRAMPreset(v)
		if err != nil {
			return cfg, userErr("%v", err)
		}
		if !c.IsSet("preset") && cfg.Resume == "" {
			cfg.Preset = preset
		}
		if !c.IsSet("batch-size") {
			cfg.BatchSize = batch
		}
		if !c.IsSet("grad-accum") {
			cfg.GradAccum = accum
		}
		if mixed && !c.IsSet("mixed-precision") {
			cfg.Precision = "auto"
		}
		if !c.IsSet("grad-checkpointing") {
			cfg.GradCheckpointing = ckpt
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, configError(err, fromFile)
	}
	if !dev.IsCUDA() {
		cfg.EmptyCacheEvery = 0 // no cache on the CPU
	}
	if cfg.Resume != "" {
		if _, err := os.Stat(cfg.Resume); err != nil {
			return cfg, userErr("--resume: %v", err)
		}
	}
	if n := c.Int("threads"); n > 0 {
		torch.SetNumThreads(n)
	}
	return cfg, nil
}

// configError words an *asr.ConfigError as the flag (or the --config
// file's key) that set the value, as a usage error.
func configError(err error, fromFile map[string]string) error {
	var ce *asr.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	where := "--" + ce.Field
	if path, ok := fromFile[ce.Field]; ok {
		where = fmt.Sprintf("--config %s: %s", path, ce.Field)
	}
	if ce.Err != nil {
		return usageError{fmt.Errorf("%s: %w", where, ce.Err)}
	}
	v := fmt.Sprint(ce.Value)
	if s, ok := ce.Value.(string); ok {
		v = strconv.Quote(s)
	}
	return usageError{fmt.Errorf("%s %s: %s", where, v, ce.Reason)}
}

func asrTrainCommand() *cli.Command {
	return &cli.Command{
		Name:  "train",
		Usage: "train (or resume) a conformer",
		Flags: trainFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := trainConfig(c)
			if err != nil {
				return err
			}
			fe, err := newFrontEnd(logger(c), c.String("metrics"))
			if err != nil {
				return err
			}
			cfg.Events = fe.Sink()
			ctx, stop := report.SignalContext(c.Context)
			res, err := asr.TrainConformer(ctx, cfg)
			stop()
			if cerr := fe.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("--metrics: %w", cerr)
			}
			if errors.Is(err, train.ErrNonFinite) {
				return fmt.Errorf("%w; try a lower --lr or a --clip-norm", err)
			}
			var conflict *train.ConflictError
			if errors.As(err, &conflict) {
				return userErr("%v: pass --resume FILE to continue that run, choose another --checkpoint-dir, or pass --overwrite", err)
			}
			if err != nil {
				return classify(err)
			}
			if cfg.DryRun {
				res.FoundBatches.Table(os.Stdout)
				return nil
			}
			start := "resumed"
			if !math.IsNaN(res.CERStart) {
				start = fmt.Sprintf("start %.3f", res.CERStart)
			}
			fmt.Printf("trained %d steps (micro-batch %d × %d); validation CER %.3f (%s), loss %.3f; peak memory %s; checkpoint %s\n",
				res.Steps, res.MicroBatch, res.Accum, res.CER, start, res.ValidLoss, torch.FormatBytes(res.PeakMemory), res.Checkpoint)
			return nil
		},
	}
}

// classify marks errors a user caused (files, inputs) as usage errors.
func classify(err error) error {
	var bad *asr.CheckpointError
	if errors.As(err, &bad) {
		return usageError{err}
	}
	msg := err.Error()
	for _, s := range []string{"no corpus", "no such file", "expects 16 kHz", "not a torchfit checkpoint", "another model",
		"not an ASR checkpoint", "unknown", "bad file", "is not a", "fewer than one", "was trained with preset"} {
		if strings.Contains(msg, s) {
			return usageError{err}
		}
	}
	return err
}

func asrEvalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "CER and WER of a checkpoint on a split",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Required: true},
			&cli.StringFlag{Name: "data", Value: "data/asr"},
			&cli.StringFlag{Name: "split", Value: "test", Usage: "train, valid or test"},
			&cli.StringFlag{Name: "device", Value: "auto"},
		},
		Action: func(c *cli.Context) error {
			dev, err := torch.ParseDevice(c.String("device"))
			if err != nil {
				return userErr("%v", err)
			}
			if _, err := os.Stat(c.String("checkpoint")); err != nil {
				return userErr("--checkpoint: %v", err)
			}
			r, err := asr.Evaluate(c.String("checkpoint"), c.String("data"), c.String("split"), dev)
			if err != nil {
				return classify(err)
			}
			if len(r.NonFinite) > 0 {
				fmt.Fprintf(os.Stderr, "torchfit: warning: %s holds NaN or infinite values in %d weight tensor(s) (%s): the scores below mean nothing; evaluate a checkpoint from before the run diverged\n",
					c.String("checkpoint"), len(r.NonFinite), names(r.NonFinite, 4))
			}
			fmt.Printf("%s split (%d utterances): CER %.3f, WER %.3f\n", c.String("split"), r.N, r.CER, r.WER)
			return nil
		},
	}
}

// names lists up to max names, then how many more.
func names(xs []string, max int) string {
	if len(xs) <= max {
		return strings.Join(xs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(xs[:max], ", "), len(xs)-max)
}

func asrTranscribeCommand() *cli.Command {
	return &cli.Command{
		Name:      "transcribe",
		Usage:     "transcribe WAV files (greedy CTC): PCM 8-32 bit or float, any rate and channels; long files in 30 s windows",
		ArgsUsage: "file.wav...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Required: true},
			&cli.StringFlag{Name: "device", Value: "auto"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return userErr("transcribe: give one or more WAV files")
			}
			dev, err := torch.ParseDevice(c.String("device"))
			if err != nil {
				return userErr("%v", err)
			}
			if _, err := os.Stat(c.String("checkpoint")); err != nil {
				return userErr("--checkpoint: %v", err)
			}
			texts, err := asr.TranscribeFiles(c.String("checkpoint"), c.Args().Slice(), dev)
			var audio *asr.AudioError
			if errors.As(err, &audio) {
				return usageError{err}
			}
			if err != nil {
				return classify(err)
			}
			for k, t := range texts {
				fmt.Printf("%s\t%s\n", c.Args().Get(k), t)
			}
			return nil
		},
	}
}

func asrMemoryTableCommand() *cli.Command {
	return &cli.Command{
		Name:  "memory-table",
		Usage: "measure parameters and peak step memory per preset with and without the levers (the guide's Model Size Comparison)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Value: "data/asr"},
			&cli.StringFlag{Name: "device", Value: "auto"},
			&cli.StringSliceFlag{Name: "preset", Value: cli.NewStringSlice("original", "optimized", "minimal", "tiny")},
		},
		Action: func(c *cli.Context) error {
			dev, err := torch.ParseDevice(c.String("device"))
			if err != nil {
				return userErr("%v", err)
			}
			table, err := asr.MemoryTable(c.String("data"), dev, c.StringSlice("preset"), logger(c).Printf)
			if err != nil {
				return classify(err)
			}
			fmt.Print(table)
			return nil
		},
	}
}

var _ = context.Background
