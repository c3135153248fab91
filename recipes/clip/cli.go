package clip

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// Recipe is the CLIP recipe on the command line: torchfit clip
// data|pretrain|train|eval|measure.
// spec declares the recipe's train commands: its config-file keys, and
// why it trains in one process.
var spec = recipes.Spec{Name: "clip", OneProcess: "its exact contrastive loss would need every rank's embeddings, which it does not gather"}

type Recipe struct{}

// Name is the command's name.
func (Recipe) Name() string { return "clip" }

// Usage says what it trains.
func (Recipe) Usage() string {
	return "car CLIP fine-tuning at effective batch 128 with the exact contrastive gradient (grad cache)"
}

// Commands are the recipe's verbs.
func (Recipe) Commands() []*cli.Command {
	return []*cli.Command{dataCommand(), trainCommand("pretrain"), trainCommand("train"), evalCommand(), measureCommand()}
}

func dataCommand() *cli.Command {
	return &cli.Command{
		Name:  "data",
		Usage: "draw a data set: cars with captions (or shapes, for pretraining) as PNG files and a JSONL manifest",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "data/clip-cars", Usage: "data directory"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace a data set already in --out (its hand-edited captions or transcripts too)"},
			&cli.StringFlag{Name: "kind", Value: "cars", Usage: "cars, or shapes (the pretraining set)"},
			&cli.IntFlag{Name: "images", Value: 8000, Usage: "images over all splits (1 in 20 validation, 2 in 20 held-out test)"},
			&cli.IntFlag{Name: "size", Value: 64, Usage: "pixels per side (the cpu preset's 64; vit-b32 resizes to 224)"},
			&cli.Uint64Flag{Name: "seed", Value: 1},
			&cli.IntFlag{Name: "workers", Value: 4, Usage: "drawing goroutines (0: 4)"},
		},
		Action: func(c *cli.Context) error {
			replacing, err := recipes.CheckDataOut(c.String("out"), c.Bool("overwrite"), "manifest.jsonl", "meta.json")
			if err != nil {
				return err
			}
			if replacing != "" {
				fmt.Fprintln(os.Stderr, "torchfit:", replacing)
			}
			cfg := GenerateConfig{Out: c.String("out"), Kind: c.String("kind"), Images: c.Int("images"), Size: c.Int("size"),
				Seed: c.Uint64("seed"), Workers: c.Int("workers")}
			st, err := Generate(c.Context, cfg)
			if err != nil {
				return err
			}
			fmt.Printf("%s set in %s: %d images drawn, %d already there, in %s (train %d, valid %d, test %d)\n",
				cfg.Kind, cfg.Out, st.Written, st.Skipped, st.Elapsed.Round(time.Millisecond),
				st.Counts[SplitTrain], st.Counts[SplitValid], st.Counts[SplitTest])
			return nil
		},
	}
}

func trainFlags(d recipes.Defaults, mirror bool) []cli.Flag {
	return append(recipes.Flags(d),
		&cli.BoolFlag{Name: "mirror-pairs", Value: mirror, Usage: "make every second training image the one before it mirrored, its caption's left and right swapped (cars: direction's negatives in every micro-batch; off by default: it lowered zero-shot and R@1 in 5 CPU minutes, recipes/clip/README.md)"},
		&cli.StringFlag{Name: "preset", Aliases: []string{"model_size", "model-size"}, Usage: "model: cpu (1.7M parameters, the default) or vit-b32 (OpenAI ViT-B/32 shapes); with --init or --resume: the file's"},
		&cli.StringFlag{Name: "init", Aliases: []string{"pretrained", "init_from"}, Usage: "start from this state dict (Python torch.save(model.state_dict()) or a .safetensors file, with OpenAI CLIP names) or torchfit CLIP checkpoint"},
		&cli.StringFlag{Name: "contrastive-accumulation", Value: Exact, Usage: "exact: the effective batch's contrastive loss by grad cache; naive: each micro-batch's own loss, accumulated (the seed's)"},
		&cli.Float64Flag{Name: "weight-decay", Value: 0.1, Usage: "AdamW weight decay (not on gains, biases, logit_scale)"},
		&cli.IntFlag{Name: "eval-every", Usage: "validate every N steps besides each epoch's end (0: epoch ends only)"},
		&cli.IntFlag{Name: "valid-limit", Usage: "validation images (0: all)"},
		&cli.DurationFlag{Name: "cpu-budget", Usage: "stop (with a checkpoint) after this much process CPU time in training steps, e.g. 5m"},
	)
}

// trainConfigFrom builds a run's configuration from the shared settings
// and the recipe's flags (its --vram table applied to what the command
// line left unset).
func trainConfigFrom(c *cli.Context, run *recipes.Run, stage string) (TrainConfig, error) {
	cm := run.Common
	preset := c.String("preset")
	if cm.VRAM != "" {
		p, err := VRAMPreset(cm.VRAM)
		if err != nil {
			return TrainConfig{}, err
		}
		if preset == "" && c.String("init") == "" && cm.Resume == "" {
			preset = p.Model
		}
		recipes.ApplyPreset(c, &cm, p)
	}
	cfg := TrainConfig{Common: cm, Stage: stage, Preset: preset, Init: c.String("init"),
		Mode: strings.ToLower(c.String("contrastive-accumulation")), WeightDecay: c.Float64("weight-decay"),
		EvalEvery: c.Int("eval-every"), ValidLimit: c.Int("valid-limit"), CPUBudget: c.Duration("cpu-budget"), Events: run.Events,
		MirrorPairs: c.Bool("mirror-pairs")}
	if cm.AutoBatch || cm.DryRun {
		field := "auto-batch" // the flag the user gave (--dry-run implies --auto-batch)
		if cm.DryRun {
			field = "dry-run"
		}
		return cfg, recipes.Reword(&recipes.ConfigError{Field: field, Value: true, Reason: "not offered by the clip recipe: pick the micro-batch with --vram or --micro-batch (the effective batch's loss is exact at any micro-batch)"}, run.FromFile)
	}
	return cfg, recipes.Reword(cfg.Validate(), run.FromFile)
}

func trainCommand(stage string) *cli.Command {
	d, usage, mirror := Defaults, "fine-tune (or train, or resume) a CLIP on a data directory at an effective batch of 128", false
	if stage == "pretrain" {
		d, usage, mirror = pretrainDefaults, "pretrain a CLIP from random weights on the shapes set (for `clip train --init`)", false
	}
	return &cli.Command{
		Name:  stage,
		Usage: usage,
		Flags: trainFlags(d, mirror),
		Action: func(c *cli.Context) error {
			run, err := recipes.Prepare(c, spec)
			if err != nil {
				return err
			}
			defer run.Close()
			cfg, err := trainConfigFrom(c, run, stage)
			if err != nil {
				return err
			}
			res, err := Train(run.Ctx, cfg)
			if cerr := run.Close(); err == nil {
				err = cerr
			}
			if errors.Is(err, train.ErrNonFinite) {
				return fmt.Errorf("%w; try a lower --lr", err)
			}
			var conflict *train.ConflictError
			if errors.As(err, &conflict) {
				return recipes.Usagef("%v: pass --resume FILE to continue that run, choose another --checkpoint-dir, or pass --overwrite", err)
			}
			if err != nil {
				return err
			}
			how := "done"
			switch {
			case res.Budget:
				how = "CPU budget spent"
			case res.Interrupted:
				how = "interrupted"
			}
			start := "" // a resumed run scores no start
			if cfg.Resume == "" {
				start = fmt.Sprintf(" (start %.3f)", res.Start.ZeroShot)
			}
			fmt.Printf("%s: %s (micro-batch %d × %d, %s) in %.1f CPU minutes (%s); validation zero-shot accuracy %.3f%s, text→image R@1 %.3f, loss %.3f; peak memory %s; checkpoint %s\n",
				stage, recipes.Plural(res.Steps, "step"), res.MicroBatch, res.Accum, cfg.Mode, res.CPUTime.Minutes(), how,
				res.Final.ZeroShot, start, res.Final.R1, res.Final.Loss, torch.FormatBytes(res.PeakMemory), res.Checkpoint)
			return nil
		},
	}
}

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "zero-shot accuracy and text→image R@1 of a checkpoint (or CLIP state dict) on held-out images and caption templates",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "torchfit CLIP checkpoint or CLIP state dict (required)"},
			&cli.StringFlag{Name: "data", Value: "data/clip-cars"},
			&cli.StringFlag{Name: "split", Value: "test", Usage: "train, valid or test"},
			&cli.StringFlag{Name: "device", Value: "auto"},
			&cli.StringFlag{Name: "mixed-precision", Value: "no", Usage: "no, auto, bf16 or fp16"},
			&cli.IntFlag{Name: "batch-size", Value: 64, Usage: "images per forward"},
		},
		Action: func(c *cli.Context) error {
			dev, err := recipes.ParseDevice(c.String("device"))
			if err != nil {
				return recipes.Usagef("--device: %v", err)
			}
			if c.String("checkpoint") == "" {
				return recipes.Usagef("--checkpoint is required")
			}
			r, err := Evaluate(c.String("checkpoint"), c.String("data"), c.String("split"), dev, c.String("mixed-precision"), c.Int("batch-size"))
			if err != nil {
				return err
			}
			fmt.Printf("%s split (%d images, %d classes, held-out templates), %s model: zero-shot accuracy %.3f (%s), text→image R@1 %.3f, loss %.3f\n",
				r.Split, r.N, r.Classes, r.Preset, r.ZeroShot, attrLine(r.Attr), r.R1, r.Loss)
			return nil
		},
	}
}

func attrLine(a map[string]float64) string {
	var parts []string
	for _, k := range []string{"color", "type", "direction", "shape", "phrase"} {
		if v, ok := a[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.3f", k, v))
		}
	}
	return strings.Join(parts, ", ")
}
