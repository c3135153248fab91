package clip

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// Layout is one way to train an effective batch: micro-batch × steps and
// how the contrastive loss is accumulated.
type Layout struct {
	Micro, Accum int
	Mode         string // Exact or Naive
}

func (l Layout) String() string {
	switch {
	case l.Accum == 1:
		return fmt.Sprintf("plain batch %d", l.Micro)
	case l.Mode == Exact:
		return fmt.Sprintf("exact %d × %d (grad cache)", l.Micro, l.Accum)
	}
	return fmt.Sprintf("naive %d × %d (the seed's)", l.Micro, l.Accum)
}

// Negatives is how many negatives each sample's loss sees.
func (l Layout) Negatives() int {
	if l.Mode == Exact || l.Accum == 1 {
		return l.Micro*l.Accum - 1
	}
	return l.Micro - 1
}

// Measurement is one layout's training step, measured.
type Measurement struct {
	Layout
	Held  int64           // bytes held between steps (weights, optimizer state)
	Peak  int64           // peak bytes during a step (counting allocator / CUDA)
	Times []time.Duration // each timed step's wall time
	CPU   []time.Duration // each timed step's process CPU time (all threads)
}

// Median returns the median wall time and CPU time of a step.
func (m Measurement) Median() (wall, cpu time.Duration) {
	return median(m.Times), median(m.CPU)
}

func median(ts []time.Duration) time.Duration {
	ts = slices.Clone(ts)
	slices.Sort(ts)
	return ts[len(ts)/2]
}

// MeasureConfig is `torchfit clip measure`.
type MeasureConfig struct {
	Preset    string
	Device    torch.Device
	Precision string
	Layouts   []Layout
	Steps     int // timed steps per layout (after one warm-up step)
	Seed      uint64
}

// Measure trains a few steps of each layout on random images and captions
// and records the peak memory of a step and its time. Every layout starts
// from the same weights; memory is the allocator's (on the CPU,
// torchfit's counting allocator).
func Measure(cfg MeasureConfig) (out []Measurement, choice amp.Choice, err error) {
	torch.Main().Do(func() { out, choice, err = measure(cfg) })
	return out, choice, err
}

func measure(cfg MeasureConfig) ([]Measurement, amp.Choice, error) {
	mc, err := Preset(cfg.Preset)
	if err != nil {
		return nil, amp.Choice{}, &recipes.ConfigError{Field: "preset", Value: cfg.Preset, Err: err}
	}
	choice, err := amp.ParsePrecision(cfg.Precision, cfg.Device)
	if err != nil {
		return nil, choice, &recipes.ConfigError{Field: "mixed-precision", Value: cfg.Precision, Err: err}
	}
	if cfg.Steps < 1 {
		cfg.Steps = 3
	}
	tok, err := NewTokenizer(vocabularyWords(), mc.VocabSize, mc.ContextLength)
	if err != nil {
		return nil, choice, err
	}
	var out []Measurement
	for _, l := range cfg.Layouts {
		if l.Micro < 1 || l.Accum < 1 || l.Micro*l.Accum < 2 {
			return out, choice, &recipes.ConfigError{Field: "layouts", Value: l, Reason: "micro-batch and accumulation at least 1, effective batch at least 2"}
		}
		var m Measurement
		err := torch.TidyErr(func() error {
			var err error
			m, err = measureLayout(mc, tok, l, choice.Precision, cfg)
			return err
		})
		if err != nil {
			return out, choice, fmt.Errorf("clip: measuring %v: %w", l, err)
		}
		out = append(out, m)
	}
	return out, choice, nil
}

func measureLayout(mc Config, tok *Tokenizer, l Layout, p amp.Precision, cfg MeasureConfig) (Measurement, error) {
	res := Measurement{Layout: l}
	torch.CollectGarbage()
	torch.ManualSeed(cfg.Seed)
	m, err := NewModel(mc)
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	if cfg.Device != torch.CPU {
		nn.To(m, cfg.Device, torch.Float32)
	}
	opt := nn.NewAdamWGroups(nn.DecayGroups(nn.Parameters(m), 0.1), nn.AdamConfig{LR: 1e-5, Beta1: 0.9, Beta2: 0.98, Eps: 1e-6, WeightDecay: 0.1})
	defer opt.Free()
	embed, batchLoss, microLoss := Objectives(m, cfg.Device)
	tc := train.Config{MicroBatch: l.Micro, Accum: l.Accum, Device: cfg.Device, Precision: p, ClipNorm: 1, NoOOMAdapt: true}
	if l.Mode == Exact {
		tc.Contrastive = &train.Contrastive{Embed: embed, Loss: batchLoss}
	}
	tr, err := train.New(m, opt, microLoss, tc)
	if err != nil {
		return res, err
	}
	tr.OnStep = func(train.StepInfo) { m.ClampLogitScale() }
	n := int64(l.Micro * l.Accum)
	batch := func(k int) *data.Batch {
		torch.ManualSeed(cfg.Seed + uint64(k) + 1)
		ids := make([]int64, 0, n*mc.ContextLength)
		words := tok.Words
		for i := int64(0); i < n; i++ {
			var ws []string
			for j := 0; j < 8; j++ {
				ws = append(ws, words[(int(i)*7+j*13+k)%len(words)])
			}
			ids = append(ids, tok.Encode(strings.Join(ws, " "))...)
		}
		return &data.Batch{Fields: map[string]*torch.Tensor{
			"image": torch.Randn([]int64{n, 3, mc.ImageResolution, mc.ImageResolution}).Keep(),
			"text":  torch.FromSlice(ids, []int64{n, mc.ContextLength}).Keep(),
		}}
	}
	for k := 0; k <= cfg.Steps; k++ {
		b := batch(k)
		torch.EmptyCache()
		st := torch.MustMemoryStats(cfg.Device)
		if err := torch.ResetPeakMemory(cfg.Device); err != nil {
			b.Free()
			return res, err
		}
		t0, c0 := time.Now(), cpuTime()
		_, err := tr.Step(b)
		dt, dc := time.Since(t0), cpuTime()-c0
		peak := torch.MustMemoryStats(cfg.Device).PeakAllocated
		b.Free()
		if err != nil {
			return res, err
		}
		if k == 0 {
			continue // warm-up: the optimizer's state appears here
		}
		res.Held = max(res.Held, st.Allocated)
		res.Peak = max(res.Peak, peak)
		res.Times = append(res.Times, dt)
		res.CPU = append(res.CPU, dc)
	}
	return res, nil
}

// writeTable prints measurements as recipes/clip/README.md's table.
func writeTable(w io.Writer, ms []Measurement) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layout\tnegatives per sample\tpeak memory\tpeak − held\tCPU time per step\twall time per step\tsamples per CPU second\t")
	for _, m := range ms {
		wall, cpu := m.Median()
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%.1f\t\n", m.Layout, m.Negatives(), torch.FormatBytes(m.Peak), torch.FormatBytes(m.Peak-m.Held),
			cpu.Round(time.Millisecond), wall.Round(time.Millisecond), float64(m.Micro*m.Accum)/cpu.Seconds())
	}
	tw.Flush()
}

// parseLayouts reads layouts such as "exact:16x8,naive:16x8,plain:128".
func parseLayouts(s string) ([]Layout, error) {
	var out []Layout
	for _, f := range strings.Split(s, ",") {
		mode, size, ok := strings.Cut(strings.TrimSpace(f), ":")
		if !ok {
			return nil, fmt.Errorf("layout %q: want mode:MICROxACCUM (exact:16x8) or plain:N", f)
		}
		var l Layout
		switch mode {
		case Exact, Naive:
			if _, err := fmt.Sscanf(size, "%dx%d", &l.Micro, &l.Accum); err != nil {
				return nil, fmt.Errorf("layout %q: want %s:MICROxACCUM", f, mode)
			}
			l.Mode = mode
		case "plain":
			if _, err := fmt.Sscanf(size, "%d", &l.Micro); err != nil {
				return nil, fmt.Errorf("layout %q: want plain:N", f)
			}
			l.Accum, l.Mode = 1, Exact
		default:
			return nil, fmt.Errorf("layout %q: mode exact, naive or plain", f)
		}
		if l.Micro < 1 || l.Accum < 1 || l.Micro*l.Accum < 2 || l.Micro*l.Accum > recipes.MaxBatch {
			return nil, fmt.Errorf("layout %q: sizes out of range", f)
		}
		out = append(out, l)
	}
	return out, nil
}

// maxMeasureSteps bounds measure's --steps: a measurement, not a run.
const maxMeasureSteps = 10_000

func measureCommand() *cli.Command {
	return &cli.Command{
		Name:  "measure",
		Usage: "peak memory and step time of the contrastive layouts: exact 16×8 (grad cache), naive 16×8 (the seed's), plain batches",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "preset", Value: "cpu"},
			&cli.StringFlag{Name: "device", Value: "auto"},
			&cli.StringFlag{Name: "mixed-precision", Value: "auto", Usage: "no, auto, bf16 or fp16"},
			&cli.StringFlag{Name: "layouts", Value: "exact:16x8,naive:16x8,plain:128,plain:16"},
			&cli.IntFlag{Name: "steps", Value: 3, Usage: "timed steps per layout (after one warm-up step; at most 10,000)"},
			&cli.IntFlag{Name: "threads", Usage: "libtorch CPU threads (0: default)"},
		},
		Action: func(c *cli.Context) error {
			dev, err := recipes.ParseDevice(c.String("device"))
			if err != nil {
				return recipes.Usagef("--device: %v", err)
			}
			layouts, err := parseLayouts(c.String("layouts"))
			if err != nil {
				return recipes.Usagef("--layouts: %v", err)
			}
			if err := recipes.CheckRanges(recipes.Between("steps", int64(c.Int("steps")), 1, maxMeasureSteps),
				recipes.Between("threads", int64(c.Int("threads")), 0, recipes.MaxThreads)); err != nil {
				return err
			}
			if n := c.Int("threads"); n > 0 {
				torch.SetNumThreads(n)
			}
			ms, choice, err := Measure(MeasureConfig{Preset: c.String("preset"), Device: dev, Precision: c.String("mixed-precision"),
				Layouts: layouts, Steps: c.Int("steps"), Seed: 1})
			if err != nil {
				return err
			}
			fmt.Printf("preset %s on %v, precision %s, %d threads; memory from %s\n", c.String("preset"), dev, choice, torch.NumThreads(),
				map[bool]string{true: "the CUDA caching allocator", false: "torchfit's counting allocator"}[dev.IsCUDA()])
			writeTable(os.Stdout, ms)
			return nil
		},
	}
}
