package asr

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// Recipe is the ASR recipe on the command line: torchfit asr
// data|train|eval|transcribe|memory-table.
// spec declares the recipe's train commands: it trains data parallel
// under a launcher.
var spec = recipes.Spec{Name: "asr", DataParallel: true}

type Recipe struct{}

// Name is the command's name.
func (Recipe) Name() string { return "asr" }

// Usage says what it trains.
func (Recipe) Usage() string {
	return "Konkani speech recognition: a conformer with CTC and attention decoder"
}

// Commands are the recipe's verbs.
func (Recipe) Commands() []*cli.Command {
	return []*cli.Command{dataCommand(), trainCommand(), planCommand(), evalCommand(), transcribeCommand(), memoryTableCommand()}
}

func dataCommand() *cli.Command {
	def := speech.DefaultGenerateConfig()
	return &cli.Command{
		Name:  "data",
		Usage: "synthesise a Konkani corpus with espeak-ng (Marathi voices) and sox",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: def.OutDir, Usage: "corpus directory"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace a data set already in --out (its hand-edited captions or transcripts too)"},
			&cli.IntFlag{Name: "utterances", Value: def.Utterances, Usage: "utterances over all splits"},
			&cli.Uint64Flag{Name: "seed", Value: def.Seed},
			&cli.IntFlag{Name: "workers", Value: 0, Usage: "parallel synthesis workers (0: all CPUs)"},
			&cli.Float64Flag{Name: "noise", Value: def.NoiseFraction, Usage: "fraction of utterances with added noise"},
		},
		Action: func(c *cli.Context) error {
			if err := recipes.CheckRanges(recipes.Between("workers", int64(c.Int("workers")), 0, recipes.MaxWorkers)); err != nil {
				return err
			}
			replacing, err := recipes.CheckDataOut(c.String("out"), c.Bool("overwrite"), "train.jsonl", "valid.jsonl", "test.jsonl")
			if err != nil {
				return err
			}
			if replacing != "" {
				fmt.Fprintln(os.Stderr, "torchfit:", replacing)
			}
			cfg := def
			cfg.OutDir, cfg.Utterances, cfg.Seed = c.String("out"), c.Int("utterances"), c.Uint64("seed")
			cfg.Workers, cfg.NoiseFraction = c.Int("workers"), c.Float64("noise")
			st, err := speech.Generate(c.Context, cfg)
			if err != nil {
				return recipes.Usagef("%v", err)
			}
			fmt.Printf("corpus in %s: %d synthesised, %d already there, %.1f min of audio in %s (train %d, valid %d, test %d)\n",
				cfg.OutDir, st.Synthesised, st.Skipped, st.Seconds/60, st.Elapsed.Round(time.Millisecond),
				st.Counts[speech.Train], st.Counts[speech.Valid], st.Counts[speech.Test])
			return nil
		},
	}
}

func trainFlags() []cli.Flag {
	return append(recipes.Flags(Defaults),
		&cli.StringFlag{Name: "preset", Aliases: []string{"model_size", "model-size"}, Value: "optimized", Usage: "model size: original, optimized, minimal, tiny"},
		&cli.Int64Flag{Name: "d-model", Usage: "override the preset's d_model (0: the preset's)", DefaultText: "the preset's"},
		&cli.IntFlag{Name: "encoder-layers", Usage: "override the preset's encoder layers (0: the preset's)", DefaultText: "the preset's"},
		&cli.IntFlag{Name: "decoder-layers", Usage: "override the preset's decoder layers (0: the preset's)", DefaultText: "the preset's"},
		&cli.Float64Flag{Name: "dropout", Usage: "override the preset's dropout (0: none, as runs compared with data parallel ones need)", DefaultText: "the preset's, 0.1"},
		&cli.BoolFlag{Name: "spec-augment", Usage: "SpecAugment masks on training features"},
		&cli.IntFlag{Name: "valid-limit", Usage: "validation utterances scored per epoch (0: all)"},
		&cli.IntFlag{Name: "pad-multiple", Value: frameMultiple, Usage: "pad each batch's frames to a multiple of this (1: to the longest utterance only)"},
		&cli.BoolFlag{Name: "plan", Usage: "choose micro-batch, accumulation, precision and checkpointing for --memory-limit (or --vram) from measured dry runs, then train"},
	)
}

// budget is the byte budget a run plans for: --memory-limit (a size, or a
// fraction of the device), else the --vram size.
func budget(cm recipes.Common) (int64, error) {
	if cm.MemoryLimit != "" {
		bytes, frac, err := torch.ParseMemory(cm.MemoryLimit)
		if err != nil {
			return 0, &ConfigError{Field: "memory-limit", Value: cm.MemoryLimit, Err: err}
		}
		if frac == 0 {
			return bytes, nil
		}
		s, err := torch.MemoryStats(cm.Device)
		if err != nil || s.DeviceTotal == 0 {
			return 0, &ConfigError{Field: "memory-limit", Value: cm.MemoryLimit, Reason: "a fraction needs a device with known memory: give a size (6GiB)"}
		}
		return int64(frac * float64(s.DeviceTotal)), nil
	}
	if cm.VRAM != "" {
		var gb int64
		if _, err := fmt.Sscanf(strings.ToLower(cm.VRAM), "%dgb", &gb); err == nil && gb > 0 {
			return gb << 30, nil
		}
		return 0, &ConfigError{Field: "vram", Value: cm.VRAM, Reason: "want 8gb, 12gb, 16gb or 24gb"}
	}
	return 0, recipes.Usagef("planning needs a budget: --memory-limit SIZE or --vram 8gb|12gb|16gb|24gb")
}

// planFor measures the candidates for cfg's preset and effective batch in
// the run's budget, printing each row as it is measured.
func planFor(run *recipes.Run, cfg TrainConfig) (memplan.Result, error) {
	b, err := budget(run.Common)
	if err != nil {
		return memplan.Result{}, err
	}
	preset := cfg.Preset
	if preset == "" {
		return memplan.Result{}, recipes.Usagef("--plan needs --preset (not --resume)")
	}
	if err := checkCorpus(cfg.Data); err != nil {
		return memplan.Result{}, err
	}
	session, err := recipes.Begin(cfg.Common, nil) // the candidates run under the run's memory cap
	if err != nil {
		return memplan.Result{}, err
	}
	defer session.End()
	run.Logf("planning for %s: effective batch %d, preset %s (each candidate is a measured dry run)", torch.FormatBytes(b), cfg.MicroBatch*cfg.Accum, preset)
	return PlanMemory(PlanConfig{Data: cfg.Data, Preset: preset, Device: cfg.Device, Budget: b, EffectiveBatch: cfg.MicroBatch * cfg.Accum,
		Workers: cfg.Workers, Prefetch: cfg.Prefetch, Report: func(r memplan.Row) { run.Logf("  %s", planLine(r, cfg.MicroBatch*cfg.Accum)) }})
}

// planLine is a measured candidate as the plan reports it: what it needs
// and whether that fits, or that it ran out of memory (nothing measured);
// a candidate whose micro-batches do not make the effective batch e is
// marked as changing it (the plan never chooses one).
func planLine(r memplan.Row, e int) string {
	var s string
	switch {
	case r.Err != nil:
		s = fmt.Sprintf("%v: out of memory", r.Candidate)
	case r.Fits:
		s = fmt.Sprintf("%v: need %s, fits", r.Candidate, torch.FormatBytes(r.Need()))
	default:
		s = fmt.Sprintf("%v: need %s, over the budget", r.Candidate, torch.FormatBytes(r.Need()))
	}
	if !r.Exact(e) {
		s += fmt.Sprintf(" (%d × %d = %d changes the effective batch %d: not proposed)", r.MicroBatch, r.Accum, r.MicroBatch*r.Accum, e)
	}
	return s
}

func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "print the memory plan for --memory-limit (or --vram): micro-batch, accumulation, precision, checkpointing, from measured dry runs",
		Flags: trainFlags(),
		Action: func(c *cli.Context) error {
			run, cfg, err := prepareTrain(c)
			if err != nil {
				return err
			}
			defer run.Close()
			res, err := planFor(run, cfg)
			if len(res.Rows) > 0 {
				// What was measured, even when nothing fits: the finding.
				res.Table(os.Stdout)
			}
			if err != nil {
				return err
			}
			p := res.Plan
			fmt.Printf("train with: --micro-batch %d --grad-accum %d --mixed-precision %s%s\n", p.MicroBatch, p.Accum, p.Precision,
				map[bool]string{true: " --grad-checkpointing", false: ""}[p.Checkpointing])
			return nil
		},
	}
}

// prepareTrain sets a training command's run up and reads its
// configuration; the caller closes the run when err is nil.
func prepareTrain(c *cli.Context) (*recipes.Run, TrainConfig, error) {
	run, err := recipes.Prepare(c, spec)
	if err != nil {
		return nil, TrainConfig{}, err
	}
	cfg, err := trainConfigFrom(c, run)
	if err != nil {
		run.Close()
		return nil, TrainConfig{}, err
	}
	return run, cfg, nil
}

// trainConfigFrom builds the training configuration of a run from the
// shared settings and the recipe's own flags (its --vram table applied to
// what the command line left unset).
func trainConfigFrom(c *cli.Context, run *recipes.Run) (TrainConfig, error) {
	cm := run.Common
	preset := c.String("preset")
	if cm.Resume != "" && !c.IsSet("preset") {
		preset = "" // the checkpoint's
	}
	if cm.VRAM != "" {
		p, err := VRAMPreset(cm.VRAM)
		if err != nil {
			return TrainConfig{}, err
		}
		if !c.IsSet("preset") && cm.Resume == "" {
			preset = p.Model
		}
		recipes.ApplyPreset(c, &cm, p)
	}
	cfg := TrainConfig{
		Common: cm, Preset: preset, DModel: c.Int64("d-model"),
		EncoderLayers: c.Int("encoder-layers"), DecoderLayers: c.Int("decoder-layers"),
		SpecAugment: c.Bool("spec-augment"), ValidLimit: c.Int("valid-limit"), PadMultiple: c.Int("pad-multiple"),
		Events: run.Events, Group: run.Group,
	}
	if c.IsSet("dropout") {
		p := c.Float64("dropout")
		cfg.Dropout = &p
	}
	if cm.Resume != "" {
		meta, err := ReadModelMeta(cm.Resume)
		if err != nil {
			return cfg, err
		}
		m := meta.Config
		err = recipes.CheckResumed(c, run.FromFile, cm.Resume, recipes.Stored{Flag: "preset", Value: meta.Preset},
			recipes.Stored{Flag: "d-model", Value: m.DModel}, recipes.Stored{Flag: "encoder-layers", Value: m.EncoderLayers},
			recipes.Stored{Flag: "decoder-layers", Value: m.DecoderLayers}, recipes.Stored{Flag: "dropout", Value: m.Dropout})
		if err != nil {
			return cfg, err
		}
	}
	return cfg, recipes.Reword(cfg.Validate(), run.FromFile)
}

func trainCommand() *cli.Command {
	return &cli.Command{
		Name:  "train",
		Usage: "train (or resume) a conformer",
		Flags: trainFlags(),
		Action: func(c *cli.Context) error {
			run, cfg, err := prepareTrain(c)
			if err != nil {
				return err
			}
			defer run.Close()
			if c.Bool("plan") && run.Group != nil {
				return recipes.Usagef("--plan measures one process: plan without a launcher, then launch with its settings")
			}
			if c.Bool("plan") {
				plan, err := planFor(run, cfg)
				if err != nil {
					return err
				}
				p := plan.Plan
				cfg.MicroBatch, cfg.Accum, cfg.Precision, cfg.GradCheckpointing = p.MicroBatch, p.Accum, string(p.Precision), p.Checkpointing
				run.Logf("plan: %s", plan.Why)
			}
			res, err := Train(run.Ctx, cfg)
			if cerr := run.Close(); err == nil {
				err = cerr
			}
			if errors.Is(err, train.ErrNonFinite) {
				return fmt.Errorf("%w; try a lower --lr or a --clip-norm", err)
			}
			var conflict *train.ConflictError
			if errors.As(err, &conflict) {
				return recipes.Usagef("%v: pass --resume FILE to continue that run, choose another --checkpoint-dir, or pass --overwrite", err)
			}
			if err != nil {
				return err
			}
			if cfg.DryRun {
				res.FoundBatches.Table(os.Stdout)
				return nil
			}
			if run.Rank() != 0 {
				return nil // rank 0 reports
			}
			start := "resumed"
			if !math.IsNaN(res.CERStart) {
				start = fmt.Sprintf("start %.3f", res.CERStart)
			}
			fmt.Printf("trained %s (micro-batch %d × %d); validation CER %.3f (%s), loss %.3f; peak memory %s; checkpoint %s\n",
				recipes.Plural(res.Steps, "step"), res.MicroBatch, res.Accum, res.CER, start, res.ValidLoss, torch.FormatBytes(res.PeakMemory), res.Checkpoint)
			return nil
		},
	}
}

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "CER and WER of a checkpoint on a split",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "the checkpoint (required)"},
			&cli.StringFlag{Name: "data", Value: "data/asr"},
			&cli.StringFlag{Name: "split", Value: "test", Usage: "train, valid or test"},
			&cli.StringFlag{Name: "device", Value: "auto"},
		},
		Action: func(c *cli.Context) error {
			dev, err := recipes.ParseDevice(c.String("device"))
			if err != nil {
				return recipes.Usagef("%v", err)
			}
			if c.String("checkpoint") == "" {
				return recipes.Usagef("--checkpoint is required")
			}
			if _, err := os.Stat(c.String("checkpoint")); err != nil {
				return recipes.Usagef("--checkpoint: %v", err)
			}
			r, err := Evaluate(c.String("checkpoint"), c.String("data"), c.String("split"), dev)
			if err != nil {
				return err
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

func transcribeCommand() *cli.Command {
	return &cli.Command{
		Name:      "transcribe",
		Usage:     "transcribe WAV files (greedy CTC): PCM 8-32 bit or float, any rate and channels; long files in 30 s windows",
		ArgsUsage: "file.wav...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "the checkpoint (required)"},
			&cli.StringFlag{Name: "device", Value: "auto"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return recipes.Usagef("transcribe: give one or more WAV files")
			}
			dev, err := recipes.ParseDevice(c.String("device"))
			if err != nil {
				return recipes.Usagef("%v", err)
			}
			if c.String("checkpoint") == "" {
				return recipes.Usagef("--checkpoint is required")
			}
			if _, err := os.Stat(c.String("checkpoint")); err != nil {
				return recipes.Usagef("--checkpoint: %v", err)
			}
			if err := torch.ResetPeakMemory(dev); err != nil {
				return err
			}
			texts, err := TranscribeFiles(c.String("checkpoint"), c.Args().Slice(), dev)
			var ae *audio.Error
			if errors.As(err, &ae) {
				return recipes.Usage(err)
			}
			if err != nil {
				return err
			}
			for k, t := range texts {
				fmt.Printf("%s\t%s\n", c.Args().Get(k), t)
			}
			// On stderr, so that stdout stays one "file<TAB>text" line per file.
			st, err := torch.MemoryStats(dev)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "transcribed %s; peak memory %s (%s)\n",
				recipes.Plural(len(texts), "file"), torch.FormatBytes(st.PeakAllocated), dev)
			return nil
		},
	}
}

func memoryTableCommand() *cli.Command {
	return &cli.Command{
		Name:  "memory-table",
		Usage: "measure parameters and peak step memory per preset with and without the levers (the guide's Model Size Comparison)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Value: "data/asr"},
			&cli.StringFlag{Name: "device", Value: "auto"},
			&cli.StringSliceFlag{Name: "preset", Value: cli.NewStringSlice("original", "optimized", "minimal", "tiny")},
		},
		Action: func(c *cli.Context) error {
			dev, err := recipes.ParseDevice(c.String("device"))
			if err != nil {
				return recipes.Usagef("%v", err)
			}
			table, err := memoryTable(c.String("data"), dev, c.StringSlice("preset"), report.NewLogger(os.Stderr).Printf)
			if err != nil {
				return err
			}
			fmt.Print(table)
			return nil
		},
	}
}
