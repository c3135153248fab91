package ganvit

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// Recipe is the GAN + ViT recipe on the command line: torchfit ganvit
// data|train|eval|test-memory|memory-table.
// spec declares the recipe's train commands: its config-file keys, and
// why it trains in one process.
var spec = recipes.Spec{Name: "ganvit", Keys: configKeys, OneProcess: "its GAN and ViT steps do not all-reduce gradients"}

type Recipe struct{}

// Name is the command's name.
func (Recipe) Name() string { return "ganvit" }

// Usage says what it trains.
func (Recipe) Usage() string {
	return "music genres: a conditional GAN makes spectrograms, a ViT classifies real + synthetic ones (data on the CPU, one batch on the device)"
}

// Commands are the recipe's verbs.
func (Recipe) Commands() []*cli.Command {
	return []*cli.Command{dataCommand(), trainCommand(), evalCommand(), testMemoryCommand(), memoryTableCommand()}
}

func dataCommand() *cli.Command {
	return &cli.Command{
		Name:  "data",
		Usage: "synthesise music-like clips in four genres with sox (22.05 kHz WAV and a manifest)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: "data/ganvit", Usage: "data directory"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace a data set already in --out (its hand-edited captions or transcripts too)"},
			&cli.IntFlag{Name: "clips", Value: 400, Usage: "clips over all splits, balanced over the genres (of every 40: 32 train, 4 valid, 4 test)"},
			&cli.Float64Flag{Name: "seconds", Value: 3, Usage: "clip length: 3 for the cpu preset's 130 frames, 30 for the GPU presets' 1292"},
			&cli.Uint64Flag{Name: "seed", Value: 1},
			&cli.IntFlag{Name: "workers", Usage: "parallel sox processes (0: all CPUs)"},
		},
		Action: func(c *cli.Context) error {
			if err := recipes.CheckRanges(recipes.Between("workers", int64(c.Int("workers")), 0, recipes.MaxWorkers)); err != nil {
				return err
			}
			replacing, err := recipes.CheckDataOut(c.String("out"), c.Bool("overwrite"), manifestName)
			if err != nil {
				return err
			}
			if replacing != "" {
				fmt.Fprintln(os.Stderr, "torchfit:", replacing)
			}
			cfg := GenerateConfig{OutDir: c.String("out"), Clips: c.Int("clips"), Seconds: c.Float64("seconds"), Seed: c.Uint64("seed"), Workers: c.Int("workers")}
			st, err := Generate(c.Context, cfg)
			if err != nil {
				return recipes.Usage(err)
			}
			fmt.Printf("%d clips of %.1f s in %s (%d synthesised, %d already there) in %s: train %d, valid %d, test %d; genres %s\n",
				cfg.Clips, cfg.Seconds, cfg.OutDir, st.Synthesised, st.Skipped, st.Elapsed.Round(time.Millisecond),
				st.Counts[SplitTrain], st.Counts[SplitValid], st.Counts[SplitTest], strings.Join(Genres, ", "))
			return nil
		},
	}
}

// configKeys maps the seed's Python names, as config-file keys, to flags.
var configKeys = map[string]string{
	"GAN_BATCH_SIZE": "gan-batch-size", "BATCH_SIZE": "micro-batch", "NUM_SYNTHETIC": "num-synthetic", "N_MELS": "n-mels",
	"LATENT_DIM": "latent-dim", "VIT_MODEL_NAME": "vit", "unfreezing_schedule": "unfreeze", "ACCUMULATION_STEPS": "grad-accum",
	"DEVICE": "device",
}

// modelFlags choose the sizes (shared by train and test-memory).
func modelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "preset", Value: "auto", Usage: "sizes: cpu, gpu (the seed's defaults), or a --vram row (8gb, 12gb, 16gb, 24gb); auto: gpu on CUDA, cpu otherwise"},
		&cli.IntFlag{Name: "gan-batch-size", Usage: "GAN_BATCH_SIZE: the GAN's micro-batch (0: the preset's; the seed's 24)"},
		&cli.IntFlag{Name: "gan-grad-accum", Value: 1, Usage: "the GAN's accumulation steps (effective batch = gan-batch-size × gan-grad-accum)"},
		&cli.IntFlag{Name: "d-grad-accum", Usage: "the discriminator's own accumulation steps over the GAN's effective batch (0: gan-grad-accum)"},
		&cli.IntFlag{Name: "g-grad-accum", Usage: "the generator's own accumulation steps (0: gan-grad-accum)"},
		&cli.IntFlag{Name: "num-synthetic", Value: -1, Usage: "NUM_SYNTHETIC: generated spectrograms added to the classifier's training set (-1: the preset's)"},
		&cli.Int64Flag{Name: "n-mels", Usage: "N_MELS (0: the preset's; 128 on GPUs, 96 with --vram 8gb)"},
		&cli.Int64Flag{Name: "frames", Usage: "spectrogram frames (0: the preset's; 1292 = 30 s on GPUs)"},
		&cli.Int64Flag{Name: "latent-dim", Usage: "LATENT_DIM (0: the preset's, 100)"},
		&cli.StringFlag{Name: "vit", Usage: "the classifier: b16 (vit_b_16), s16, ti16, cpu, tiny, or the seed's google/vit-base-patch16-224 (empty: the preset's)"},
		&cli.StringFlag{Name: "unfreeze", Usage: "progressive unfreezing {epoch: [layer indices]}, e.g. '{8: [11]}': the backbone starts frozen"},
	}
}

func trainFlags() []cli.Flag {
	fs := append(recipes.Flags(Defaults), modelFlags()...)
	return append(fs,
		&cli.StringFlag{Name: "stage", Value: StageAll, Usage: "all (GAN, then the classifier), gan, or classifier"},
		&cli.StringFlag{Name: "gan", Usage: "with --stage classifier: the checkpoint whose generator makes the synthetic spectrograms"},
		&cli.IntFlag{Name: "gan-epochs", Value: 10, Usage: "GAN epochs (--epochs are the classifier's)"},
		&cli.Float64Flag{Name: "gan-lr", Value: 2e-4, Usage: "the GAN's learning rate (Adam, betas 0.5, 0.999)"},
		&cli.BoolFlag{Name: "data-on-device", Usage: "put the whole data set on the device first, as the seed's notebook did (to measure the mistake)"},
		&cli.StringFlag{Name: "vit-weights", Usage: "start the classifier from a torchvision ViT state dict (torch.save(model.state_dict()), or a .safetensors file)"},
		&cli.IntFlag{Name: "keep-last", Value: 3, Usage: "keep this run's newest N checkpoints of each stage (-1: all)"},
		&cli.IntFlag{Name: "train-clips", Usage: "train on the first N clips of the training split only (0: all): the low-data regime"},
	)
}

// vitName maps the seed's model names to the configurations.
func vitName(s string) string {
	l := strings.ToLower(s)
	switch {
	case strings.Contains(l, "vit-base-patch16"), l == "vit_b_16", l == "vit-b/16":
		return "b16"
	case strings.Contains(l, "vit-small"), l == "vit_s_16":
		return "s16"
	case strings.Contains(l, "vit-tiny"), strings.Contains(l, "deit-tiny"), l == "vit_ti_16":
		return "ti16"
	}
	return s
}

// presetFrom resolves --preset and --vram for the device, then applies
// the size flags the command line (or config file) set.
func presetFrom(c *cli.Context, dev torch.Device, vram string) (Preset, error) {
	name := strings.ToLower(c.String("preset"))
	var p Preset
	switch {
	case vram != "":
		v, err := VRAMPreset(vram)
		if err != nil {
			return p, err
		}
		if c.IsSet("preset") && name != "auto" && name != v.Model {
			return p, recipes.Usagef("--preset %s and --vram %s disagree: give one", name, vram)
		}
		p = Presets[v.Model]
	case name == "auto":
		p = Presets["cpu"]
		if dev.IsCUDA() {
			p = Presets["gpu"]
		}
	default:
		v, ok := Presets[name]
		if !ok {
			return p, &recipes.ConfigError{Field: "preset", Value: name, Reason: "want auto, " + strings.Join(PresetNames(), ", ")}
		}
		p = v
	}
	set := func(field string, min, max int64, dst *int64) error {
		if !c.IsSet(field) {
			return nil
		}
		v := c.Int64(field)
		if v < min || v > max {
			return &recipes.ConfigError{Field: field, Value: v, Reason: fmt.Sprintf("must be in [%d, %d]", min, max)}
		}
		*dst = v
		return nil
	}
	// The discriminator halves both sides Ups times with 4×4 kernels: a
	// side under 2^Ups leaves a kernel larger than its input.
	least := max(8, int64(1)<<p.Ups)
	if err := set("n-mels", least, 1024, &p.Mels); err != nil {
		return p, err
	}
	if err := set("frames", least, 1<<16, &p.Frames); err != nil {
		return p, err
	}
	if err := set("latent-dim", 1, 4096, &p.Latent); err != nil {
		return p, err
	}
	if c.IsSet("gan-batch-size") {
		if v := c.Int("gan-batch-size"); v < 1 || v > recipes.MaxBatch {
			return p, &recipes.ConfigError{Field: "gan-batch-size", Value: v, Reason: fmt.Sprintf("must be in [1, %d]", recipes.MaxBatch)}
		}
		p.GANBatch = c.Int("gan-batch-size")
	}
	if c.IsSet("micro-batch") {
		if v := c.Int("micro-batch"); v < 1 || v > recipes.MaxBatch {
			return p, &recipes.ConfigError{Field: "micro-batch", Value: v, Reason: fmt.Sprintf("must be in [1, %d]", recipes.MaxBatch)}
		}
		p.MicroBatch = c.Int("micro-batch")
	}
	if v := c.Int("num-synthetic"); v != -1 {
		if v < 0 || v > MaxClips {
			return p, &recipes.ConfigError{Field: "num-synthetic", Value: v, Reason: fmt.Sprintf("must be in [0, %d] (-1: the preset's)", MaxClips)}
		}
		p.NumSynthetic = v
	}
	if s := c.String("vit"); s != "" {
		n := vitName(s)
		if _, ok := ViTConfigs[n]; !ok {
			return p, &recipes.ConfigError{Field: "vit", Value: s, Reason: "want " + strings.Join(ViTNames(), ", ")}
		}
		p.ViT = n
	}
	return p, nil
}

func accumFlags(c *cli.Context) (gan, d, g int, err error) {
	gan, d, g = c.Int("gan-grad-accum"), c.Int("d-grad-accum"), c.Int("g-grad-accum")
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{{"gan-grad-accum", gan, 1}, {"d-grad-accum", d, 0}, {"g-grad-accum", g, 0}} {
		if f.v < f.min || f.v > recipes.MaxBatch {
			return 0, 0, 0, &recipes.ConfigError{Field: f.name, Value: f.v, Reason: fmt.Sprintf("must be in [%d, %d]", f.min, recipes.MaxBatch)}
		}
	}
	return gan, d, g, nil
}

// trainConfigFrom builds a run's configuration from the shared settings
// and the recipe's flags.
func trainConfigFrom(c *cli.Context, run *recipes.Run) (TrainConfig, error) {
	cm := run.Common
	p, err := presetFrom(c, cm.Device, cm.VRAM)
	if err != nil {
		return TrainConfig{}, recipes.Reword(err, run.FromFile)
	}
	sched, err := ParseSchedule(c.String("unfreeze"))
	if err != nil {
		return TrainConfig{}, err
	}
	ga, da, gg, err := accumFlags(c)
	if err != nil {
		return TrainConfig{}, recipes.Reword(err, run.FromFile)
	}
	if !(c.Float64("gan-lr") > 0) {
		return TrainConfig{}, &recipes.ConfigError{Field: "gan-lr", Value: c.Float64("gan-lr"), Reason: "must be a finite number > 0"}
	}
	if v := c.Int("keep-last"); v < -1 || v == 0 {
		// 0 would have been the library's default (3), not none.
		return TrainConfig{}, &recipes.ConfigError{Field: "keep-last", Value: v, Reason: "must be at least 1, or -1 (all)"}
	}
	if c.Int("train-clips") < 0 {
		return TrainConfig{}, &recipes.ConfigError{Field: "train-clips", Value: c.Int("train-clips"), Reason: "must be >= 0 (0: all)"}
	}
	if err := recipes.CheckRanges(recipes.Between("gan-epochs", int64(c.Int("gan-epochs")), 1, 1<<20)); err != nil { // as --epochs
		return TrainConfig{}, err
	}
	cm.MicroBatch = p.MicroBatch // the table's, or --micro-batch
	cfg := TrainConfig{
		Common: cm, Preset: p, ShapeSet: c.IsSet("n-mels") || c.IsSet("frames") || c.IsSet("preset") || cm.VRAM != "",
		Stage: c.String("stage"), GANCheckpoint: c.String("gan"), NumSynthetic: p.NumSynthetic,
		GANAccum: ga, DAccum: da, GAccum: gg, GANEpochs: c.Int("gan-epochs"), GANLR: c.Float64("gan-lr"),
		TrainClips: c.Int("train-clips"), Unfreeze: sched, Pretrained: c.String("vit-weights"),
		DataOnDevice: c.Bool("data-on-device"), KeepLast: c.Int("keep-last"), Events: run.Events,
	}
	if cfg.GANCheckpoint != "" {
		if _, err := os.Stat(cfg.GANCheckpoint); err != nil {
			return cfg, recipes.Usagef("--gan: %v", err)
		}
	}
	if cm.Resume != "" {
		return cfg, checkResumed(c, run, cm.Resume)
	}
	return cfg, nil
}

// checkResumed refuses a resumed command's model flags that its
// checkpoint's models contradict: the GAN's latent size, and the
// classifier once the file has one (the spectrogram shape is checked
// where the data is read).
func checkResumed(c *cli.Context, run *recipes.Run, path string) error {
	f, err := ckpt.ReadParts(path, "meta") // no tensor: the resume reads the file again
	if err != nil {
		return checkpointError(path, err)
	}
	defer f.Free()
	m, err := readMeta(f)
	if err != nil {
		return err
	}
	stored := []recipes.Stored{{Flag: "latent-dim", Value: m.GAN.Latent}}
	if f.Has("classifier") {
		vit := m.ViT.Name
		if vitName(c.String("vit")) == vit {
			vit = c.String("vit") // the same model, however named
		}
		stored = append(stored, recipes.Stored{Flag: "vit", Value: vit})
	}
	return recipes.CheckResumed(c, run.FromFile, path, stored...)
}

func trainCommand() *cli.Command {
	return &cli.Command{
		Name:  "train",
		Usage: "train the conditional GAN, generate NUM_SYNTHETIC spectrograms, train the ViT on real + synthetic (--dry-run: test-memory)",
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
			if run.DryRun {
				return runTestMemory(cfg, run.Logf)
			}
			res, err := Train(run.Ctx, cfg)
			if cerr := run.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			var parts []string
			if cfg.Stage != StageClassifier && res.GANTrained {
				parts = append(parts, fmt.Sprintf("trained %s (D loss %s, G loss %s)", recipes.Plural(res.GANSteps, "GAN step"), numStr(res.DLoss, 4), numStr(res.GLoss, 4)))
			}
			if cfg.Stage != StageGAN {
				parts = append(parts, fmt.Sprintf("trained %s on %d real + %d synthetic spectrograms: valid accuracy %s, test accuracy %s",
					recipes.Plural(res.Steps, "classifier step"), res.Real, res.Synthetic, accStr(res.ValidAcc), accStr(res.TestAcc)))
			}
			if res.Interrupted {
				fmt.Printf("interrupted: %s; checkpoint %s (go on with --resume %[2]s)\n", strings.Join(parts, "; "), res.Checkpoint)
				return nil
			}
			fmt.Printf("%s; precision %s; peak memory %s; checkpoint %s\n", strings.Join(parts, "; "), res.Precision.Precision, torch.FormatBytes(res.Peak), res.Checkpoint)
			return nil
		},
	}
}

func accStr(a float64) string { return numStr(a, 3) }

// numStr is v with prec decimals, or "-" for NaN: no figure (none this run).
func numStr(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func runTestMemory(cfg TrainConfig, logf func(string, ...any)) error {
	session, err := recipes.Begin(cfg.Common, cfg.Events) // the memory cap
	if err != nil {
		return err
	}
	defer session.End()
	if cfg.Events != nil {
		logf = session.Logf // after Begin's lines
	}
	prec := session.Precision
	if cfg.Unfreeze != nil {
		vc, err := cfg.Preset.ViTConfig(len(Genres))
		if err != nil {
			return recipes.Usage(err)
		}
		if err := cfg.Unfreeze.Check(vc.Layers, cfg.Epochs); err != nil {
			return err
		}
	}
	p := cfg.Preset
	p.MicroBatch = cfg.MicroBatch
	logf("test-memory on %s: GAN_BATCH_SIZE=%d, BATCH_SIZE=%d, N_MELS=%d, frames %d, LATENT_DIM=%d, ViT %s; precision %s",
		cfg.Device, p.GANBatch, p.MicroBatch, p.Mels, p.Frames, p.Latent, p.ViT, prec)
	_, err = TestMemory(MemoryTestConfig{Preset: p, Device: cfg.Device, Precision: prec.Precision, GANAccum: cfg.GANAccum,
		DAccum: cfg.DAccum, GAccum: cfg.GAccum, Accum: cfg.Accum, GradCheckpointing: cfg.GradCheckpointing, Unfreeze: cfg.Unfreeze, Out: os.Stdout})
	return err
}

// testMemoryUnused are train's flags that test-memory takes (a train
// command line works with the verb changed) but cannot honour: it runs
// one GAN iteration and one ViT step on made-up spectrograms of the
// configured sizes and prints their peaks, training nothing further.
var testMemoryUnused = func() []recipes.Unused {
	const (
		noData  = "test-memory reads no data: it measures one step on spectrograms of the configured sizes"
		noRun   = "test-memory saves and logs nothing: it prints one GAN iteration's and one ViT step's peaks"
		oneStep = "test-memory measures one step, whose memory does not depend on it"
	)
	var out []recipes.Unused
	for why, flags := range map[string][]string{
		noData:  {"data", "workers", "prefetch", "data-on-device", "train-clips", "gan", "vit-weights"},
		noRun:   {"checkpoint-dir", "checkpoint-every", "resume", "overwrite", "keep-last", "metrics", "tensorboard", "memory-every", "auto-batch", "dry-run"},
		oneStep: {"max-steps", "gan-epochs", "lr", "gan-lr", "warmup", "clip-norm", "max-nonfinite-steps", "stage"},
	} {
		for _, f := range flags {
			out = append(out, recipes.Unused{Flag: f, Why: why})
		}
	}
	slices.SortFunc(out, func(a, b recipes.Unused) int { return strings.Compare(a.Flag, b.Flag) })
	return out
}()

func testMemoryCommand() *cli.Command {
	cmd := trainCommand()
	cmd.Name = "test-memory"
	cmd.Usage = "the seed's test_memory_config: one GAN iteration and one ViT step at the configured sizes; exit 0 when it fits, 3 on out of memory"
	cmd.Flags = recipes.HideFlags(cmd.Flags, recipes.Names(testMemoryUnused)...)
	cmd.Action = func(c *cli.Context) error {
		run, err := recipes.Prepare(c, spec, testMemoryUnused...)
		if err != nil {
			return err
		}
		defer run.Close()
		cfg, err := trainConfigFrom(c, run)
		if err != nil {
			return err
		}
		return runTestMemory(cfg, run.Logf)
	}
	return cmd
}

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "a checkpoint's classifier accuracy on a split, and its generator judged by a classifier per genre",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Usage: "the checkpoint (required)"},
			&cli.StringFlag{Name: "classifier", Usage: "judge the generated spectrograms with this checkpoint's classifier (default: --checkpoint's)"},
			&cli.StringFlag{Name: "data", Value: "data/ganvit"},
			&cli.StringFlag{Name: "split", Value: SplitTest, Usage: "train, valid or test"},
			&cli.StringFlag{Name: "device", Value: "auto"},
			&cli.IntFlag{Name: "generated", Value: 100, Usage: "spectrograms generated per genre (0: skip)"},
			&cli.Int64Flag{Name: "n-mels", Usage: "check the data's mel bins against the checkpoint's (0: no check)"},
			&cli.Int64Flag{Name: "frames", Usage: "check the frames against the checkpoint's (0: no check)"},
			&cli.IntFlag{Name: "batch-size", Value: 12},
			&cli.Uint64Flag{Name: "seed", Value: 1},
			&cli.StringFlag{Name: "mixed-precision", Value: "no", Usage: "no, auto, bf16 or fp16"},
		},
		Action: func(c *cli.Context) error {
			dev, err := recipes.ParseDevice(c.String("device"))
			if err != nil {
				return recipes.Usagef("--device: %v", err)
			}
			if c.String("checkpoint") == "" {
				return recipes.Usagef("--checkpoint is required")
			}
			if err := checkEvalCounts(c.Int("batch-size"), c.Int("generated")); err != nil {
				return err
			}
			prec, err := amp.ParsePrecision(c.String("mixed-precision"), dev)
			if err != nil {
				return recipes.Usage(err)
			}
			ec := EvalConfig{Checkpoint: c.String("checkpoint"), Classifier: c.String("classifier"), Data: c.String("data"),
				Split: c.String("split"), Device: dev, Precision: prec.Precision, Generated: c.Int("generated"),
				Batch: c.Int("batch-size"), Seed: c.Uint64("seed"), Mels: c.Int64("n-mels"), Frames: c.Int64("frames"),
				Log: report.NewLogger(os.Stderr).Printf}
			r, err := Evaluate(c.Context, ec)
			if err != nil {
				return err
			}
			fmt.Print(r.Table())
			return nil
		},
	}
}

func memoryTableCommand() *cli.Command {
	return &cli.Command{
		Name:  "memory-table",
		Usage: "the seed's Memory Usage Breakdown, measured: data on the device (all vs one batch), parameters, activations and gradients, optimizer state, cached",
		Flags: append(modelFlags(),
			&cli.StringFlag{Name: "data", Value: "data/ganvit"},
			&cli.StringFlag{Name: "device", Value: "auto"},
			&cli.StringFlag{Name: "vram", Usage: "a --vram row's sizes"},
			&cli.StringFlag{Name: "mixed-precision", Value: "auto"},
			// The train verb's spellings (recipes.Flags), read by presetFrom.
			&cli.IntFlag{Name: "micro-batch", Aliases: []string{"batch-size", "batch_size"}, Usage: "BATCH_SIZE: the classifier's micro-batch (default: the preset's)"},
			&cli.IntFlag{Name: "clips", Usage: "use at most this many training clips (0: all)"},
		),
		Action: func(c *cli.Context) error {
			dev, err := recipes.ParseDevice(c.String("device"))
			if err != nil {
				return recipes.Usagef("--device: %v", err)
			}
			p, err := presetFrom(c, dev, c.String("vram"))
			if err != nil {
				return err
			}
			prec, err := amp.ParsePrecision(c.String("mixed-precision"), dev)
			if err != nil {
				return recipes.Usage(err)
			}
			t, err := MeasureBreakdown(c.Context, BreakdownConfig{Data: c.String("data"), Preset: p, Device: dev, Precision: prec.Precision,
				Clips: c.Int("clips"), Log: report.NewLogger(os.Stderr).Printf})
			if err != nil {
				return err
			}
			fmt.Print(t.Table())
			return nil
		},
	}
}

// isOOM reports whether err is an out-of-memory verdict of test-memory.
func isOOM(err error) bool {
	var o *OOMError
	return errors.As(err, &o)
}
