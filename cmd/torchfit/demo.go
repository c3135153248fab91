package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/amp"
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
			ckdir := filepath.Join(dir, "checkpoints")
			os.RemoveAll(ckdir)
			metrics := filepath.Join(dir, "metrics.jsonl")
			os.Remove(metrics)
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
