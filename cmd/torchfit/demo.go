package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
)

// demoCommand is `make demo`: a small corpus, the tiny conformer trained on
// the CPU with accumulation and bf16 autocast, validation CER at the start
// and the end, and one held-out utterance transcribed.
func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "synthesise a small Konkani corpus and train the tiny ASR model on the CPU (a few minutes)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Value: "out/demo", Usage: "where the corpus, checkpoints and metrics go"},
			&cli.IntFlag{Name: "utterances", Value: 700},
			&cli.IntFlag{Name: "epochs", Value: 12},
			&cli.IntFlag{Name: "max-steps", Value: 0, Usage: "stop after this many steps (0: all epochs)"},
			&cli.StringFlag{Name: "mixed-precision", Value: "auto", Usage: "auto: bf16 where the CPU computes it natively, else fp32 (" + amp.EnvNativeBF16 + "=0|1 overrides the CPU probe); or fp32, bf16"},
			&cli.BoolFlag{Name: "overwrite", Usage: "delete what is in --dir's checkpoints/ and its metrics.jsonl even where no earlier demo wrote it (without it such files are refused)"},
		},
		Action: func(c *cli.Context) error {
			dir := c.String("dir")
			// Bad flags are refused before anything is synthesised or written.
			for _, f := range []struct {
				name string
				min  int
			}{{"utterances", 1}, {"epochs", 1}, {"max-steps", 0}} {
				if v := c.Int(f.name); v < f.min {
					return &recipes.ConfigError{Field: f.name, Value: v, Reason: fmt.Sprintf("must be at least %d", f.min)}
				}
			}
			if _, err := amp.ParsePrecision(c.String("mixed-precision"), torch.CPU); err != nil {
				return recipes.Usagef("--mixed-precision: %v", err)
			}
			if st, err := os.Stat(dir); err == nil && !st.IsDir() {
				return recipes.Usagef("--dir %s is not a directory", dir)
			}
			// What an earlier demo left is replaced; anything else in the
			// demo's way is refused, before the minutes of synthesis.
			own, foreign, err := demoClaims(dir)
			if err != nil {
				return err
			}
			overwrite := c.Bool("overwrite")
			if len(foreign) > 0 && !overwrite {
				return &DemoForeignError{Dir: dir, Files: foreign}
			}
			log := report.NewLogger(os.Stderr)
			logf := log.Printf
			gen := speech.DefaultGenerateConfig()
			gen.OutDir = filepath.Join(dir, "corpus")
			gen.Utterances = c.Int("utterances")
			logf("synthesising %d utterances with espeak-ng into %s", gen.Utterances, gen.OutDir)
			st, err := speech.Generate(c.Context, gen)
			if err != nil {
				return recipes.Usagef("%v", err)
			}
			logf("corpus: %d new, %d reused, %.1f min of audio (train %d, valid %d, test %d)", st.Synthesised, st.Skipped,
				st.Seconds/60, st.Counts[speech.Train], st.Counts[speech.Valid], st.Counts[speech.Test])
			// The bf16 lever, measured on one step of this model and corpus.
			var m [2]asr.Measurement
			for k, p := range []string{"fp32", "bf16"} {
				if m[k], err = asr.MeasureStep(asr.MeasureConfig{Data: gen.OutDir, Preset: "tiny", MicroBatch: 4, Accum: 2,
					Precision: p, Device: torch.CPU}); err != nil {
					return err
				}
			}
			logf("one step, micro-batch 4 × 2: fp32 peak %s (activations %s) in %.2fs; bf16 autocast peak %s (activations %s) in %.2fs",
				torch.FormatBytes(m[0].Peak), torch.FormatBytes(m[0].Activations), m[0].Step.Seconds(),
				torch.FormatBytes(m[1].Peak), torch.FormatBytes(m[1].Activations), m[1].Step.Seconds())
			logf("one bf16 step took %.1f× the fp32 step on this CPU", m[1].Step.Seconds()/m[0].Step.Seconds())
			precision := c.String("mixed-precision") // training logs the choice and why
			ckdir := filepath.Join(dir, demoCheckpoints)
			metrics := filepath.Join(dir, demoMetrics)
			if err := removeDemoFiles(dir, own); err != nil {
				return err
			}
			if overwrite {
				for _, p := range foreign { // asked for, and named by the refusal without --overwrite
					if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
						return err
					}
				}
			}
			before, err := demoSnapshot(dir)
			if err != nil {
				return err
			}
			cfg := asr.TrainConfig{
				Common: recipes.Common{Data: gen.OutDir, MicroBatch: 4, Accum: 2, Precision: precision, Device: torch.CPU, Epochs: c.Int("epochs"), MaxSteps: c.Int("max-steps"), LR: 2e-3, Warmup: 60, ClipNorm: 5, CheckpointDir: ckdir, CheckpointEvery: 200, Workers: 1, Seed: 1, MemoryEvery: 100},
				Preset: "tiny", ValidLimit: 64,
			}
			start := time.Now()
			events, done, err := recipes.FrontEnd(log, metrics)
			if err != nil {
				return err
			}
			cfg.Events = events
			ctx, stop := report.SignalContext(c.Context)
			res, err := asr.Train(ctx, cfg)
			stop()
			done()
			// Recorded whatever the outcome, so that the next demo replaces
			// what this one wrote, a failed or interrupted run's too.
			if rerr := recordDemoFiles(dir, before); rerr != nil {
				logf("could not record the demo's files (the next demo in %s will refuse them): %v", dir, rerr)
			}
			if err != nil {
				return err
			}
			fmt.Printf("\ntiny conformer, %d parameters, %d steps of effective batch 8 (micro-batch %d × 2, %s) in %s\n",
				res.Params, res.Steps, res.MicroBatch, res.Precision, time.Since(start).Round(time.Second))
			fmt.Printf("validation CER: %.3f at the start -> %.3f at the end (peak CPU memory %s)\n",
				res.CERStart, res.CER, torch.FormatBytes(res.PeakMemory))
			cer, wer, n, err := asr.EvaluateSplit(res.Checkpoint, gen.OutDir, "test", torch.CPU)
			if err != nil {
				return err
			}
			fmt.Printf("held-out test split (%d utterances, unseen sentences, half read by an unseen voice): CER %.3f, WER %.3f\n", n, cer, wer)
			utt, err := firstHeldOut(filepath.Join(gen.OutDir, "test.jsonl"))
			if err != nil {
				return err
			}
			texts, err := asr.TranscribeFiles(res.Checkpoint, []string{filepath.Join(gen.OutDir, utt.Path)}, torch.CPU)
			if err != nil {
				return err
			}
			fmt.Printf("transcribe %s (voice %s)\n  reference: %s\n  model:     %s\n", utt.Path, utt.Voice, utt.Text, texts[0])
			fmt.Printf("checkpoint %s (loads in Python: torch.load(path)[\"model\"]); curves: torchfit plot --metrics %s\n", res.Checkpoint, metrics)
			return nil
		},
	}
}

// The demo's outputs in its --dir besides the corpus (which it reuses):
// the checkpoint directory and the metrics file.
const (
	demoCheckpoints = "checkpoints"
	demoMetrics     = "metrics.jsonl"
	// demoRecord, in --dir, lists the files the last demo there wrote
	// (path, size, modification time): the next demo removes those, and
	// only those, so that `make demo` runs again without a prompt while a
	// `demo --dir .` beside a real run (the ASR recipe's default
	// --checkpoint-dir is checkpoints too) deletes nothing of it.
	demoRecord = ".torchfit-demo.json"
)

// DemoForeignError is the demo's refusal of a --dir whose checkpoints/ or
// metrics.jsonl hold files no earlier demo wrote (or that changed since):
// a fresh run there means deleting them, which only --overwrite asks for.
type DemoForeignError struct {
	Dir   string
	Files []string // relative to Dir: metrics.jsonl, then checkpoints/ in name order
}

// UserError marks it as the user's choice of directory (exit status 2).
func (*DemoForeignError) UserError() {}

func (e *DemoForeignError) Error() string {
	names := e.Files
	if len(names) > 3 {
		names = append(slices.Clone(names[:2]), fmt.Sprintf("%d more", len(e.Files)-2))
	}
	list := names[len(names)-1]
	if len(names) > 1 {
		list = strings.Join(names[:len(names)-1], ", ") + " and " + list
	}
	return fmt.Sprintf("demo: %s holds %s, not written by an earlier demo, which a new run would delete: choose another --dir, or pass --overwrite to delete them",
		e.Dir, list)
}

// demoFile is a file a demo wrote, as it was when the demo ended.
type demoFile struct {
	Path    string `json:"path"` // relative to --dir
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
}

// demoOutputs are the paths, relative to dir, in the demo's way:
// metrics.jsonl and everything in checkpoints/ (or checkpoints itself
// when it is not a directory).
func demoOutputs(dir string) ([]string, error) {
	var out []string
	if _, err := os.Lstat(filepath.Join(dir, demoMetrics)); err == nil {
		out = append(out, demoMetrics)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	ck := filepath.Join(dir, demoCheckpoints)
	st, err := os.Lstat(ck)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return out, nil
	case err != nil:
		return nil, err
	case !st.IsDir():
		return append(out, demoCheckpoints), nil
	}
	entries, err := os.ReadDir(ck)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		out = append(out, filepath.Join(demoCheckpoints, e.Name()))
	}
	return out, nil
}

// statDemoFile describes a regular file under dir (ok false for anything else).
func statDemoFile(dir, rel string) (demoFile, bool) {
	st, err := os.Lstat(filepath.Join(dir, rel))
	if err != nil || !st.Mode().IsRegular() {
		return demoFile{}, false
	}
	return demoFile{Path: rel, Size: st.Size(), ModTime: st.ModTime().UnixNano()}, true
}

// demoClaims splits the demo's way into the files an earlier demo wrote,
// unchanged since (own), and the rest (foreign). No record, or one that
// does not parse, owns nothing.
func demoClaims(dir string) (own, foreign []string, err error) {
	paths, err := demoOutputs(dir)
	if err != nil {
		return nil, nil, err
	}
	recorded := map[string]demoFile{}
	if b, err := os.ReadFile(filepath.Join(dir, demoRecord)); err == nil {
		var files []demoFile
		if json.Unmarshal(b, &files) == nil {
			for _, f := range files {
				recorded[f.Path] = f
			}
		}
	}
	for _, p := range paths {
		if f, ok := statDemoFile(dir, p); ok && recorded[p] == f {
			own = append(own, p)
		} else {
			foreign = append(foreign, p)
		}
	}
	return own, foreign, nil
}

// removeDemoFiles removes an earlier demo's files, each only if it is
// still as that demo left it.
func removeDemoFiles(dir string, own []string) error {
	_, foreign, err := demoClaims(dir)
	if err != nil {
		return err
	}
	for _, p := range own {
		if slices.Contains(foreign, p) {
			continue // changed since demoClaims: no longer the demo's
		}
		if err := os.Remove(filepath.Join(dir, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// demoSnapshot describes the files in the demo's way before it trains.
func demoSnapshot(dir string) (map[string]demoFile, error) {
	paths, err := demoOutputs(dir)
	if err != nil {
		return nil, err
	}
	snap := map[string]demoFile{}
	for _, p := range paths {
		if f, ok := statDemoFile(dir, p); ok {
			snap[p] = f
		}
	}
	return snap, nil
}

// recordDemoFiles writes the demo record: the files in the demo's way
// that are new or changed since before (the run wrote them).
func recordDemoFiles(dir string, before map[string]demoFile) error {
	paths, err := demoOutputs(dir)
	if err != nil {
		return err
	}
	files := []demoFile{}
	for _, p := range paths {
		if f, ok := statDemoFile(dir, p); ok && before[p] != f {
			files = append(files, f)
		}
	}
	b, err := json.MarshalIndent(files, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, demoRecord), append(b, '\n'))
}

type manifestLine struct {
	Path  string `json:"path"`
	Text  string `json:"text"`
	Voice string `json:"voice"`
}

func firstHeldOut(manifest string) (manifestLine, error) {
	raw, err := os.ReadFile(manifest)
	if err != nil {
		return manifestLine{}, err
	}
	var first manifestLine
	for i, line := range splitLines(raw) {
		var m manifestLine
		if err := json.Unmarshal(line, &m); err != nil {
			return m, fmt.Errorf("%s line %d: %w", manifest, i+1, err)
		}
		if i == 0 {
			first = m
		}
		if m.Voice != "" && m.Voice[0] == 'h' { // the unseen (Hindi) voice
			return m, nil
		}
	}
	return first, nil
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	start := 0
	for i, c := range b {
		if c == '\n' {
			if i > start {
				out = append(out, b[start:i])
			}
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, b[start:])
	}
	return out
}
