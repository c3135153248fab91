package tts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
)

// MemoryTestRow is one batch size's run in the memory test.
type MemoryTestRow struct {
	BatchSize     int
	Steps         int
	PeakAllocated int64
	PeakReserved  int64
	StepTime      time.Duration // mean optimizer step
	SamplesPerSec float64
	OOM           bool
	Err           error // the failure, OOM or other
}

// MemoryTest is the seed's test_memory_optimization.py: train at each
// micro-batch size for a duration, without out-of-memory adaptation, and
// measure.
type MemoryTest struct {
	Rows     []MemoryTestRow
	Duration time.Duration
	Accum    int
	Device   torch.Device
	Limit    int64
}

// Failed reports whether a run failed for a reason other than running out
// of memory (the command's exit status is non-zero only then).
func (t MemoryTest) Failed() error {
	for _, r := range t.Rows {
		if r.Err != nil && !r.OOM {
			return fmt.Errorf("tts: memory test at batch size %d: %w", r.BatchSize, r.Err)
		}
	}
	return nil
}

// Table writes the seed's table.
func (t MemoryTest) Table(w io.Writer) {
	limit := "no cap"
	if t.Limit > 0 {
		limit = "cap " + torch.FormatBytes(t.Limit)
	}
	fmt.Fprintf(w, "memory test: %v, %s, %v per batch size, accumulation %d, no out-of-memory adaptation\n", t.Device, limit, t.Duration, t.Accum)
	fmt.Fprintf(w, "%10s  %6s  %15s  %15s  %10s  %9s  %4s\n", "batch size", "steps", "peak allocated", "peak reserved", "step time", "samples/s", "OOM")
	for _, r := range t.Rows {
		oom := "no"
		if r.OOM {
			oom = "yes"
		}
		st, sps := "-", "-"
		if r.Steps > 0 {
			st, sps = r.StepTime.Round(time.Millisecond).String(), fmt.Sprintf("%.2f", r.SamplesPerSec)
		}
		fmt.Fprintf(w, "%10d  %6d  %15s  %15s  %10s  %9s  %4s", r.BatchSize, r.Steps, torch.FormatBytes(r.PeakAllocated), torch.FormatBytes(r.PeakReserved), st, sps, oom)
		if r.Err != nil && !r.OOM {
			fmt.Fprintf(w, "  failed: %v", r.Err)
		}
		fmt.Fprintln(w)
	}
}

// RunMemoryTest trains a fresh model (same seed) at each batch size for d
// (at least one step) and measures peak memory, step time and throughput.
// An out-of-memory error ends that size's run and marks it; other errors
// are recorded too (Failed).
func RunMemoryTest(ctx context.Context, cfg TrainConfig, sizes []int, d time.Duration) (res MemoryTest, err error) {
	torch.Main().Do(func() { res, err = runMemoryTest(ctx, cfg, sizes, d) })
	return res, err
}

func runMemoryTest(ctx context.Context, cfg TrainConfig, sizes []int, d time.Duration) (MemoryTest, error) {
	res := MemoryTest{Duration: d, Accum: cfg.Accum, Device: cfg.Device}
	if err := cfg.check(); err != nil {
		return res, err
	}
	session, err := recipes.Begin(cfg.Common, cfg.Events) // --memory-limit caps every size tried
	if err != nil {
		return res, err
	}
	defer session.End()
	cfg.Events = session.Events() // after Begin's lines
	res.Limit = torch.MustMemoryStats(cfg.Device).Limit
	if err := needFile("codec", cfg.Codec); err != nil {
		return res, err
	}
	meta, err := readMeta(cfg.Codec, "codec")
	if err != nil {
		return res, err
	}
	ph, err := readPhonemes(cfg.Data)
	if err != nil {
		return res, err
	}
	texts, err := readManifestTexts(cfg.Data, "train")
	if err != nil {
		return res, err
	}
	var all []string
	for _, t := range texts {
		all = append(all, ph[t])
	}
	vocab, err := BuildVocab(all)
	if err != nil {
		return res, recipes.Usagef("tts: %s: %v", filepath.Join(cfg.Data, phonemesFile), err)
	}
	store, err := OpenFeatures(cfg.Data, cfg.MemoryMapping)
	if err != nil {
		return res, err
	}
	defer store.Close()
	tr, err := LoadCorpus(cfg.Data, "train", store, vocab, cfg.Seed)
	if err != nil {
		return res, err
	}
	if err := useReference(&cfg, tr); err != nil { // --reference changes what is trained on, so the memory
		return res, err
	}
	gcfg := cfg.GPT
	gcfg.Vocab, gcfg.Codes, gcfg.GradCheckpointing = int64(vocab.Size()), meta.Codec.Codes, cfg.GradCheckpointing
	// A model no size can build is the settings' error, not each row's.
	if err := gcfg.Validate(); err != nil {
		return res, recipes.Usage(err)
	}
	for _, n := range sizes {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		row := MemoryTestRow{BatchSize: n}
		row.Err = torch.TidyErr(func() error { return memoryTestOne(ctx, cfg, meta.Codec, gcfg, tr, n, d, &row) })
		row.OOM = errors.Is(row.Err, torch.ErrOutOfMemory)
		torch.EmptyCache()
		res.Rows = append(res.Rows, row)
		cfg.logf("batch size %d: %d steps, peak %s%s", n, row.Steps, torch.FormatBytes(row.PeakAllocated), map[bool]string{true: ", out of memory", false: ""}[row.OOM])
	}
	return res, nil
}

// memoryTestOne trains batch size n for d. The row's peak counts the
// model (built first, with the codec's weights read into it) and the
// training, not the codec's file: that is read for each row and released
// before the peak is reset, as a training run releases it.
func memoryTestOne(ctx context.Context, cfg TrainConfig, cc CodecConfig, gcfg GPTConfig, tr *Corpus, n int, d time.Duration, row *MemoryTestRow) (err error) {
	defer func() {
		st := torch.MustMemoryStats(cfg.Device)
		row.PeakAllocated, row.PeakReserved = st.PeakAllocated, st.PeakReserved
	}()
	torch.ManualSeed(cfg.Seed)
	torch.EmptyCache()
	if err := torch.ResetPeakMemory(cfg.Device); err != nil {
		return err
	}
	var m *Model
	if err := torch.Try(func() { m, err = NewModel(cc, gcfg) }); err != nil {
		return err
	}
	if err != nil {
		return err
	}
	defer nn.Free(m)
	_, codecW, free, err := readCheckpoint(cfg.Codec, "codec")
	if err != nil {
		return err
	}
	_, err = nn.LoadStateDict(m.Codec, codecW, true)
	free()
	if err != nil {
		return err
	}
	nn.Freeze(m, "codec.")
	if cfg.Device != torch.CPU {
		if err := torch.Try(func() { nn.To(m, cfg.Device, torch.Float32) }); err != nil {
			return err
		}
	}
	if err := torch.ResetPeakMemory(cfg.Device); err != nil {
		return err
	}
	precision, err := amp.ParsePrecision(cfg.Precision, cfg.Device)
	if err != nil {
		return err
	}
	c := cfg
	c.MicroBatch = n
	opt, sched, _ := schedule(&c, nn.Parameters(m.GPT), tr.Len())
	defer opt.Free()
	defer sched.Free()
	t, err := train.New(m, opt, m.Loss, train.Config{MicroBatch: n, Accum: cfg.Accum, Device: cfg.Device, Precision: precision.Precision,
		Count: CountCodes, ClipNorm: cfg.ClipNorm, EmptyCacheEvery: cfg.EmptyCacheEvery, NoOOMAdapt: true, MaxNonFinite: -1})
	if err != nil {
		return err
	}
	if n*cfg.Accum > tr.Len() {
		return &recipes.ConfigError{Field: "batch-sizes", Value: n, Reason: fmt.Sprintf("a batch of %d × %d accumulation steps is more than the %d training utterances", n, cfg.Accum, tr.Len())}
	}
	ld, err := data.NewLoader(tr.Dataset(), Collate(gcfg), data.Options{BatchSize: n * cfg.Accum, Shuffle: true, Seed: cfg.Seed, DropLast: true, Workers: cfg.Workers, Prefetch: cfg.Prefetch})
	if err != nil {
		return err
	}
	defer ld.Close()
	start := time.Now()
	var busy time.Duration
	for row.Steps == 0 || time.Since(start) < d {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := ld.Next(ctx)
		if errors.Is(err, io.EOF) {
			continue
		}
		if err != nil {
			return err
		}
		t0 := time.Now()
		_, err = t.Step(b)
		busy += time.Since(t0)
		b.Free()
		if err != nil {
			return err
		}
		row.Steps++
		row.StepTime = busy / time.Duration(row.Steps)
		row.SamplesPerSec = float64(row.Steps*n*cfg.Accum) / busy.Seconds()
	}
	return nil
}
