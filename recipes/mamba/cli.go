package mamba

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// Recipe is the Mamba recipe on the command line: torchfit mamba
// data|train|eval|generate|estimate.
// spec declares the recipe's train commands: its config-file keys, and
// why it trains in one process.
var spec = recipes.Spec{Name: "mamba", Keys: keys, OneProcess: "its training step does not all-reduce gradients"}

type Recipe struct{}

// Name is the command's name.
func (Recipe) Name() string { return "mamba" }

// Usage says what it trains.
func (Recipe) Usage() string {
	return "Mamba language model (selective scan) on the King James Bible, GPT-2 tokens"
}

// Commands are the recipe's verbs.
func (Recipe) Commands() []*cli.Command {
	return []*cli.Command{dataCommand(), trainCommand(), evalCommand(), generateCommand(), estimateCommand()}
}

func dataCommand() *cli.Command {
	return &cli.Command{
		Name:  "data",
		Usage: "tokenise the King James Bible (Debian bible-kjv) or UTF-8 text files once into memory-mapped token files",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "data/kjv", Usage: "data directory"},
			&cli.StringSliceFlag{Name: "text", Usage: "UTF-8 text files to use instead of the Bible (comma-separated or repeated)"},
			&cli.Float64Flag{Name: "valid-fraction", Value: 0.05, Usage: "held-out share, from the text's end"},
			&cli.BoolFlag{Name: "overwrite", Usage: "rebuild a corpus already in --out"},
			&cli.IntFlag{Name: "workers", Usage: "tokeniser goroutines (0: all CPUs)"},
		},
		Action: func(c *cli.Context) error {
			var files []string
			for _, f := range c.StringSlice("text") {
				for _, p := range strings.Split(f, ",") {
					if p = strings.TrimSpace(p); p != "" {
						files = append(files, p)
					}
				}
			}
			st, err := BuildData(c.Context, DataConfig{Out: c.String("out"), Text: files, ValidFraction: c.Float64("valid-fraction"),
				Overwrite: c.Bool("overwrite"), Workers: c.Int("workers")})
			if err != nil {
				return err
			}
			m := st.Meta
			fmt.Printf("corpus in %s: %s training tokens (%s characters), %s held out (%s characters), %s; unigram baseline %.3f nats/token; %s\n",
				c.String("out"), recipes.Commas(m.TrainTokens), recipes.Commas(m.TrainChars), recipes.Commas(m.ValidTokens), recipes.Commas(m.ValidChars),
				m.Tokenizer, m.Unigram, st.Elapsed.Round(time.Millisecond))
			return nil
		},
	}
}

// keys maps the seed's config-file keys to flags where the key's last part
// alone would be ambiguous or differently named.
var keys = map[string]string{
	"model.max_seq_len":               "model-max-seq-len",
	"vram.max_seq_len":                "max-seq-len",
	"vram.use_fp16":                   "use-fp16",
	"vram.use_cpu_offload":            "cpu-offload",
	"vram.use_gradient_checkpointing": "grad-checkpointing",
	"training.save_interval":          "checkpoint-every",
	"training.max_grad_norm":          "clip-norm",
	"training.learning_rate":          "lr",
	"training.warmup_steps":           "warmup",
}

func trainFlags() []cli.Flag {
	return append(recipes.Flags(Defaults),
		&cli.StringFlag{Name: "model-size", Aliases: []string{"model_size"}, Usage: "tiny, small, medium or large (default: --vram's, else small)"},
		&cli.StringFlag{Name: "training-preset", Aliases: []string{"training_preset"}, Value: "default", Usage: "default (the seed's training section), fast (a few steps: does it fit?) or cpu (--vram cpu's: 330 steps at 6e-3)"},
		&cli.Int64Flag{Name: "d-model", Usage: "model width (the model section's d_model)", DefaultText: "--model-size's"},
		&cli.IntFlag{Name: "n-layers", Usage: "Mamba blocks", DefaultText: "--model-size's"},
		&cli.Int64Flag{Name: "d-state", Usage: "the scan's state size", DefaultText: "--model-size's"},
		&cli.Int64Flag{Name: "expand-factor", Usage: "mixer width / d_model (0: 2, mamba-ssm's default)", DefaultText: "--model-size's"},
		&cli.Float64Flag{Name: "dropout", Usage: "dropout on each mixer's output", DefaultText: "--model-size's"},
		&cli.IntFlag{Name: "model-max-seq-len", Usage: "the longest sequence the model is meant for (the model section's max_seq_len; 0: no limit)", DefaultText: "--model-size's"},
		&cli.Int64Flag{Name: "vocab-size", Value: VocabSize, Usage: "must be the tokenizer's, 50257"},
		&cli.IntFlag{Name: "max-seq-len", Usage: "training sequence length (the vram section's max_seq_len)", DefaultText: "--vram's, else 256"},
		&cli.BoolFlag{Name: "use-fp16", Usage: "mixed precision: fp16 on CUDA; on a CPU bf16 where it computes it natively, else float32 (says which)"},
		&cli.BoolFlag{Name: "cpu-offload", Aliases: []string{"use_cpu_offload"}, Usage: "keep AdamW's state on the CPU (the seed's last resort)"},
		&cli.Float64Flag{Name: "weight-decay", Usage: "AdamW weight decay (not on norms, biases, A_log, D, embeddings)"},
		&cli.IntFlag{Name: "eval-interval", Usage: "steps between held-out evaluations (0: at the end only)"},
		&cli.IntFlag{Name: "logging-steps", Usage: "steps between the seed's log lines (0: torchfit's step lines instead)"},
		&cli.Float64Flag{Name: "adam-beta1"},
		&cli.Float64Flag{Name: "adam-beta2"},
		&cli.Float64Flag{Name: "adam-epsilon"},
		&cli.Float64Flag{Name: "label-smoothing"},
		&cli.StringFlag{Name: "scan", Value: "fused", Usage: "selective scan: " + strings.Join(scan.Names, ", ")},
		&cli.IntFlag{Name: "scan-chunk", Value: scan.DefaultChunk, Usage: fmt.Sprintf("time steps per chunk of the scan (0: %d)", scan.DefaultChunk)},
		&cli.IntFlag{Name: "eval-tokens", Value: 32768, Usage: "held-out tokens scored per evaluation (0: all)"},
	)
}

// trainConfigFrom resolves a train (or estimate) command's settings: the
// defaults, then --model_size, --vram and --training_preset, then the
// --config file and the command line (which override the presets).
func trainConfigFrom(c *cli.Context, run *recipes.Run) (TrainConfig, error) {
	cm := run.Common
	vramName := cm.VRAM
	if vramName == "" && cm.Config == "" {
		vramName = "8gb" // the guide's most conservative settings
	}
	var vram VRAM
	if vramName != "" {
		p, err := VRAMPreset(vramName)
		if err != nil {
			return TrainConfig{}, err
		}
		vram = VRAMPresets[p.Name]
		recipes.ApplyPreset(c, &cm, recipes.Preset{MicroBatch: p.MicroBatch, Accum: p.Accum, Checkpointing: p.Checkpointing})
	}
	size := c.String("model-size")
	if size == "" {
		size = vram.Model
	}
	if size == "" {
		size = "small"
	}
	mcfg, err := ModelSize(size)
	if err != nil {
		return TrainConfig{}, &recipes.ConfigError{Field: "model-size", Value: size, Err: err}
	}
	tpName := c.String("training-preset")
	if !c.IsSet("training-preset") && vram.Training != "" {
		tpName = vram.Training
	}
	tp, err := TrainingPreset(tpName)
	if err != nil {
		return TrainConfig{}, &recipes.ConfigError{Field: "training-preset", Value: c.String("training-preset"), Err: err}
	}
	sizeName, seq := modelFlags(c, &mcfg, size, vram)
	precision := cm.Precision
	fp16 := vram.Mixed
	if c.IsSet("use-fp16") {
		fp16 = c.Bool("use-fp16")
	}
	if fp16 && !c.IsSet("mixed-precision") && !c.IsSet("mixed_precision") {
		precision = "auto"
	}
	offload := vram.CPUOffload
	if c.IsSet("cpu-offload") {
		offload = c.Bool("cpu-offload")
	}
	if offload && !cm.Device.IsCUDA() {
		// The state is on the CPU already: offloading it would only add
		// host copies (a higher peak), so it is not done.
		const why = "moves AdamW's state off the GPU, and this run's device is the CPU"
		if err := run.NotHere(c, "cpu-offload", true, why); err != nil {
			return TrainConfig{}, err
		}
		if !c.IsSet("cpu-offload") {
			run.Logf("--vram %s's use_cpu_offload %s: not used", cm.VRAM, why)
		}
		offload = false
	}
	trainingFlags(c, run, cm, &tp)
	cm.Precision = precision
	cm.LR, cm.MaxSteps, cm.Warmup, cm.CheckpointEvery, cm.ClipNorm = tp.LR, tp.MaxSteps, tp.WarmupSteps, tp.SaveInterval, tp.MaxGradNorm
	cfg := TrainConfig{
		Common: cm, Model: mcfg, ModelSize: sizeName, SeqLen: seq, CPUOffload: offload, Optim: tp.Optim,
		Scan: c.String("scan"), ScanChunk: c.Int("scan-chunk"), EvalTokens: c.Int("eval-tokens"), Events: run.Events,
	}
	if err := cfg.Validate(); err != nil {
		return cfg, recipes.Reword(err, run.FromFile)
	}
	if cm.Resume != "" {
		if err := checkResumed(c, run, cm.Resume); err != nil {
			return cfg, err
		}
	}
	if vramName != "" {
		cfg.Settings = fmt.Sprintf("--vram %s: micro-batch %d × accumulation %d, sequences of %d, use_fp16 %v, checkpointing %v",
			vram.Name, cfg.MicroBatch, cfg.Accum, cfg.SeqLen, fp16, cfg.GradCheckpointing)
	}
	return cfg, nil
}

// modelFlags applies the model section's flags to mcfg (a changed size
// has no name) and returns the model's name and the sequence length.
func modelFlags(c *cli.Context, mcfg *ModelConfig, size string, vram VRAM) (sizeName string, seq int) {
	sizeName = size
	for _, f := range []struct {
		name  string
		apply func()
	}{
		{"d-model", func() { mcfg.DModel, sizeName = c.Int64("d-model"), "" }},
		{"n-layers", func() { mcfg.NLayers, sizeName = c.Int("n-layers"), "" }},
		{"d-state", func() { mcfg.DState, sizeName = c.Int64("d-state"), "" }},
		{"expand-factor", func() { mcfg.Expand, sizeName = c.Int64("expand-factor"), "" }},
		{"dropout", func() { mcfg.Dropout = c.Float64("dropout") }},
		{"model-max-seq-len", func() { mcfg.MaxSeqLen = c.Int("model-max-seq-len") }},
	} {
		if c.IsSet(f.name) {
			f.apply()
		}
	}
	mcfg.VocabSize = c.Int64("vocab-size")
	seq = cmp.Or(vram.SeqLen, 256)
	if c.IsSet("max-seq-len") {
		seq = c.Int("max-seq-len")
	}
	return sizeName, seq
}

// trainingFlags applies the training section's flags to the training
// preset tp. --training_preset fast is the guide's "test your
// configuration": its schedule (steps, warmup, evaluation, saving,
// logging) wins over a config file's training section; the command line
// still wins.
func trainingFlags(c *cli.Context, run *recipes.Run, cm recipes.Common, tp *Training) {
	short := tp.MaxSteps > 0 && tp.MaxSteps < TrainingPresets["default"].MaxSteps
	schedule := func(name string) bool {
		_, fromFile := run.FromFile[name]
		return c.IsSet(name) && !(fromFile && short)
	}
	for _, f := range []struct {
		name     string
		schedule bool
		apply    func()
	}{
		{"lr", false, func() { tp.LR = cm.LR }},
		{"weight-decay", false, func() { tp.WeightDecay = c.Float64("weight-decay") }},
		{"max-steps", true, func() { tp.MaxSteps = cm.MaxSteps }},
		{"warmup", true, func() { tp.WarmupSteps = cm.Warmup }},
		{"eval-interval", true, func() { tp.EvalInterval = c.Int("eval-interval") }},
		{"checkpoint-every", true, func() { tp.SaveInterval = cm.CheckpointEvery }},
		{"logging-steps", true, func() { tp.LoggingSteps = c.Int("logging-steps") }},
		{"adam-beta1", false, func() { tp.Beta1 = c.Float64("adam-beta1") }},
		{"adam-beta2", false, func() { tp.Beta2 = c.Float64("adam-beta2") }},
		{"adam-epsilon", false, func() { tp.Eps = c.Float64("adam-epsilon") }},
		{"clip-norm", false, func() { tp.MaxGradNorm = cm.ClipNorm }},
		{"label-smoothing", false, func() { tp.LabelSmoothing = c.Float64("label-smoothing") }},
	} {
		if (f.schedule && schedule(f.name)) || (!f.schedule && c.IsSet(f.name)) {
			f.apply()
		}
	}
}

func trainCommand() *cli.Command {
	return &cli.Command{
		Name:  "train",
		Usage: "train (or resume) a Mamba language model",
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
			if cfg.Optim.LoggingSteps > 0 {
				run.LogSteps(0) // the seed's logging_steps lines say it all, memory included
			}
			if run.DryRun {
				rows, err := Estimate(EstimateConfig{Presets: []EstimatePreset{presetOf("this run", cfg)}, Measure: true, Device: cfg.Device, Scan: cfg.Scan, ScanChunk: cfg.ScanChunk})
				if err != nil {
					return err
				}
				printEstimate(os.Stdout, rows, true)
				return nil
			}
			res, err := Train(run.Ctx, cfg)
			if cerr := run.Close(); err == nil {
				err = cerr
			}
			if errors.Is(err, train.ErrNonFinite) {
				return fmt.Errorf("%w; try a lower --learning_rate or --max_grad_norm", err)
			}
			var conflict *train.ConflictError
			if errors.As(err, &conflict) {
				return recipes.Usagef("%v: pass --resume FILE to continue that run, choose another --checkpoint-dir, or pass --overwrite", err)
			}
			if err != nil {
				return err
			}
			start := "resumed"
			if res.Start.Loss > 0 {
				start = fmt.Sprintf("start %.3f", res.Start.Loss)
			}
			fmt.Printf("trained %s (micro-batch %d × %d, %s); held-out loss %.4f nats/token (%s), %.3f bits/char, unigram %.3f; %.0f tokens/s; %.2f CPU minutes; peak memory %s; checkpoint %s\n",
				recipes.Plural(res.Steps, "step"), res.MicroBatch, res.Accum, res.Precision.Precision, res.Eval.Loss, start, res.Eval.BitsPerChar, res.Eval.Unigram,
				res.TokensPerS, res.CPUTime.Minutes(), torch.FormatBytes(res.PeakMemory), res.Checkpoint)
			return nil
		},
	}
}

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "held-out loss (nats/token), bits per character and perplexity of a checkpoint",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "the checkpoint (required)"},
			&cli.StringFlag{Name: "data", Aliases: []string{"data_dir"}, Value: Defaults.Data},
			&cli.IntFlag{Name: "max-tokens", Usage: "score at most this many held-out tokens (0: all)"},
			&cli.IntFlag{Name: "max-seq-len", Usage: "sequence length (0: the checkpoint's)"},
			&cli.IntFlag{Name: "batch-size", Value: 8},
			&cli.StringFlag{Name: "scan", Usage: "selective scan (default: the checkpoint's)"},
			&cli.StringFlag{Name: "mixed-precision", Value: "no", Usage: "no, auto or bf16"},
			&cli.StringFlag{Name: "device", Value: "auto"},
		},
		Action: func(c *cli.Context) error {
			dev, p, err := deviceAndPrecision(c)
			if err != nil {
				return err
			}
			if c.String("checkpoint") == "" {
				return recipes.Usagef("--checkpoint is required")
			}
			if err := recipes.CheckRanges(recipes.Between("batch-size", int64(c.Int("batch-size")), 1, recipes.MaxBatch),
				recipes.Between("max-tokens", int64(c.Int("max-tokens")), 0, math.MaxInt64),
				recipes.Between("max-seq-len", int64(c.Int("max-seq-len")), 0, 1<<20)); err != nil {
				return err
			}
			r, err := Evaluate(EvalConfig{Checkpoint: c.String("checkpoint"), Data: c.String("data"), SeqLen: c.Int("max-seq-len"),
				Batch: c.Int("batch-size"), MaxTokens: c.Int("max-tokens"), Scan: c.String("scan"), Device: dev, Precision: p})
			if err != nil {
				return err
			}
			fmt.Printf("held-out (%s tokens): %.4f nats/token, %.3f bits/char, perplexity %.1f; unigram baseline %.3f nats/token\n",
				recipes.Commas(r.Tokens), r.Loss, r.BitsPerChar, r.Perplexity, r.Unigram)
			return nil
		},
	}
}

func deviceAndPrecision(c *cli.Context) (torch.Device, amp.Precision, error) {
	dev, err := recipes.ParseDevice(c.String("device"))
	if err != nil {
		return dev, "", recipes.Usagef("--device: %v", err)
	}
	p := amp.FP32
	if c.IsSet("mixed-precision") {
		ch, err := amp.ParsePrecision(c.String("mixed-precision"), dev)
		if err != nil {
			return dev, "", recipes.Usagef("--mixed-precision: %v", err)
		}
		p = ch.Precision
	}
	return dev, p, nil
}

func generateCommand() *cli.Command {
	return &cli.Command{
		Name:  "generate",
		Usage: "continue a prompt, one token at a time from each layer's recurrent state",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "the checkpoint (required)"},
			&cli.StringFlag{Name: "prompt", Usage: "text to continue"},
			&cli.IntFlag{Name: "max-new-tokens", Value: 100, Usage: fmt.Sprintf("tokens to generate after the prompt (0 to %d)", MaxNewTokens)},
			&cli.Float64Flag{Name: "temperature", Value: 0.8, Usage: "0: greedy"},
			&cli.IntFlag{Name: "top-k", Value: 40, Usage: "sample among the k most likely tokens (0: all)"},
			&cli.Uint64Flag{Name: "seed", Value: 1},
			&cli.StringFlag{Name: "device", Value: "auto"},
		},
		Action: func(c *cli.Context) error {
			dev, _, err := deviceAndPrecision(c)
			if err != nil {
				return err
			}
			if c.String("checkpoint") == "" {
				return recipes.Usagef("--checkpoint is required")
			}
			if _, err := os.Stat(c.String("checkpoint")); err != nil {
				return recipes.Usagef("--checkpoint: %v", err)
			}
			// The prompt is printed with the first new token: a checkpoint
			// that does not load prints nothing but its error.
			printed := false
			stream := func(s string) {
				if !printed {
					fmt.Print(c.String("prompt"))
					printed = true
				}
				fmt.Print(s)
			}
			res, err := Generate(GenerateConfig{Checkpoint: c.String("checkpoint"), Prompt: c.String("prompt"),
				MaxNewTokens: c.Int("max-new-tokens"), Temperature: c.Float64("temperature"), TopK: c.Int("top-k"),
				Seed: c.Uint64("seed"), Device: dev, Stream: stream})
			if printed {
				fmt.Println()
			}
			if err != nil {
				return err
			}
			if !printed {
				fmt.Println(c.String("prompt"))
			}
			fmt.Fprintf(os.Stderr, "%d prompt tokens in %v; %d new tokens, %.2f ms/token (first half %.2f, second half %.2f: the recurrent state, O(1) per token)\n",
				res.PromptTokens, res.Prefill.Round(time.Millisecond), res.NewTokens, ms(res.PerToken), ms(res.FirstHalf), ms(res.SecondHalf))
			return nil
		},
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func estimateCommand() *cli.Command {
	return &cli.Command{
		Name: "estimate",
		Usage: "memory of a training step (weights, gradients, optimizer state, activations): the formula per preset, " +
			"and with --dry-run what the counting allocator measures on a dry step",
		Flags: append(trainFlags(), &cli.BoolFlag{Name: "all", Usage: "every row of the guide's table (the default without --config, --vram or --model_size)"}),
		Action: func(c *cli.Context) error {
			run, err := recipes.Prepare(c, spec)
			if err != nil {
				return err
			}
			defer run.Close()
			var presets []EstimatePreset
			if c.Bool("all") || (run.Config == "" && run.VRAM == "" && !c.IsSet("model-size")) {
				presets = guidePresets()
			} else {
				cfg, err := trainConfigFrom(c, run)
				if err != nil {
					return err
				}
				name := "this configuration"
				switch {
				case run.Config != "":
					name = run.Config
				case run.VRAM != "":
					name = "--vram " + run.VRAM
				}
				if cfg.Settings != "" {
					run.Logf("%s", cfg.Settings)
				}
				presets = []EstimatePreset{presetOf(name, cfg)}
			}
			session, err := recipes.Begin(run.Common, nil) // --dry-run measures under the run's memory cap
			if err != nil {
				return err
			}
			defer session.End()
			rows, err := Estimate(EstimateConfig{Presets: presets, Measure: run.DryRun, Device: run.Device,
				Scan: c.String("scan"), ScanChunk: c.Int("scan-chunk")})
			if err != nil {
				return err
			}
			printEstimate(os.Stdout, rows, run.DryRun)
			return nil
		},
	}
}

// checkResumed refuses model settings of a resumed command that the
// checkpoint's model contradicts (the model comes from the checkpoint).
func checkResumed(c *cli.Context, run *recipes.Run, path string) error {
	f, err := ckpt.ReadParts(path, "meta") // no tensor: the resume reads the file again
	if err != nil {
		return checkpointError(path, err)
	}
	mm, err := ReadModelMeta(f)
	f.Free()
	if err != nil {
		return err
	}
	m := mm.Model
	return recipes.CheckResumed(c, run.FromFile, path, recipes.Stored{Flag: "model-size", Value: sizeOf(m)},
		recipes.Stored{Flag: "d-model", Value: m.DModel}, recipes.Stored{Flag: "n-layers", Value: m.NLayers},
		recipes.Stored{Flag: "d-state", Value: m.DState}, recipes.Stored{Flag: "expand-factor", Value: m.Expand},
		recipes.Stored{Flag: "dropout", Value: m.Dropout}, recipes.Stored{Flag: "model-max-seq-len", Value: m.MaxSeqLen},
		recipes.Stored{Flag: "vocab-size", Value: m.VocabSize})
}

// sizeOf names the --model_size of m's shape, or describes the shape.
func sizeOf(m ModelConfig) string {
	if name := sizeNamed(m); name != "" {
		return name
	}
	return fmt.Sprintf("no size's shape: d_model %d, %d layers, d_state %d, expand %d", m.DModel, m.NLayers, m.DState, m.Expand)
}
