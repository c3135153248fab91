package tts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
)

// gptConfig trains the tiny GPT over the fixture's corpus and codec.
func gptConfig(t *testing.T, out string) TrainConfig {
	dir, codec := tinyCorpus(t)
	m, err := report.OpenMetrics(filepath.Join(out, "metrics.jsonl"))
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return TrainConfig{
		Common: recipes.Common{Data: dir, MicroBatch: 4, Accum: 2, Precision: "no", Device: torch.CPU, Epochs: 100, MaxSteps: 12,
			LR: 3e-3, Warmup: 2, ClipNorm: 1, CheckpointDir: filepath.Join(out, "ck"), Seed: 3, MaxNonFinite: 5, BucketMB: 25},
		Codec: codec, GPT: tinyGPTConfig(0), ValidLimit: 8, Events: m.Sink,
	}
}

type stepLine struct {
	Step       int            `json:"step"`
	Eval       map[string]any `json:"eval"`
	MicroBatch int            `json:"micro_batch"`
	Samples    int            `json:"samples"`
}

func readSteps(t *testing.T, path string) []stepLine {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []stepLine
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var s stepLine
		require.NoError(t, json.Unmarshal([]byte(l), &s))
		if s.Step > 0 && s.Eval == nil {
			out = append(out, s)
		}
	}
	return out
}

// TestTrainLearnsAndSpeaks: a few steps lower the validation code
// cross-entropy; the checkpoint speaks a sentence in a training voice,
// writing a 16 kHz WAV.
func TestTrainLearnsAndSpeaks(t *testing.T) {
	out := t.TempDir()
	cfg := gptConfig(t, out)
	res, err := Train(context.Background(), cfg)
	require.NoError(t, err)
	t.Logf("code CE %.3f → %.3f, text CE %.3f → %.3f after %d steps", res.Start.CodeCE, res.Valid.CodeCE, res.Start.TextCE, res.Valid.TextCE, res.Steps)
	require.Equal(t, 12, res.Steps)
	require.Less(t, res.Valid.CodeCE, res.Start.CodeCE-0.1)
	require.FileExists(t, res.Checkpoint)
	for _, s := range readSteps(t, filepath.Join(out, "metrics.jsonl")) {
		require.Equal(t, 8, s.Samples)
	}
	// The summary's scores are the run's end, not its last finished
	// epoch's (12 steps end within an epoch): the final checkpoint,
	// resumed for no more steps, scores the same; a resumed run reports
	// no start score of its own.
	again := cfg
	again.Resume, again.CheckpointDir, again.Events = res.Checkpoint, filepath.Join(out, "ck2"), nil
	end, err := Train(context.Background(), again)
	require.NoError(t, err)
	require.Equal(t, 12, end.Steps)
	require.Equal(t, res.Valid, end.Valid)
	require.Zero(t, end.Start, "no start score measured on resume")

	items := readManifest(t, cfg.Data, "train")
	wav := filepath.Join(out, "say.wav")
	sr, err := Say(context.Background(), SayConfig{Checkpoint: res.Checkpoint, Text: items[0].Text, Speaker: filepath.Join(cfg.Data, items[0].Path),
		Out: wav, Device: torch.CPU, Sample: SampleOptions{Temperature: 0.7, TopK: 10, TopP: 1, Seed: 1, MaxCodes: 30}, GLIters: 2})
	require.NoError(t, err)
	require.NotEmpty(t, sr.Phonemes)
	require.Positive(t, sr.Codes+btoi(sr.Stopped))
	x, err := ReadReference(wav)
	if sr.Seconds >= minReference {
		require.NoError(t, err)
		require.InDelta(t, sr.Seconds, float64(len(x))/SampleRate, 1e-9)
	}

	// A ranker keeps the candidate it transcribes closest to the text:
	// here one that hears the text in the third of four and nothing in
	// the others.
	var heard [][]string
	fake := func(text string, want int) Transcriber {
		return func(_ string, files []string, _ torch.Device) ([]string, error) {
			heard = append(heard, files)
			out := make([]string, len(files))
			for k, f := range files {
				if strings.HasSuffix(f, fmt.Sprintf("_%d.wav", want)) || filepath.Base(f) == fmt.Sprintf("%d.wav", want) {
					out[k] = text
				}
			}
			return out, nil
		}
	}
	ranked := SayConfig{Checkpoint: res.Checkpoint, Text: items[0].Text, Speaker: filepath.Join(cfg.Data, items[0].Path), Out: wav, Device: torch.CPU,
		Sample: SampleOptions{Temperature: 1.5, TopK: 0, TopP: 1, Seed: 1, MaxCodes: 30, Candidates: 4}, GLIters: 2, Rank: filepath.Join(out, "ranker.pt"), Transcribe: fake(items[0].Text, 2)}
	require.NoError(t, os.WriteFile(ranked.Rank, nil, 0o644))
	sr, err = Say(context.Background(), ranked)
	require.NoError(t, err)
	require.Equal(t, 2, sr.Pick)
	require.Zero(t, sr.CER)
	require.Len(t, heard, 2, "the ranker is read first, then hears the candidates")
	require.Len(t, heard[1], 4)
	for _, f := range heard[1] {
		require.NoFileExists(t, f, "the candidates' WAVs are removed")
	}

	// So does `tts eval`'s, beside its judge, which it must not be: the
	// ranker hears the text in each sentence's second candidate.
	texts := map[string]string{}
	for _, it := range readManifest(t, cfg.Data, "test") {
		texts[strings.TrimSuffix(filepath.Base(it.Path), ".wav")] = it.Text
	}
	ev := EvalConfig{Checkpoint: res.Checkpoint, ASR: cfg.Codec, Rank: ranked.Rank, Data: cfg.Data, Limit: 2, Out: filepath.Join(out, "eval"),
		Device: torch.CPU, Sample: ranked.Sample, GLIters: 2, Transcribe: func(ck string, files []string, _ torch.Device) ([]string, error) {
			heard := make([]string, len(files))
			for k, f := range files {
				name := strings.TrimSuffix(filepath.Base(f), ".wav")
				if i := strings.LastIndex(name, "_"); ck == ranked.Rank && name[i+1:] == "1" {
					heard[k] = texts[name[:i]]
				}
			}
			return heard, nil
		}}
	er, err := Evaluate(context.Background(), ev)
	require.NoError(t, err)
	require.NotEmpty(t, er.Rows)
	for _, row := range er.Rows {
		require.Equal(t, row.N, row.Reranked, row.Group)
	}
	for _, e := range er.Examples {
		kept, err := os.ReadFile(e.WAV)
		require.NoError(t, err)
		second, err := os.ReadFile(filepath.Join(ev.Out, "candidates", e.ID+"_1.wav"))
		require.NoError(t, err)
		require.Equal(t, second, kept, "the ranker's choice is the synthesis scored")
	}
	ev.Rank = ev.ASR
	_, err = Evaluate(context.Background(), ev)
	require.True(t, recipes.IsUserError(err), "the judge cannot rank: %v", err)

	ranked.Transcribe = nil
	_, err = Say(context.Background(), ranked)
	require.Error(t, err, "no transcriber to rank with")
	ranked.Rank, ranked.Sample.Candidates = cfg.Codec, 1
	_, err = Say(context.Background(), ranked)
	require.True(t, recipes.IsUserError(err), "a ranker needs candidates: %v", err)

	// A codec checkpoint is not a model that speaks.
	_, err = Say(context.Background(), SayConfig{Checkpoint: cfg.Codec, Text: "नाचता", Speaker: filepath.Join(cfg.Data, items[0].Path),
		Out: wav, Device: torch.CPU, Sample: DefaultSampleOptions(), GLIters: 2})
	require.True(t, recipes.IsUserError(err), "%v", err)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

type manifestItem struct{ Path, Text string }

func readManifest(t *testing.T, dir, split string) []manifestItem {
	raw, err := os.ReadFile(filepath.Join(dir, split+".jsonl"))
	require.NoError(t, err)
	var out []manifestItem
	for _, l := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var it manifestItem
		require.NoError(t, json.Unmarshal(l, &it))
		out = append(out, it)
	}
	return out
}

// TestTrainUnderMemoryCapHalvesMicroBatch is the seed's "automatic
// recovery from memory issues": under a cap a quarter of the way down
// from micro-batch 4's peak to micro-batch 1's, the run runs out of
// memory, halves the micro-batch and keeps the effective batch of 8 on
// every step. (Lower caps fail in the validation at the end, whose
// batches the core does not split.)
func TestTrainUnderMemoryCapHalvesMicroBatch(t *testing.T) {
	peak := func(batch, accum int) int64 {
		cfg := gptConfig(t, t.TempDir())
		cfg.MicroBatch, cfg.Accum, cfg.MaxSteps, cfg.CheckpointDir = batch, accum, 2, ""
		res, err := Train(context.Background(), cfg)
		require.NoError(t, err)
		return res.PeakMemory
	}
	p4, p1 := peak(4, 2), peak(1, 8)
	t.Logf("peak memory: micro-batch 4 %s, micro-batch 1 %s", torch.FormatBytes(p4), torch.FormatBytes(p1))
	require.Less(t, p1, p4)
	out := t.TempDir()
	cfg := gptConfig(t, out)
	cfg.MaxSteps, cfg.CheckpointDir = 4, ""
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, p4-(p4-p1)/4))
	defer torch.SetMemoryLimit(torch.CPU, 0)
	var log []string
	cfg.Events = report.Tee(cfg.Events, report.Lines(&log))
	res, err := Train(context.Background(), cfg)
	require.NoError(t, err, strings.Join(log, "\n"))
	require.Positive(t, res.OOMEvents, "the cap forced out-of-memory adaptation")
	require.Less(t, res.MicroBatch, 4)
	require.Equal(t, 8, res.MicroBatch*res.Accum)
	steps := readSteps(t, filepath.Join(out, "metrics.jsonl"))
	require.Len(t, steps, 4)
	for _, s := range steps {
		require.Equal(t, 8, s.Samples, "every step still sees the effective batch of 8")
	}

	// --auto-batch (the seed's find_optimal_batch_size) under the same cap:
	// the plan, measured on the longest utterances, keeps the effective
	// batch and trains without running out of memory.
	out = t.TempDir()
	cfg = gptConfig(t, out)
	cfg.MaxSteps, cfg.CheckpointDir, cfg.AutoBatch = 4, "", true
	log = nil
	cfg.Events = report.Tee(cfg.Events, report.Lines(&log))
	res, err = Train(context.Background(), cfg)
	require.NoError(t, err, strings.Join(log, "\n"))
	require.NotNil(t, res.Planned)
	t.Logf("auto batch under %s: micro-batch %d × %d, checkpointing %v", torch.FormatBytes(p4-(p4-p1)/4),
		res.Planned.Plan.MicroBatch, res.Planned.Plan.Accum, res.Planned.Plan.Checkpointing)
	// The trainer splits each loader batch of 8 into micro-batches (3 × 3
	// is 3 + 3 + 2), so the effective batch stays 8 whichever fits.
	m := res.Planned.Plan.MicroBatch
	require.Equal(t, (8+m-1)/m, res.Planned.Plan.Accum)
	steps = readSteps(t, filepath.Join(out, "metrics.jsonl"))
	require.Len(t, steps, 4)
	for _, s := range steps {
		require.Equal(t, 8, s.Samples, "every step sees the effective batch of 8")
	}
	// Micro-batch 4 without checkpointing does not fit the cap; with it, it
	// may (on 2.x, whose SDPA keeps no attention matrix, it does).
	require.True(t, res.Planned.Plan.MicroBatch < 4 || res.Planned.Plan.Checkpointing,
		"micro-batch 4 without checkpointing does not fit the cap: %+v", res.Planned.Plan)
	require.Zero(t, res.OOMEvents, "the plan fits: %s", strings.Join(log, "\n"))
}

// TestTrainBF16: the GPT trains under bf16 autocast on the CPU (the
// seed's --mixed_precision). The conditioning encoder's norms take a
// convolution's bf16 output with float32 parameters, which libtorch 1.13's
// kernels refused until nn's norms learned the casts.
func TestTrainBF16(t *testing.T) {
	cfg := gptConfig(t, t.TempDir())
	cfg.Precision, cfg.MaxSteps, cfg.CheckpointDir = "bf16", 2, ""
	res, err := Train(context.Background(), cfg)
	require.NoError(t, err)
	require.Equal(t, 2, res.Steps)
}

// TestMemoryTest: each size trains for the duration and is measured; a
// size over the cap is marked OOM and is not a failure; a batch larger
// than the corpus is a failure, not an endless wait.
func TestMemoryTest(t *testing.T) {
	cfg := gptConfig(t, t.TempDir())
	cfg.Accum = 1
	res, err := RunMemoryTest(context.Background(), cfg, []int{1, 2}, 300*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, res.Failed())
	require.Len(t, res.Rows, 2)
	for _, r := range res.Rows {
		require.False(t, r.OOM)
		require.Positive(t, r.Steps)
		require.Positive(t, r.SamplesPerSec)
	}

	// One step per size (the same first batch each time) for peaks that
	// do not depend on how many batches the machine's speed allowed.
	res, err = RunMemoryTest(context.Background(), cfg, []int{1, 4}, time.Nanosecond)
	require.NoError(t, err)
	p1, p4 := res.Rows[0].PeakAllocated, res.Rows[1].PeakAllocated
	require.Less(t, p1, p4)
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, (p1+p4)/2))
	defer torch.SetMemoryLimit(torch.CPU, 0)
	res, err = RunMemoryTest(context.Background(), cfg, []int{1, 4}, time.Nanosecond)
	require.NoError(t, err)
	var b bytes.Buffer
	res.Table(&b)
	t.Log("\n" + b.String())
	require.NoError(t, res.Failed(), "running out of memory is a finding, not a failure")
	require.False(t, res.Rows[0].OOM, b.String())
	require.True(t, res.Rows[1].OOM, b.String())
	require.Regexp(t, `(?m)^\s+4\s.*yes$`, b.String())
	torch.SetMemoryLimit(torch.CPU, 0)

	// A batch size the data cannot fill ends the run by itself: had it
	// waited for a batch that never comes, the context would have ended
	// it (a check that does not depend on the machine's speed).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err = RunMemoryTest(ctx, cfg, []int{64}, time.Nanosecond)
	require.NoError(t, err)
	require.NoError(t, ctx.Err(), "no wait for a batch that never comes")
	require.ErrorContains(t, res.Failed(), "batch size 64")
	var ce *recipes.ConfigError
	require.ErrorAs(t, res.Failed(), &ce)
	require.False(t, res.Rows[0].OOM)
}

// TestBadInputs: the inputs a user gets wrong are user errors of their
// own types.
func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	notAudio := filepath.Join(dir, "a.wav")
	require.NoError(t, os.WriteFile(notAudio, []byte("not audio"), 0o644))
	short := filepath.Join(dir, "short.wav")
	require.NoError(t, audio.WriteWAV(short, make([]int16, SampleRate/10), SampleRate))
	long := filepath.Join(dir, "long.wav")
	require.NoError(t, audio.WriteWAV(long, audio.FloatToInt16(chirp()), SampleRate))
	for _, c := range []struct {
		name, path string
		ok         bool
	}{
		{"not audio", notAudio, false},
		{"0.1 s", short, false},
		{"missing", filepath.Join(dir, "none.wav"), false},
		{"0.5 s", long, true},
	} {
		x, err := ReadReference(c.path)
		if c.ok {
			require.NoError(t, err, c.name)
			require.Len(t, x, SampleRate/2)
			continue
		}
		var re *ReferenceError
		require.ErrorAs(t, err, &re, c.name)
		require.True(t, recipes.IsUserError(err), c.name)
	}
	for _, s := range []string{"", " ", "\n\t"} {
		err := CheckText(s)
		require.ErrorIs(t, err, ErrEmptyText)
		require.True(t, recipes.IsUserError(err))
	}
	require.NoError(t, CheckText("नाचता"))
	// Punctuation alone is text espeak-ng reads as nothing.
	_, err := Phonemes(context.Background(), "espeak-ng", "।")
	require.ErrorIs(t, err, ErrEmptyText)
}

// A crop length outside [2·Down, MaxCropFrames] (or not a multiple of
// Down) is a *recipes.ConfigError naming --crop-frames before anything is
// read: 1,000,000,000 frames asked train-codec for 320 GB a crop.
func TestCodecCropFramesBounded(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		frames int
		ok     bool
	}{
		{0, false}, {2, false}, {5, false}, {MaxCropFrames + Down, false}, {1_000_000_000, false},
		{2 * Down, true}, {64, true}, {MaxCropFrames, true},
	} {
		cfg := TrainConfig{
			Common: recipes.Common{Data: filepath.Join(dir, "none"), MicroBatch: 4, Accum: 1, Precision: "no", Device: torch.CPU,
				Epochs: 1, MaxSteps: 1, LR: 1e-3, CheckpointDir: filepath.Join(dir, "ck"), Seed: 1},
			CodecCfg: DefaultCodecConfig(), CropFrames: c.frames,
		}
		_, err := TrainCodec(context.Background(), cfg)
		require.Error(t, err, "%d frames", c.frames)
		require.True(t, recipes.IsUserError(err), "%d frames: %v", c.frames, err)
		var ce *recipes.ConfigError
		if c.ok {
			require.False(t, errors.As(err, &ce) && ce.Field == "crop-frames", "%d frames: %v", c.frames, err)
			continue
		}
		require.ErrorAs(t, err, &ce, "%d frames", c.frames)
		require.Equal(t, "crop-frames", ce.Field)
		require.NoDirExists(t, cfg.CheckpointDir)
	}
}

// TestPlanNeedBoundsTheRun: what --auto-batch's plan says a candidate
// needs bounds what training with it takes — the loader's batches
// (workers building ahead included) are in both — so a plan that fits the
// cap trains under it. Every epoch of the corpus is one pass of 4 steps.
func TestPlanNeedBoundsTheRun(t *testing.T) {
	var rows []memplan.Row
	for _, ckpt := range []bool{false, true} { // the plain runs fit: checkpointing is asked for to be measured
		cfg := gptConfig(t, t.TempDir())
		cfg.AutoBatch, cfg.DryRun, cfg.CheckpointDir, cfg.Workers, cfg.Prefetch = true, true, "", 1, 2
		cfg.GradCheckpointing = ckpt
		require.NoError(t, torch.SetMemoryLimit(torch.CPU, 1<<30))
		res, err := Train(context.Background(), cfg)
		require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0))
		require.NoError(t, err)
		require.NotNil(t, res.Planned)
		rows = append(rows, res.Planned.Rows...)
	}
	runs := 0
	for _, r := range rows {
		if r.Err != nil || r.MicroBatch*r.Accum != 8 {
			continue
		}
		cfg := gptConfig(t, t.TempDir())
		cfg.MicroBatch, cfg.Accum, cfg.GradCheckpointing = r.MicroBatch, r.Accum, r.Checkpointing
		cfg.MaxSteps, cfg.CheckpointDir, cfg.Workers, cfg.Prefetch = 4, "", 1, 2
		torch.CollectGarbage() // the peak is the process's: earlier tests' garbage goes first
		got, err := Train(context.Background(), cfg)
		require.NoError(t, err)
		t.Logf("%v: planned %s, trained %s", r.Candidate, torch.FormatBytes(r.Need()), torch.FormatBytes(got.PeakMemory))
		require.LessOrEqual(t, got.PeakMemory, r.Need(), "%v", r.Candidate)
		runs++
	}
	require.GreaterOrEqual(t, runs, 8, "the plans measured micro-batches 1, 2, 4 and 8, each with and without checkpointing")
}
