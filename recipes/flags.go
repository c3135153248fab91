package recipes

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// Defaults are a recipe's defaults for the shared training flags: its
// seed's.
type Defaults struct {
	Data            string
	MicroBatch      int
	Accum           int
	Precision       string // "no", "auto", "bf16", "fp16"
	Epochs          int
	LR              float64
	Warmup          int
	ClipNorm        float64
	EmptyCacheEvery int
	MemoryFraction  float64 // 0: none
	CheckpointDir   string
	CheckpointEvery int
	Workers         int
	Prefetch        int
	MemoryEvery     int
	// VRAMRows are the rows --vram takes, for its help (VRAMRows of the
	// recipe's table; nil: the guides' four sizes).
	VRAMRows []string
}

// Common are the settings of every recipe's train command, read from the
// shared flags (and the --config file under them).
type Common struct {
	Data              string
	Config            string
	MicroBatch        int // micro-batch
	Accum             int // micro-batches per optimizer step
	Precision         string
	Device            torch.Device
	MemoryLimit       string // bytes with a unit, or a fraction of the device
	MemoryFraction    float64
	VRAM              string
	AutoBatch, DryRun bool
	GradCheckpointing bool
	ClipNorm          float64
	EmptyCacheEvery   int
	CheckpointDir     string
	CheckpointEvery   int
	Resume            string
	Overwrite         bool
	Metrics           string
	// TensorBoard is a directory for TensorBoard event files ("": none).
	TensorBoard       string
	Workers, Prefetch int
	Seed              uint64
	Threads           int
	Epochs, MaxSteps  int
	LR                float64
	Warmup            int
	MemoryEvery       int
	MaxNonFinite      int
	// ZeRO shards the optimizer state over the ranks of a data-parallel
	// run (ZeRO stage 1); BucketMB caps its gradient all-reduce buckets.
	ZeRO     bool
	BucketMB int
	// AllReduceAfterBackward starts the gradient all-reduce once backward
	// ended instead of bucket by bucket during it (no overlap; to compare).
	AllReduceAfterBackward bool
}

// EffectiveBatch is MicroBatch × Accum.
func (c Common) EffectiveBatch() int { return c.MicroBatch * c.Accum }

// MaxWorkers bounds --workers (a loader's workers, a data command's
// parallel processes: the loader's own bound, data.MaxWorkers) and
// MaxThreads --threads, in every command.
const (
	MaxWorkers = data.MaxWorkers
	MaxThreads = 1024
)

// MaxNonFiniteDefault is --max-nonfinite-steps' default.
const MaxNonFiniteDefault = 5

// Flags returns the shared training flags with d's defaults. Each answers
// to its name, its underscore spelling (batch_size) and the seeds' other
// spellings (gradient_accumulation_steps, data_dir, ...).
func Flags(d Defaults) []cli.Flag {
	if d.Precision == "" {
		d.Precision = "no"
	}
	fs := []cli.Flag{
		&cli.StringFlag{Name: "data", Aliases: []string{"data_dir", "data-dir"}, Value: d.Data, Usage: "data directory"},
		&cli.StringFlag{Name: "config", Usage: "JSON or YAML file with any of these settings (the flags override it)"},
		&cli.IntFlag{Name: "micro-batch", Aliases: []string{"batch-size", "batch_size"}, Value: d.MicroBatch,
			Usage: "samples per forward and backward (the seeds' --batch-size; effective batch = micro-batch × grad-accum)"},
		&cli.IntFlag{Name: "grad-accum", Aliases: []string{"gradient_accumulation_steps", "gradient-accumulation-steps", "gradient_accumulation", "gradient-accumulation"},
			Value: d.Accum, Usage: "micro-batches per optimizer step (effective batch = micro-batch × grad-accum)"},
		&cli.StringFlag{Name: "mixed-precision", Value: d.Precision, Usage: "no (fp32), auto (fp16 on CUDA, bf16 where the CPU computes it natively, else fp32), bf16 or fp16"},
		&cli.GenericFlag{Name: "mixed_precision", Value: &switchValue{}, Usage: "the seeds' switch: --mixed_precision alone is --mixed-precision auto"},
		&cli.StringFlag{Name: "device", Value: "auto", Usage: "cpu, cuda, cuda:N or auto"},
		&cli.StringFlag{Name: "memory-limit", Usage: "cap device memory: a size with a unit (6GiB, 512MB) or a fraction (0.9)"},
		&cli.Float64Flag{Name: "memory-fraction", Value: d.MemoryFraction, Usage: "cap device memory at this fraction (0: none)"},
		&cli.StringFlag{Name: "vram", Usage: vramUsage(d.VRAMRows)},
		&cli.BoolFlag{Name: "auto-batch", Usage: "find the largest micro-batch that fits; keep the effective batch with accumulation"},
		&cli.BoolFlag{Name: "dry-run", Usage: "only measure (batch sizes, memory) and exit"},
		&cli.BoolFlag{Name: "grad-checkpointing", Aliases: []string{"gradient_checkpointing", "gradient-checkpointing", "use_gradient_checkpointing"},
			Usage: "recompute blocks in backward instead of keeping their activations"},
		&cli.Float64Flag{Name: "clip-norm", Aliases: []string{"max_grad_norm", "max-grad-norm", "clip_grad_norm"}, Value: d.ClipNorm, Usage: "clip the gradients' total norm (0: off)"},
		&cli.IntFlag{Name: "empty-cache-every", Aliases: []string{"empty_cache_frequency"}, Value: d.EmptyCacheEvery, Usage: "empty the CUDA cache every N steps (0: never)"},
		&cli.StringFlag{Name: "checkpoint-dir", Aliases: []string{"output_dir"}, Value: d.CheckpointDir},
		&cli.IntFlag{Name: "checkpoint-every", Aliases: []string{"save_interval", "save-interval"}, Value: d.CheckpointEvery, Usage: "steps between checkpoints (0: epoch ends and the end)"},
		&cli.StringFlag{Name: "resume", Aliases: []string{"resume_from_checkpoint"}, Usage: "checkpoint to resume from"},
		&cli.BoolFlag{Name: "overwrite", Usage: "let this run replace checkpoints of another run in --checkpoint-dir"},
		&cli.StringFlag{Name: "metrics", Usage: "append per-step metrics (JSONL) here"},
		&cli.StringFlag{Name: "tensorboard", Usage: "write TensorBoard event files (loss, lr, grad norm, memory, samples/s, evaluations) into this directory: tensorboard --logdir DIR"},
		&cli.IntFlag{Name: "workers", Aliases: []string{"num_workers", "num-workers"}, Value: d.Workers, Usage: "data loader workers"},
		&cli.IntFlag{Name: "prefetch", Aliases: []string{"prefetch_factor", "prefetch-factor", "prefetch_buffer_size"}, Value: d.Prefetch, Usage: "batches each worker builds ahead (0: 2)"},
		&cli.Uint64Flag{Name: "seed", Value: 1},
		&cli.IntFlag{Name: "threads", Usage: "libtorch CPU threads (0: default)"},
		&cli.IntFlag{Name: "epochs", Aliases: []string{"num_epochs", "num-epochs"}, Value: d.Epochs},
		&cli.IntFlag{Name: "max-steps", Usage: "stop once this many optimizer steps are done, a resumed run's included"},
		&cli.Float64Flag{Name: "lr", Aliases: []string{"learning_rate", "learning-rate"}, Value: d.LR},
		&cli.IntFlag{Name: "warmup", Aliases: []string{"warmup_steps", "warmup-steps"}, Value: d.Warmup, Usage: "warmup steps"},
		&cli.IntFlag{Name: "memory-every", Value: d.MemoryEvery, Usage: "log a memory line every N steps (0: none)"},
		&cli.IntFlag{Name: "max-nonfinite-steps", Value: MaxNonFiniteDefault, Usage: "stop when the loss has been NaN or infinite for this many steps in a row (0: 5; -1: never)"},
		&cli.BoolFlag{Name: "zero", Usage: "data parallel (torchfit launch, torchrun): shard the optimizer state over the ranks (ZeRO stage 1)"},
		&cli.IntFlag{Name: "bucket-mb", Value: 25, Usage: "data parallel: gradient all-reduce bucket size in MiB"},
		&cli.BoolFlag{Name: "allreduce-after-backward", Usage: "data parallel: all-reduce the gradients after backward, not during it (no overlap; to compare)"},
	}
	return fs
}

// switchValue is a flag that works as a bare switch (--mixed_precision
// means auto) and also takes a value (--mixed_precision=bf16).
type switchValue struct {
	set   bool
	value string
}

func (s *switchValue) String() string   { return s.value }
func (s *switchValue) IsBoolFlag() bool { return true }
func (s *switchValue) Set(v string) error {
	s.set = true
	switch strings.ToLower(v) {
	case "true":
		s.value = "auto"
	case "false":
		s.value = "no"
	default:
		s.value = v
	}
	return nil
}

// Underscores gives every flag of cmds (and their subcommands) its
// underscore spelling as an alias (batch-size: batch_size), the spelling
// of the seeds' Python scripts.
func Underscores(cmds []*cli.Command) {
	for _, cmd := range cmds {
		taken := map[string]bool{}
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				taken[n] = true
			}
		}
		for _, f := range cmd.Flags {
			addUnderscoreAlias(f, taken)
		}
		Underscores(cmd.Subcommands)
	}
}

// addUnderscoreAlias adds f's underscore spelling unless a flag of the
// command already answers to it (--mixed_precision is the seeds' switch).
func addUnderscoreAlias(f cli.Flag, taken map[string]bool) {
	name := f.Names()[0]
	alt := strings.ReplaceAll(name, "-", "_")
	if alt == name || taken[alt] {
		return
	}
	taken[alt] = true
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Aliases = append(f.Aliases, alt)
	case *cli.IntFlag:
		f.Aliases = append(f.Aliases, alt)
	case *cli.Int64Flag:
		f.Aliases = append(f.Aliases, alt)
	case *cli.Uint64Flag:
		f.Aliases = append(f.Aliases, alt)
	case *cli.Float64Flag:
		f.Aliases = append(f.Aliases, alt)
	case *cli.BoolFlag:
		f.Aliases = append(f.Aliases, alt)
	case *cli.StringSliceFlag:
		f.Aliases = append(f.Aliases, alt)
	}
}

// ReadCommon reads the shared flags of c (after ApplyConfig).
func ReadCommon(c *cli.Context) (Common, error) {
	if err := FiniteFloats(c); err != nil {
		return Common{}, err
	}
	dev, err := ParseDevice(c.String("device"))
	if err != nil {
		return Common{}, &ConfigError{Field: "device", Value: c.String("device"), Err: err}
	}
	// A cap the user gives replaces the recipe's default fraction (CLIP's
	// 0.95); both given by the user is refused (Common.Validate).
	fraction := c.Float64("memory-fraction")
	if c.String("memory-limit") != "" && !c.IsSet("memory-fraction") {
		fraction = 0
	}
	precision := c.String("mixed-precision")
	switchSet := false
	if sv, ok := c.Generic("mixed_precision").(*switchValue); ok && sv.set && !c.IsSet("mixed-precision") {
		precision, switchSet = sv.value, true
	}
	if !c.IsSet("mixed-precision") && !switchSet {
		switch strings.ToLower(precision) {
		case "no", "fp32", "float32", "none", "off", "false":
			precision = "" // the recipe's fp32 default, not the user's choice: "precision fp32 (the default)"
		}
	}
	cm := Common{
		Data: c.String("data"), Config: c.String("config"), MicroBatch: c.Int("micro-batch"), Accum: c.Int("grad-accum"),
		Precision: precision, Device: dev, MemoryLimit: c.String("memory-limit"), MemoryFraction: fraction,
		VRAM: c.String("vram"), AutoBatch: c.Bool("auto-batch") || c.Bool("dry-run"), DryRun: c.Bool("dry-run"),
		GradCheckpointing: c.Bool("grad-checkpointing"), ClipNorm: c.Float64("clip-norm"), EmptyCacheEvery: c.Int("empty-cache-every"),
		CheckpointDir: c.String("checkpoint-dir"), CheckpointEvery: c.Int("checkpoint-every"), Resume: c.String("resume"),
		Overwrite: c.Bool("overwrite"), Metrics: c.String("metrics"), TensorBoard: c.String("tensorboard"), Workers: c.Int("workers"), Prefetch: c.Int("prefetch"),
		Seed: c.Uint64("seed"), Threads: c.Int("threads"), Epochs: c.Int("epochs"), MaxSteps: c.Int("max-steps"),
		LR: c.Float64("lr"), Warmup: c.Int("warmup"), MemoryEvery: c.Int("memory-every"), MaxNonFinite: c.Int("max-nonfinite-steps"),
		ZeRO: c.Bool("zero"), BucketMB: c.Int("bucket-mb"), AllReduceAfterBackward: c.Bool("allreduce-after-backward"),
	}
	if err := cm.Validate(); err != nil {
		return cm, err
	}
	return cm, nil
}

// Validate checks the shared settings' ranges, and that --tensorboard
// names no file.
func (c Common) Validate() error {
	if err := CheckRanges(
		Between("micro-batch", int64(c.MicroBatch), 1, MaxBatch),
		Between("grad-accum", int64(c.Accum), 1, MaxBatch),
		Between("epochs", int64(c.Epochs), 1, 1<<20),
		Between("max-steps", int64(c.MaxSteps), 0, math.MaxInt64),
		Between("warmup", int64(c.Warmup), 0, math.MaxInt64),
		Between("empty-cache-every", int64(c.EmptyCacheEvery), 0, math.MaxInt64),
		Between("checkpoint-every", int64(c.CheckpointEvery), 0, math.MaxInt64),
		Between("memory-every", int64(c.MemoryEvery), 0, math.MaxInt64),
		Between("workers", int64(c.Workers), 0, MaxWorkers),
		Between("prefetch", int64(c.Prefetch), 0, 1024),
		Between("threads", int64(c.Threads), 0, MaxThreads),
		Between("max-nonfinite-steps", int64(c.MaxNonFinite), -1, math.MaxInt64),
		Between("bucket-mb", int64(c.BucketMB), 0, 1<<12), // 0: distributed.DefaultBucketBytes
	); err != nil {
		return err
	}
	if err := CheckStep(c.MicroBatch, c.Accum, c.LR, c.ClipNorm); err != nil {
		return err
	}
	if !(c.MemoryFraction >= 0 && c.MemoryFraction <= 1) {
		return &ConfigError{Field: "memory-fraction", Value: c.MemoryFraction, Reason: "must be in [0, 1] (0: none)"}
	}
	if c.MemoryLimit != "" {
		if _, _, err := torch.ParseMemory(c.MemoryLimit); err != nil {
			return &ConfigError{Field: "memory-limit", Value: c.MemoryLimit, Err: err}
		}
	}
	if err := checkTensorBoardDir(c.TensorBoard); err != nil {
		return err
	}
	if c.MemoryLimit != "" && c.MemoryFraction > 0 {
		return &ConfigError{Field: "memory-fraction", Value: c.MemoryFraction, Reason: "give --memory-limit or --memory-fraction, not both"}
	}
	return nil
}

// Range is an integer setting (named by its flag) and the interval it
// must lie in.
type Range struct {
	Name     string
	V        int64
	Min, Max int64
}

// Between is the Range of the setting name with value v.
func Between(name string, v, min, max int64) Range {
	return Range{Name: name, V: v, Min: min, Max: max}
}

// CheckRanges returns a *ConfigError for the first setting outside its
// range.
func CheckRanges(rs ...Range) error {
	for _, r := range rs {
		switch {
		case r.V < r.Min:
			return &ConfigError{Field: r.Name, Value: r.V, Reason: fmt.Sprintf("must be at least %d", r.Min)}
		case r.V > r.Max:
			return &ConfigError{Field: r.Name, Value: r.V, Reason: fmt.Sprintf("must be at most %d", r.Max)}
		}
	}
	return nil
}

// MinLR is the smallest learning rate a run takes: a weight of about 1
// moves by less than float32's resolution (2^-24) long before, and
// subnormal rates (1e-320) are typing slips.
const MinLR = 1e-12

// CheckStep checks what every optimizer step depends on: an effective
// batch of at most MaxBatch, a finite learning rate of at least MinLR, a finite
// clipping norm of at least 0 (0: none).
func CheckStep(batch, accum int, lr, clip float64) error {
	if n := int64(batch) * int64(accum); n > MaxBatch {
		return &ConfigError{Field: "grad-accum", Value: accum, Reason: fmt.Sprintf("the effective batch %d × %d = %d is more than %d", batch, accum, n, MaxBatch)}
	}
	if !(lr > 0) || math.IsInf(lr, 0) {
		return &ConfigError{Field: "lr", Value: lr, Reason: "must be a finite number > 0"}
	}
	if lr < MinLR {
		return &ConfigError{Field: "lr", Value: lr, Reason: fmt.Sprintf("must be at least %g: a smaller step changes no float32 weight", MinLR)}
	}
	if !(clip >= 0) || math.IsInf(clip, 0) {
		return &ConfigError{Field: "clip-norm", Value: clip, Reason: "must be a finite number >= 0 (0: no clipping)"}
	}
	return nil
}

// CheckDecay checks AdamW's decoupled weight decay against the learning
// rate: each step multiplies every decayed weight by 1 − lr × decay, so
// from lr × decay = 1 on a step zeroes the weights or flips their sign
// (the run then diverges, and the message would blame the learning
// rate). A finite decay >= 0 with lr × decay < 1.
func CheckDecay(lr, decay float64) error {
	if !(decay >= 0) || math.IsInf(decay, 0) {
		return &ConfigError{Field: "weight-decay", Value: decay, Reason: "must be a finite number >= 0"}
	}
	if lr*decay >= 1 {
		return &ConfigError{Field: "weight-decay", Value: decay, Reason: fmt.Sprintf("with --lr %g, lr × weight decay = %g: AdamW multiplies each weight by 1 − lr × weight decay every step, so it must be below 1", lr, lr*decay)}
	}
	return nil
}

// MaxBatch bounds batch sizes and accumulation (2^24).
const MaxBatch = 1 << 24

// FiniteFloats returns a *ConfigError for the first float flag of c's
// command whose value is NaN or infinite.
func FiniteFloats(c *cli.Context) error {
	if c.Command == nil {
		return nil
	}
	for _, f := range c.Command.Flags {
		if ff, ok := f.(*cli.Float64Flag); ok {
			if v := c.Float64(ff.Name); math.IsNaN(v) || math.IsInf(v, 0) {
				return &ConfigError{Field: ff.Name, Value: v, Reason: "must be a finite number"}
			}
		}
	}
	return nil
}

// Preset is a row of a recipe's --vram table (every recipe's VRAMPreset
// returns one): the recipe's model it implies and the shared settings the
// guide gives; zero fields leave the flag as it is.
type Preset struct {
	Name              string // the row: 8gb, 12gb, ...
	Model             string // the recipe's model preset or size ("": the recipe's default)
	MicroBatch, Accum int
	Mixed             bool // mixed precision (auto)
	Checkpointing     bool
}

// LookupVRAM finds a --vram value in a recipe's table: any case, with or
// without "gb", and 24gb+ as 24gb. An unknown value is a *ConfigError
// listing the rows.
func LookupVRAM(name string, table map[string]Preset) (Preset, error) {
	key := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), "+")
	if _, err := strconv.Atoi(key); err == nil {
		key += "gb"
	}
	if p, ok := table[key]; ok {
		return p, nil
	}
	rows := VRAMRows(table)
	want := strings.Join(rows[:len(rows)-1], ", ") + " or " + rows[len(rows)-1]
	return Preset{}, &ConfigError{Field: "vram", Value: name, Reason: "not a row of the guide's table: want " + want}
}

// VRAMRows are the names of a --vram table's rows: the sizes in order,
// then named rows (cpu).
func VRAMRows[V any](table map[string]V) []string {
	rows := make([]string, 0, len(table))
	for k := range table {
		rows = append(rows, k)
	}
	slices.SortFunc(rows, func(a, b string) int {
		na, ea := strconv.Atoi(strings.TrimSuffix(a, "gb"))
		nb, eb := strconv.Atoi(strings.TrimSuffix(b, "gb"))
		switch {
		case ea == nil && eb == nil:
			return na - nb
		case ea == nil:
			return -1
		case eb == nil:
			return 1
		}
		return strings.Compare(a, b)
	})
	return rows
}

// vramUsage is --vram's help: the rows of the recipe's table (the
// guides' four sizes when it names none).
func vramUsage(rows []string) string {
	if len(rows) == 0 {
		rows = []string{"8gb", "12gb", "16gb", "24gb"}
	}
	var sizes, named []string
	for _, r := range rows {
		if strings.HasSuffix(r, "gb") {
			sizes = append(sizes, r)
		} else {
			named = append(named, r)
		}
	}
	list := func(xs []string) string {
		if len(xs) == 1 {
			return xs[0]
		}
		return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
	}
	u := "the guide's settings for a GPU of this size: " + list(sizes)
	if len(named) > 0 {
		u += "; or " + list(named)
	}
	return u
}

// ApplyPreset sets the fields of cm that the command line did not set
// explicitly from p.
func ApplyPreset(c *cli.Context, cm *Common, p Preset) {
	if p.MicroBatch > 0 && !c.IsSet("micro-batch") {
		cm.MicroBatch = p.MicroBatch
	}
	if p.Accum > 0 && !c.IsSet("grad-accum") {
		cm.Accum = p.Accum
	}
	if p.Mixed && !c.IsSet("mixed-precision") && !c.IsSet("mixed_precision") {
		cm.Precision = "auto"
	}
	if !c.IsSet("grad-checkpointing") {
		cm.GradCheckpointing = p.Checkpointing
	}
}

// ParseDevice reads a --device value (cpu, cuda, cuda:N, auto) and checks
// that the device is there: a CUDA device where there is none is an error
// naming what is missing (torch.CheckDevice), which the CLI prints as one
// line with exit status 2 — never libtorch's dispatcher table.
func ParseDevice(s string) (torch.Device, error) {
	dev, err := torch.ParseDevice(s)
	if err != nil {
		return dev, err
	}
	if err := torch.CheckDevice(dev); err != nil {
		var te *torch.Error
		if errors.As(err, &te) {
			return dev, fmt.Errorf("%s: %s", s, te.Msg)
		}
		return dev, err
	}
	return dev, nil
}
