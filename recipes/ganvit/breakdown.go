package ganvit

import (
	"context"
	"fmt"
	"strings"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// BreakdownConfig configures MeasureBreakdown.
type BreakdownConfig struct {
	Data      string
	Preset    Preset
	Device    torch.Device
	Precision amp.Precision
	Clips     int // at most this many training clips (0: all)
	Log       func(string, ...any)
}

// Column is one configuration's memory, measured by the device's counter.
type Column struct {
	Data        int64 // the data on the device: the whole training set (and the batch copied from it), or one batch
	Params      int64 // generator + discriminator + ViT
	Activations int64 // the larger of the GAN iteration's and the ViT step's peak above what was held before it
	Optimizer   int64 // Adam state of the three networks after their steps
	Cached      int64 // reserved − allocated (the CUDA cache; 0 on the CPU)
	Workspaces  int64 // cuBLAS's workspaces (memplan.Workspaces; 0 on the CPU)
	Peak        int64 // the highest allocated total, workspaces included
	GANAct      int64
	ViTAct      int64
}

// Breakdown is the seed's "Memory Usage Breakdown", measured: before the
// fix (every spectrogram on the device first) and after (one batch).
type Breakdown struct {
	Preset    Preset
	Device    torch.Device
	Precision amp.Precision
	Clips     int
	Before    Column
	After     Column
}

// Table renders the breakdown as the seed lays it out, both columns side
// by side.
func (b Breakdown) Table() string {
	f := torch.FormatBytes
	var s strings.Builder
	fmt.Fprintf(&s, "Memory usage breakdown on %s: preset %s (%d mels × %d frames, GAN_BATCH_SIZE %d, BATCH_SIZE %d, ViT %s), %s, %d training clips\n",
		b.Device, b.Preset.Name, b.Preset.Mels, b.Preset.Frames, b.Preset.GANBatch, b.Preset.MicroBatch, b.Preset.ViT, b.Precision, b.Clips)
	fmt.Fprintf(&s, "| | before the fix (all spectrograms on the device) | after the fix (one batch) |\n|---|---:|---:|\n")
	row := func(name string, x, y int64) { fmt.Fprintf(&s, "| %s | %s | %s |\n", name, f(x), f(y)) }
	row("Data on device", b.Before.Data, b.After.Data)
	row("Model parameters (G + D + ViT)", b.Before.Params, b.After.Params)
	row("Activations/grads: GAN iteration", b.Before.GANAct, b.After.GANAct)
	row("Activations/grads: ViT step", b.Before.ViTAct, b.After.ViTAct)
	row("Optimizer state (Adam × 3)", b.Before.Optimizer, b.After.Optimizer)
	row("cuBLAS workspaces", b.Before.Workspaces, b.After.Workspaces)
	row("Cached (reserved − allocated)", b.Before.Cached, b.After.Cached)
	row("Total (peak allocated)", b.Before.Peak, b.After.Peak)
	return s.String()
}

// MeasureBreakdown loads the training split, then for each column builds
// the three networks on the device, runs one GAN iteration (micro-batch
// GAN_BATCH_SIZE) and one ViT step (BATCH_SIZE) on real spectrograms, and
// reads the counter between the phases. The networks all stay on the
// device, as in the seed's notebook (training itself frees the
// discriminator and the GAN's optimizer state before the classifier).
func MeasureBreakdown(ctx context.Context, cfg BreakdownConfig) (b Breakdown, err error) {
	err = torch.Main().DoErr(func() error {
		b, err = measureBreakdown(ctx, cfg)
		return err
	})
	return b, err
}

func measureBreakdown(ctx context.Context, cfg BreakdownConfig) (Breakdown, error) {
	p := cfg.Preset
	b := Breakdown{Preset: p, Device: cfg.Device, Precision: cfg.Precision}
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := recipes.CheckRanges(recipes.Between("clips", int64(cfg.Clips), 0, MaxClips)); err != nil {
		return b, err
	}
	shape := Shape{p.Mels, p.Frames}
	specs, err := LoadSpecs(ctx, cfg.Data, SplitTrain, shape, 0)
	if err != nil {
		return b, err
	}
	if cfg.Clips > 0 && cfg.Clips < specs.Len() {
		specs.Truncate(cfg.Clips)
	}
	NormOf(specs).Apply(specs)
	b.Clips = specs.Len()
	logf("%d training clips → %v spectrograms: %s in host memory", specs.Len(), shape, torch.FormatBytes(specs.Bytes()))
	for _, all := range []bool{false, true} {
		col, err := measureColumn(specs, cfg, all)
		if err != nil {
			return b, err
		}
		if all {
			b.Before = col
		} else {
			b.After = col
		}
		logf("%s: peak %s", map[bool]string{true: "all spectrograms on the device", false: "one batch on the device"}[all], torch.FormatBytes(col.Peak))
	}
	return b, nil
}

func measureColumn(specs *Specs, cfg BreakdownConfig, all bool) (Column, error) {
	var col Column
	dev, p := cfg.Device, cfg.Preset
	torch.EmptyCache()
	// The libraries' workspaces, made afresh for each column: otherwise
	// the first column measured carries them (64 MiB on an H100).
	ws, err := memplan.Workspaces(dev)
	if err != nil {
		return col, err
	}
	col.Workspaces = ws
	base := torch.MustMemoryStats(dev).Allocated
	torch.ResetPeakMemory(dev)
	allocated := func() int64 { return torch.MustMemoryStats(dev).Allocated }
	peak := int64(0)
	notePeak := func() {
		if s := torch.MustMemoryStats(dev); s.PeakAllocated-base > peak {
			peak = s.PeakAllocated - base
		}
	}
	// Data: the device copy of everything, or the batches the loops use.
	var dd *DeviceData
	if all {
		if dd, err = specs.OnDevice(dev); err != nil {
			return col, err
		}
		defer dd.Free()
	}
	batch := func(n int) (*data.Batch, error) {
		ld, err := Loader(specs, dd, dev, n, false, 0, 0)
		if err != nil {
			return nil, err
		}
		defer ld.Close()
		return ld.Next(context.Background())
	}
	notePeak()
	// Parameters.
	before := allocated()
	gc := p.GANConfig(len(Genres))
	vc, err := p.ViTConfig(len(Genres))
	if err != nil {
		return col, err
	}
	g, d := NewGenerator(gc), NewDiscriminator(gc)
	defer nn.Free(g)
	defer nn.Free(d)
	v, err := NewViT(vc)
	if err != nil {
		return col, err
	}
	defer nn.Free(v)
	gan, err := NewGAN(g, d, GANOptions{Device: dev, Precision: cfg.Precision, MicroD: p.GANBatch, MicroG: p.GANBatch, NoOOMAdapt: true})
	if err != nil {
		return col, err
	}
	defer gan.Free()
	cls, err := NewClassifier(v, ClassifierOptions{Device: dev, Precision: cfg.Precision, MicroBatch: p.MicroBatch, NoOOMAdapt: true})
	if err != nil {
		return col, err
	}
	defer cls.Free()
	col.Params = allocated() - before
	notePeak()
	// One GAN iteration on a batch of GAN_BATCH_SIZE, then one ViT step
	// on a batch of BATCH_SIZE; each twice, so the second runs with the
	// optimizer state in place (the steady state). The batch is on the
	// device while its steps run.
	dataBytes := int64(0)
	if all {
		dataBytes = dd.Bytes
	}
	for _, step := range []struct {
		act   *int64
		batch int
		run   func(b *data.Batch) error
	}{
		{&col.GANAct, p.GANBatch, func(b *data.Batch) error { _, err := gan.Step(b); return err }},
		{&col.ViTAct, p.MicroBatch, func(b *data.Batch) error { _, err := cls.Step(b); return err }},
	} {
		b, err := batch(step.batch)
		if err != nil {
			return col, err
		}
		defer b.Free()
		var bytes int64
		for _, t := range b.Tensors() {
			bytes += t.NBytes()
		}
		col.Data = max(col.Data, dataBytes+bytes)
		before := allocated()
		if err := step.run(b); err != nil {
			return col, err
		}
		col.Optimizer += allocated() - before
		notePeak()
		held := allocated()
		torch.ResetPeakMemory(dev)
		if err := step.run(b); err != nil {
			return col, err
		}
		*step.act = torch.MustMemoryStats(dev).PeakAllocated - held
		notePeak()
		b.Free()
	}
	col.Activations = max(col.GANAct, col.ViTAct)
	st := torch.MustMemoryStats(dev)
	col.Cached = st.Reserved - st.Allocated
	col.Peak = peak + ws
	return col, nil
}
