package main

import (
	"bytes"
	"crypto/sha256"
	binenc "encoding/binary"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/audio"
)

// pending names the campaign's cases that fail today (none); they are
// skipped. TORCHFIT_CAMPAIGN_ALL=1 runs them too.
var pending = map[string]bool{}

// TestBadInputCampaign (issue 24, "Done when") runs the binary on bad
// input over every verb of the CLI: each case must exit with status 2,
// print exactly one line on stderr (no Go or C++ trace) and change
// nothing under the campaign's directory — names, sizes, modification
// times and contents are compared before and after, so an output the
// case names is not created either. Every verb, found in the app itself,
// has cases. The commands run in that directory, so their default
// relative paths (data/asr, checkpoints/...) land where they are seen.
func TestBadInputCampaign(t *testing.T) {
	bin := binary(t)
	root := t.TempDir()
	p := func(rel ...string) string { return filepath.Join(append([]string{root}, rel...)...) }
	ok := func(args ...string) string {
		t.Helper()
		r := runCLIIn(t, root, bin, args...)
		require.Zero(t, r.code, "%v\n%s%s", args, r.stdout, r.stderr)
		return r.stdout
	}
	write := func(rel string, data []byte) string {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(p(rel)), 0o755))
		require.NoError(t, os.WriteFile(p(rel), data, 0o644))
		return p(rel)
	}

	// Fixtures: each recipe's tiny data set made by its data verb, and a
	// one-step checkpoint of each.
	require.NoError(t, os.WriteFile(p("text.txt"), bytes.Repeat([]byte("In the beginning God created the heaven and the earth.\n"), 300), 0o644))
	ok("asr", "data", "--out", p("asr"), "--utterances", "12", "--workers", "2")
	ok("clip", "data", "--out", p("cars"), "--images", "20", "--workers", "1")
	ok("ganvit", "data", "--out", p("gv"), "--clips", "40", "--seconds", "1", "--workers", "2")
	ok("mamba", "data", "--out", p("kjv"), "--text", p("text.txt"))
	ok("tts", "data", "--out", p("tts"), "--utterances", "24")
	asrTiny := []string{"--preset", "tiny", "--d-model", "48", "--encoder-layers", "1", "--decoder-layers", "1", "--batch-size", "2",
		"--grad-accum", "1", "--device", "cpu", "--valid-limit", "1", "--workers", "0", "--warmup", "1", "--threads", "1"}
	asrCk := checkpointOf(t, ok(append([]string{"asr", "train", "--data", p("asr"), "--max-steps", "1", "--checkpoint-dir", p("ck", "asr")}, asrTiny...)...))
	clipCk := checkpointOf(t, ok("clip", "train", "--data", p("cars"), "--max-steps", "1", "--checkpoint-dir", p("ck", "clip"), "--device", "cpu",
		"--batch-size", "4", "--grad-accum", "1", "--threads", "1", "--valid-limit", "1"))
	gvSmall := []string{"--device", "cpu", "--preset", "cpu", "--n-mels", "16", "--frames", "44", "--vit", "tiny", "--gan-batch-size", "4", "--batch-size", "4"}
	gvCk := checkpointOf(t, ok(append([]string{"ganvit", "train", "--data", p("gv"), "--gan-epochs", "1", "--epochs", "1", "--max-steps", "1",
		"--num-synthetic", "4", "--checkpoint-dir", p("ck", "gv")}, gvSmall...)...))
	mambaTiny := []string{"--model-size", "tiny", "--d-model", "32", "--n-layers", "1", "--max-seq-len", "32", "--batch-size", "2", "--device", "cpu"}
	mambaCk := checkpointOf(t, ok(append([]string{"mamba", "train", "--data", p("kjv"), "--max-steps", "1", "--checkpoint-dir", p("ck", "mamba")}, mambaTiny...)...))
	codecCk := checkpointOf(t, ok("tts", "train-codec", "--data", p("tts"), "--max-steps", "1", "--channels", "16", "--codes", "32", "--code-dim", "8",
		"--batch-size", "4", "--crop-frames", "32", "--checkpoint-dir", p("ck", "codec"), "--threads", "1"))
	ttsTiny := []string{"--decoder-dim", "32", "--text-encoder-dim", "16", "--layers", "1", "--heads", "2", "--cond-latents", "4", "--threads", "1"}
	ttsCk := checkpointOf(t, ok(append([]string{"tts", "train", "--data", p("tts"), "--codec", codecCk, "--max-steps", "1", "--batch-size", "2",
		"--grad-accum", "1", "--checkpoint-dir", p("ck", "tts")}, ttsTiny...)...))

	// Bad files.
	raw, err := os.ReadFile(asrCk)
	require.NoError(t, err)
	truncated := write("bad/truncated.pt", raw[:len(raw)/2])
	garbagePt := write("bad/garbage.pt", []byte("these are notes, not a checkpoint\n"))
	badJSON := write("bad/bad.json", []byte(`{"lr": 0.1,`))
	unknownKey := write("bad/unknown.json", []byte(`{"batch_sise": 2}`))
	wrongType := write("bad/wrongtype.yaml", []byte("batch_size: four\n"))
	aDir := p("bad", "adir")
	require.NoError(t, os.MkdirAll(aDir, 0o755))
	notes := write("bad/notes.txt", []byte("just some notes\n"))
	goodWAV := write("wav/good.wav", audio.EncodeWAV(make([]int16, 16000), 16000))
	wav7 := audio.EncodeWAV(make([]int16, 16000), 16000)
	binenc.LittleEndian.PutUint16(wav7[34:], 7) // bits per sample
	bits7 := write("wav/bits7.wav", wav7)
	metrics := write("metrics.jsonl", []byte(`{"step":1,"loss":2.5,"micro_batch":2,"samples":4}`+"\n"+`{"step":2,"loss":2.0,"micro_batch":2,"samples":4}`+"\n"))
	garbageMetrics := write("bad/garbage.jsonl", []byte("{not json\n"))
	existingWAV := write("wav/out.wav", audio.EncodeWAV(make([]int16, 8000), 16000))
	mambaSeed, err := os.ReadFile(filepath.Join("..", "..", "recipes", "mamba", "testdata", "config_16gb_safe.json"))
	require.NoError(t, err)
	layers := write("bad/layers.json", bytes.Replace(mambaSeed, []byte(`"n_layers": 8,`), []byte(`"n_layers": 100000000,`), 1))
	// A copy of the cars set whose images all claim 60000×60000 pixels.
	require.NoError(t, os.CopyFS(p("hugepng"), os.DirFS(p("cars"))))
	huge := hugePNG(60000, 60000)
	require.NoError(t, filepath.WalkDir(p("hugepng"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".png") {
			err = os.WriteFile(path, huge, 0o644)
		}
		return err
	}))

	ckAsrDir := filepath.Dir(asrCk)
	newCk := p("newck") // a checkpoint directory no case may create
	asrTrain := func(extra ...string) []string {
		return append(append([]string{"asr", "train", "--data", p("asr"), "--max-steps", "1", "--checkpoint-dir", newCk}, asrTiny...), extra...)
	}
	clipTrain := func(verb string, extra ...string) []string {
		return append([]string{"clip", verb, "--data", p("cars"), "--max-steps", "1", "--checkpoint-dir", newCk, "--device", "cpu",
			"--batch-size", "4", "--grad-accum", "1", "--threads", "1", "--valid-limit", "1"}, extra...)
	}
	gvTrain := func(extra ...string) []string {
		return append(append([]string{"ganvit", "train", "--data", p("gv"), "--gan-epochs", "1", "--epochs", "1", "--max-steps", "1",
			"--num-synthetic", "4", "--checkpoint-dir", newCk}, gvSmall...), extra...)
	}
	gvMem := func(extra ...string) []string {
		return append(append([]string{"ganvit", "test-memory"}, gvSmall...), extra...)
	}
	mambaTrain := func(extra ...string) []string {
		return append(append([]string{"mamba", "train", "--data", p("kjv"), "--max-steps", "1", "--checkpoint-dir", newCk}, mambaTiny...), extra...)
	}
	codecTrain := func(extra ...string) []string {
		return append([]string{"tts", "train-codec", "--data", p("tts"), "--max-steps", "1", "--channels", "16", "--codes", "32", "--code-dim", "8",
			"--batch-size", "4", "--crop-frames", "32", "--checkpoint-dir", newCk, "--threads", "1"}, extra...)
	}
	ttsTrain := func(extra ...string) []string {
		return append(append([]string{"tts", "train", "--data", p("tts"), "--codec", codecCk, "--max-steps", "1", "--batch-size", "2",
			"--grad-accum", "1", "--checkpoint-dir", newCk}, ttsTiny...), extra...)
	}
	say := func(extra ...string) []string {
		return append([]string{"tts", "say", "--checkpoint", ttsCk, "--text", "नमस्कार", "--speaker", goodWAV, "--out", p("said.wav"),
			"--max-codes", "5", "--griffin-lim-iters", "1", "--device", "cpu"}, extra...)
	}
	ttsEval := func(extra ...string) []string {
		return append([]string{"tts", "eval", "--checkpoint", ttsCk, "--asr", asrCk, "--data", p("tts"), "--limit", "1", "--out", p("evalout"),
			"--max-codes", "5", "--griffin-lim-iters", "1", "--device", "cpu"}, extra...)
	}
	memTest := func(extra ...string) []string {
		return append(append([]string{"tts", "memory-test", "--data", p("tts"), "--codec", codecCk, "--batch-sizes", "1", "--duration", "0.1"}, ttsTiny...), extra...)
	}
	demo := func(extra ...string) []string {
		return append([]string{"demo", "--dir", p("demo"), "--utterances", "12", "--max-steps", "1"}, extra...)
	}
	launch := func(extra ...string) []string {
		return append([]string{"launch", "--nproc", "1"}, extra...)
	}
	mon := func(extra ...string) []string {
		return append([]string{"monitor", "--nvml-library", "/nonexistent/libnvidia-ml.so.1", "--no-live"}, extra...)
	}

	type campaignCase struct {
		name string
		args []string
		want string // in the one line, when the reason is known
	}
	cases := []campaignCase{
		// asr data
		{"asr data utterances 0", []string{"asr", "data", "--out", p("o"), "--utterances", "0"}, ""},
		{"asr data utterances absurd", []string{"asr", "data", "--out", p("o"), "--utterances", "1000000000"}, ""},
		{"asr data existing set", []string{"asr", "data", "--out", p("asr"), "--utterances", "4"}, "already holds a data set"},
		{"asr data extra arg", []string{"asr", "data", "--out", p("o"), "--utterances", "4", "extra"}, "takes no arguments"},
		{"asr data workers negative", []string{"asr", "data", "--out", p("o"), "--utterances", "4", "--workers", "-1"}, ""},

		// asr train
		{"asr train lr 1e-320", asrTrain("--lr", "1e-320"), ""},
		{"asr train precision fp7", asrTrain("--mixed-precision", "fp7"), ""},
		{"asr train unknown config key", asrTrain("--config", unknownKey), `unknown setting "batch_sise"`},
		{"asr train device tpu", asrTrain("--device", "tpu"), ""},
		{"asr train garbage JSON", asrTrain("--config", badJSON), ""},
		{"asr train resume truncated", asrTrain("--resume", truncated), ""},
		{"asr train resume of clip", asrTrain("--resume", clipCk), ""},
		{"asr train resume contradicts d-model", asrTrain("--resume", asrCk, "--d-model", "64", "--max-steps", "2"), ""},
		{"asr train memory-limit 1KiB", asrTrain("--memory-limit", "1KiB"), ""},
		{"asr train memory-fraction 2", asrTrain("--memory-fraction", "2"), ""},
		{"asr train data is a file", asrTrain("--data", notes), ""},
		{"asr train existing checkpoints", asrTrain("--checkpoint-dir", ckAsrDir), "written by another run"},
		{"asr train odd d-model", asrTrain("--d-model", "97"), "--d-model 97"},
		{"asr train CUDA cache on the CPU", asrTrain("--empty-cache-every", "5"), "empties the CUDA cache"},
		{"asr train bucket size in one process", asrTrain("--bucket-mb", "50"), "--bucket-mb"},
		{"asr train metrics onto a checkpoint", asrTrain("--metrics", asrCk), "something else than JSONL metrics"},
		{"asr train unknown flag", asrTrain("--learning-rat", "0.1"), "flag provided but not defined"},
		{"asr train extra arg", asrTrain("extra"), ""},

		// asr plan
		{"asr plan vram 10gb", []string{"asr", "plan", "--data", p("asr"), "--vram", "10gb"}, ""},
		{"asr plan memory-limit 1KiB", []string{"asr", "plan", "--data", p("asr"), "--memory-limit", "1KiB", "--device", "cpu"}, ""},
		{"asr plan missing data", []string{"asr", "plan", "--data", p("none"), "--memory-limit", "1GiB", "--device", "cpu"}, ""},
		{"asr plan no budget", []string{"asr", "plan", "--data", p("asr"), "--device", "cpu"}, "planning needs a budget"},

		// asr eval
		{"asr eval no checkpoint", []string{"asr", "eval", "--data", p("asr")}, ""},
		{"asr eval missing checkpoint", []string{"asr", "eval", "--checkpoint", p("none.pt"), "--data", p("asr")}, ""},
		{"asr eval checkpoint of mamba", []string{"asr", "eval", "--checkpoint", mambaCk, "--data", p("asr")}, ""},
		{"asr eval data is a file", []string{"asr", "eval", "--checkpoint", asrCk, "--data", notes, "--device", "cpu"}, ""},

		// asr transcribe
		{"asr transcribe no files", []string{"asr", "transcribe", "--checkpoint", asrCk, "--device", "cpu"}, ""},
		{"asr transcribe 7-bit WAV", []string{"asr", "transcribe", "--checkpoint", asrCk, "--device", "cpu", bits7}, ""},
		{"asr transcribe garbage checkpoint", []string{"asr", "transcribe", "--checkpoint", garbagePt, "--device", "cpu", goodWAV}, ""},
		{"asr transcribe checkpoint of tts", []string{"asr", "transcribe", "--checkpoint", ttsCk, "--device", "cpu", goodWAV}, "is a torchfit tts checkpoint, not an ASR one"},

		// asr memory-table
		{"asr memory-table unknown preset", []string{"asr", "memory-table", "--data", p("asr"), "--preset", "huge", "--device", "cpu"}, ""},
		{"asr memory-table missing data", []string{"asr", "memory-table", "--data", p("none"), "--device", "cpu", "--preset", "tiny"}, ""},
		{"asr memory-table extra arg", []string{"asr", "memory-table", "--data", p("asr"), "--preset", "tiny", "--device", "cpu", "extra"}, "takes no arguments"},

		// asr data
		{"asr data workers absurd", []string{"asr", "data", "--out", p("o"), "--utterances", "4", "--workers", "1000000000000"}, "--workers 1000000000000: must be at most"},

		// clip data
		{"clip data workers absurd", []string{"clip", "data", "--out", p("o"), "--images", "20", "--workers", "1000000000000"}, "--workers 1000000000000: must be in [0, "},
		{"clip data size 0", []string{"clip", "data", "--out", p("o"), "--images", "20", "--size", "0"}, ""},
		{"clip data existing set", []string{"clip", "data", "--out", p("cars"), "--images", "20"}, "already holds a data set"},
		{"clip data workers negative", []string{"clip", "data", "--out", p("o"), "--images", "20", "--workers", "-1"}, ""},

		// clip pretrain
		{"clip pretrain lr NaN", clipTrain("pretrain", "--lr", "NaN"), ""},
		{"clip pretrain init truncated", clipTrain("pretrain", "--init", truncated), ""},
		{"clip pretrain extra arg", clipTrain("pretrain", "extra"), ""},

		// clip train
		{"clip train PNG of 60000x60000", clipTrain("train", "--data", p("hugepng")), ""},
		{"clip train init of asr", clipTrain("train", "--init", asrCk), ""},
		{"clip train resume truncated", clipTrain("train", "--resume", truncated), ""},
		{"clip train init and resume", clipTrain("train", "--init", clipCk, "--resume", clipCk), ""},
		{"clip train existing checkpoints", clipTrain("train", "--checkpoint-dir", filepath.Dir(clipCk)), "written by another run"},
		{"clip train dry-run", clipTrain("train", "--dry-run"), "--dry-run"},
		{"clip train weight decay 1e300", clipTrain("train", "--weight-decay", "1e300"), "--weight-decay 1e+300: with --lr"},

		// clip eval
		{"clip eval batch 0", []string{"clip", "eval", "--checkpoint", clipCk, "--data", p("cars"), "--batch-size", "0", "--device", "cpu"}, ""},
		{"clip eval batch negative", []string{"clip", "eval", "--checkpoint", clipCk, "--data", p("cars"), "--batch-size", "-4", "--device", "cpu"}, ""},
		{"clip eval batch absurd", []string{"clip", "eval", "--checkpoint", clipCk, "--data", p("cars"), "--batch-size", "1000000000000", "--device", "cpu"}, "--batch-size 1000000000000: must be at most"},
		{"clip eval PNG of 60000x60000", []string{"clip", "eval", "--checkpoint", clipCk, "--data", p("hugepng"), "--device", "cpu"}, ""},
		{"clip eval checkpoint of asr", []string{"clip", "eval", "--checkpoint", asrCk, "--data", p("cars"), "--device", "cpu"}, ""},

		// clip measure
		{"clip measure bad layouts", []string{"clip", "measure", "--device", "cpu", "--layouts", "exact:16"}, ""},
		{"clip measure steps 0", []string{"clip", "measure", "--device", "cpu", "--steps", "0"}, ""},
		{"clip measure steps absurd", []string{"clip", "measure", "--device", "cpu", "--steps", "1000000000000"}, "--steps 1000000000000: must be at most"},
		{"clip measure threads negative", []string{"clip", "measure", "--device", "cpu", "--threads", "-1"}, "--threads -1: must be at least 0"},
		{"clip measure threads absurd", []string{"clip", "measure", "--device", "cpu", "--threads", "1000000000000"}, "--threads 1000000000000: must be at most"},

		// ganvit data
		{"ganvit data clips 0", []string{"ganvit", "data", "--out", p("o"), "--clips", "0"}, ""},
		{"ganvit data seconds 0", []string{"ganvit", "data", "--out", p("o"), "--clips", "4", "--seconds", "0"}, ""},
		{"ganvit data existing set", []string{"ganvit", "data", "--out", p("gv"), "--clips", "4"}, "already holds a data set"},
		{"ganvit data workers negative", []string{"ganvit", "data", "--out", p("o"), "--clips", "4", "--workers", "-1"}, "--workers -1"},

		// ganvit train
		{"ganvit train unknown stage", gvTrain("--stage", "both"), ""},
		{"ganvit train keep-last -2", gvTrain("--keep-last", "-2"), ""},
		{"ganvit train keep-last 0", gvTrain("--keep-last", "0"), "--keep-last 0: must be at least 1, or -1 (all)"},
		{"ganvit train gan-epochs absurd", gvTrain("--gan-epochs", "1000000000000"), "--gan-epochs 1000000000000: must be at most"},
		{"ganvit train mels under the discriminator's halvings", gvTrain("--n-mels", "8"), "--n-mels 8"},
		{"ganvit train resume of asr", gvTrain("--resume", asrCk), ""},
		{"ganvit train classifier stage gan of mamba", gvTrain("--stage", "classifier", "--gan", mambaCk), ""},

		// ganvit eval
		{"ganvit eval generated absurd", []string{"ganvit", "eval", "--checkpoint", gvCk, "--data", p("gv"), "--generated", "1000000000", "--device", "cpu"}, ""},
		{"ganvit eval batch absurd", []string{"ganvit", "eval", "--checkpoint", gvCk, "--data", p("gv"), "--batch-size", "1000000000", "--device", "cpu"}, ""},
		{"ganvit eval n-mels negative", []string{"ganvit", "eval", "--checkpoint", gvCk, "--data", p("gv"), "--n-mels", "-1", "--device", "cpu"}, "--n-mels -1: must be at least 0"},
		{"ganvit eval frames negative", []string{"ganvit", "eval", "--checkpoint", gvCk, "--data", p("gv"), "--frames", "-1", "--device", "cpu"}, "--frames -1: must be at least 0"},
		{"ganvit eval checkpoint of mamba", []string{"ganvit", "eval", "--checkpoint", mambaCk, "--data", p("gv"), "--device", "cpu"}, ""},
		{"ganvit eval missing classifier", []string{"ganvit", "eval", "--checkpoint", gvCk, "--data", p("gv"), "--classifier", p("none.pt"), "--device", "cpu"}, ""},

		// ganvit test-memory
		{"ganvit test-memory memory-limit 1KiB", gvMem("--memory-limit", "1KiB"), ""},
		{"ganvit test-memory unknown vit", gvMem("--vit", "huge"), ""},
		{"ganvit test-memory batch 0", gvMem("--batch-size", "0"), ""},

		// ganvit memory-table
		{"ganvit memory-table vram 10gb", []string{"ganvit", "memory-table", "--data", p("gv"), "--vram", "10gb", "--device", "cpu"}, ""},
		// With the small model (the fixture's clips fit it), so that --clips
		// itself is what is refused.
		{"ganvit memory-table clips negative", append([]string{"ganvit", "memory-table", "--data", p("gv"), "--clips", "-1"}, gvSmall...), "--clips -1: must be at least 0"},
		{"ganvit memory-table batch-size 0", append(append([]string{"ganvit", "memory-table", "--data", p("gv")}, gvSmall...), "--batch-size", "0"), "--micro-batch 0: must be in [1, "},

		// mamba data
		{"mamba data workers negative", []string{"mamba", "data", "--out", p("o"), "--text", p("text.txt"), "--workers", "-1"}, "--workers -1: must be in [0, "},
		{"mamba data workers absurd", []string{"mamba", "data", "--out", p("o"), "--text", p("text.txt"), "--workers", "1000000000000"}, "--workers 1000000000000: must be in [0, "},
		{"mamba data valid-fraction 0", []string{"mamba", "data", "--out", p("o"), "--text", p("text.txt"), "--valid-fraction", "0"}, ""},
		{"mamba data missing text", []string{"mamba", "data", "--out", p("o"), "--text", p("none.txt")}, ""},
		{"mamba data existing corpus", []string{"mamba", "data", "--out", p("kjv"), "--text", p("text.txt")}, ""},

		// mamba train
		{"mamba train d-model 1000000", mambaTrain("--d-model", "1000000"), ""},
		// Without the tiny model's flags: the command line would win over the file.
		{"mamba train n_layers 100000000 in a config", []string{"mamba", "train", "--data", p("kjv"), "--max-steps", "1", "--checkpoint-dir", newCk, "--config", layers}, "n_layers 100000000"},
		{"mamba train unknown scan", mambaTrain("--scan", "fast"), ""},
		{"mamba train weight decay 1e300", mambaTrain("--weight-decay", "1e300"), "--weight-decay 1e+300: with --lr"},
		{"mamba train CPU offload on the CPU", mambaTrain("--use_cpu_offload"), "this run's device is the CPU"},
		{"mamba train resume of ganvit", mambaTrain("--resume", gvCk), ""},
		{"mamba train existing checkpoints", mambaTrain("--checkpoint-dir", filepath.Dir(mambaCk)), "written by another run"},

		// mamba eval
		{"mamba eval checkpoint of tts", []string{"mamba", "eval", "--checkpoint", ttsCk, "--data", p("kjv"), "--device", "cpu"}, ""},
		{"mamba eval precision fp16", []string{"mamba", "eval", "--checkpoint", mambaCk, "--data", p("kjv"), "--mixed-precision", "fp7", "--device", "cpu"}, ""},
		{"mamba eval max-seq-len absurd", []string{"mamba", "eval", "--checkpoint", mambaCk, "--data", p("kjv"), "--max-seq-len", "1000000000", "--device", "cpu"}, ""},

		// mamba generate
		{"mamba generate temperature 1e-320", []string{"mamba", "generate", "--checkpoint", mambaCk, "--prompt", "In the", "--temperature", "1e-320", "--max-new-tokens", "2", "--device", "cpu"}, ""},
		{"mamba generate temperature negative", []string{"mamba", "generate", "--checkpoint", mambaCk, "--prompt", "In the", "--temperature", "-1", "--device", "cpu"}, ""},
		{"mamba generate checkpoint of asr", []string{"mamba", "generate", "--checkpoint", asrCk, "--prompt", "In the", "--device", "cpu"}, ""},

		// mamba estimate
		{"mamba estimate garbage JSON", []string{"mamba", "estimate", "--config", badJSON}, ""},
		{"mamba estimate extra arg", []string{"mamba", "estimate", "extra"}, ""},

		// tts data
		{"tts data utterances 0", []string{"tts", "data", "--out", p("o"), "--utterances", "0"}, ""},
		{"tts data existing set", []string{"tts", "data", "--out", p("tts"), "--utterances", "8"}, "already holds a data set"},
		{"tts data splits empty", []string{"tts", "data", "--out", p("o"), "--utterances", "3"}, "--utterances 3"},
		{"tts data out is a file", []string{"tts", "data", "--out", notes, "--utterances", "8"}, ""},

		// tts train-codec
		{"tts train-codec crop-frames absurd", codecTrain("--crop-frames", "1000000000"), ""},
		{"tts train-codec codes 0", codecTrain("--codes", "0"), ""},
		{"tts train-codec resume of tts gpt", codecTrain("--resume", ttsCk), ""},
		{"tts train-codec data batch contradicts", codecTrain("--data-batch-size", "3"), ""},

		// tts train
		{"tts train no codec", []string{"tts", "train", "--data", p("tts"), "--max-steps", "1", "--checkpoint-dir", newCk}, ""},
		{"tts train codec of asr", ttsTrain("--codec", asrCk), ""},
		{"tts train config of wrong type", ttsTrain("--config", wrongType), "must be an integer"},
		{"tts train heads do not divide width", ttsTrain("--heads", "3"), ""},
		{"tts train reference unknown", ttsTrain("--reference", "other"), ""},
		{"tts train vram", ttsTrain("--vram", "8gb"), "no settings per GPU size"},
		{"tts train memory cleanup on the CPU", ttsTrain("--memory-cleanup", "--device", "cpu"), "empties the CUDA cache"},

		// tts say
		{"tts say empty text", say("--text", ""), ""},
		{"tts say top-p 2", say("--top-p", "2"), ""},
		{"tts say repetition penalty negative", say("--repetition-penalty", "-1"), ""},
		{"tts say repetition penalty NaN", say("--repetition-penalty", "NaN"), ""},
		{"tts say candidates negative", say("--candidates", "-1"), ""},
		{"tts say candidates absurd", say("--candidates", "100000"), ""},
		{"tts say 7-bit speaker", say("--speaker", bits7), ""},
		{"tts say existing out untouched on bad text", say("--out", existingWAV, "--text", " "), ""},
		{"tts say out onto the speaker", say("--out", goodWAV), "is the --speaker file"},

		// tts eval
		{"tts eval no asr", []string{"tts", "eval", "--checkpoint", ttsCk, "--data", p("tts"), "--out", p("evalout")}, ""},
		{"tts eval asr of clip", ttsEval("--asr", clipCk), ""},
		{"tts eval limit negative", ttsEval("--limit", "-1"), ""},
		{"tts eval out is a file", ttsEval("--out", notes), ""},
		{"tts eval griffin-lim-iters 0", ttsEval("--griffin-lim-iters", "0"), "--griffin-lim-iters 0: must be in [1, 1000]"},
		{"tts eval griffin-lim-iters absurd", ttsEval("--griffin-lim-iters", "1000000000000"), "must be in [1, 1000]"},
		{"tts eval top-p 2", ttsEval("--top-p", "2"), "--top-p 2: must be in [0, 1]"},

		// tts memory-test
		{"tts memory-test bad sizes", memTest("--batch-sizes", "2,x"), ""},
		{"tts memory-test duration negative", memTest("--duration", "-1"), ""},
		{"tts memory-test metrics", memTest("--metrics", p("m.jsonl")), "--metrics"},
		{"tts memory-test layers 0", memTest("--layers", "0"), "0 layers outside [1, 256]"},
		{"tts memory-test dropout negative", memTest("--dropout", "-1"), "dropout -1 outside [0, 1)"},

		// demo
		{"demo utterances 0", demo("--utterances", "0"), ""},
		{"demo epochs 0", demo("--epochs", "0"), ""},
		{"demo precision fp7", demo("--mixed-precision", "fp7"), ""},
		{"demo dir is a file", []string{"demo", "--dir", notes, "--utterances", "12", "--max-steps", "1"}, ""},
		{"demo extra arg", demo("extra"), ""},

		// launch
		{"launch nnodes 0", launch("--nnodes", "0", "--", "asr", "train"), ""},
		{"launch grace negative", launch("--grace", "-1s", "--", "asr", "train"), ""},
		{"launch nproc 0", []string{"launch", "--nproc", "0", "--", "asr", "train"}, ""},
		{"launch no command", launch(), ""},
		{"launch node-rank beyond nnodes", launch("--node-rank", "1", "--", "asr", "train"), ""},
		{"launch master-port 70000", launch("--master-port", "70000", "--", "asr", "train"), ""},
		{"launch a rank's bad flag", launch("--", "asr", "train", "--data", p("asr"), "--lr", "NaN", "--checkpoint-dir", newCk), ""},

		// memory
		{"memory device tpu", []string{"memory", "--device", "tpu"}, ""},
		{"memory device cuda:7", []string{"memory", "--device", "cuda:7"}, ""},

		// plot
		{"plot no metrics", []string{"plot", "--out", p("o.png")}, ""},
		{"plot missing metrics", []string{"plot", "--metrics", p("none.jsonl"), "--out", p("o.png")}, ""},
		{"plot garbage metrics", []string{"plot", "--metrics", garbageMetrics}, ""},
		{"plot out is the metrics", []string{"plot", "--metrics", metrics, "--out", metrics}, ""},

		// convert
		{"convert one argument", []string{"convert", truncated}, ""},
		{"convert truncated checkpoint", []string{"convert", truncated, p("o.safetensors")}, ""},
		{"convert notes", []string{"convert", garbagePt, p("o.safetensors")}, ""},
		{"convert missing input", []string{"convert", p("none.pt"), p("o.safetensors")}, ""},
		{"convert onto its input", []string{"convert", asrCk, asrCk}, ""},
		{"convert onto notes", []string{"convert", asrCk, notes}, ""},

		// monitor
		{"monitor interval 0", mon("--interval", "0", "--duration", "1"), ""},
		{"monitor pid and command", mon("--pid", "1", "--", "true"), ""},
		{"monitor log-file in a missing directory", mon("--duration", "0.1", "--log-file="+p("none", "gpu.csv")), ""},

		// doctor, and the app itself
		{"doctor extra arg", []string{"doctor", "extra"}, ""},
		{"unknown command", []string{"train"}, ""},
		{"unknown verb", []string{"asr", "fit"}, ""},
	}

	// Every verb of the app has cases.
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.args[0]] = true
		if len(c.args) > 1 {
			covered[c.args[0]+" "+c.args[1]] = true
		}
	}
	for _, v := range campaignVerbs(newApp().Commands) {
		require.True(t, covered[v], "no case for %q", v)
	}
	require.GreaterOrEqual(t, len(cases), 100)

	names := map[string]bool{}
	for _, c := range cases {
		require.False(t, names[c.name], "case %q twice", c.name)
		names[c.name] = true
	}
	for name := range pending {
		require.True(t, names[name], "pending %q is no case", name)
	}
	runPending := os.Getenv("TORCHFIT_CAMPAIGN_ALL") == "1"
	hashes := map[string]fileHash{}
	before := snapshot(t, root, hashes)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if pending[c.name] && !runPending {
				t.Skip("issue 24: fixed on another branch")
			}
			r := runCLIIn(t, root, bin, c.args...)
			changed := diffSnapshots(before, snapshot(t, root, hashes))
			for _, s := range changed { // one case's fault is not the next one's
				if name, ok := strings.CutPrefix(s, "created "); ok {
					require.NoError(t, os.RemoveAll(filepath.Join(root, name)))
				}
			}
			before = snapshot(t, root, hashes)
			require.Equal(t, 2, r.code, "%s\n%s", r.stdout, r.stderr)
			requireOneLine(t, r.stderr, c.want)
			for _, s := range []string{"panic", "goroutine", "terminate called", "SIGSEGV", "Exception raised from"} {
				require.NotContains(t, r.stderr, s)
			}
			require.Empty(t, changed, "a refused command changed files")
		})
	}
}

// campaignVerbs lists the app's verbs: "RECIPE VERB" for a command with
// subcommands, else the command's name (help left out).
func campaignVerbs(cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		if c.Name == "help" {
			continue
		}
		if len(c.Subcommands) == 0 {
			out = append(out, c.Name)
		}
		for _, s := range c.Subcommands {
			if s.Name != "help" {
				out = append(out, c.Name+" "+s.Name)
			}
		}
	}
	return out
}

// fileState is what the campaign compares of a file or directory: a
// directory's existence (its own size and modification time change when
// a command makes and removes a temporary file in it, which leaves
// nothing behind), a file's size, modification time and content hash.
type fileState struct {
	dir   bool
	size  int64
	mtime time.Time
	hash  [sha256.Size]byte
}

// fileHash is a file's content hash and the status it was read with.
type fileHash struct {
	size         int64
	mtime, ctime time.Time
	ino          uint64
	hash         [sha256.Size]byte
}

// snapshot records every file and directory under root. A file is read
// and hashed again unless its size, modification time, inode and status
// change time (which any write moves, and which no program can set back)
// are those of its hash in hashes.
func snapshot(t *testing.T, root string, hashes map[string]fileHash) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			out[rel] = fileState{dir: true}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		s := fileState{size: info.Size(), mtime: info.ModTime()}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && info.Mode().IsRegular() {
			key := fileHash{size: info.Size(), mtime: info.ModTime(), ctime: time.Unix(st.Ctim.Unix()), ino: st.Ino}
			h, ok := hashes[path]
			if key.hash = h.hash; !ok || h != key {
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				key.hash = sha256.Sum256(b)
				hashes[path] = key
			}
			s.hash = key.hash
		}
		out[rel] = s
		return nil
	}))
	return out
}

// diffSnapshots names what was created, removed or changed.
func diffSnapshots(a, b map[string]fileState) []string {
	var out []string
	for k, s := range a {
		t, ok := b[k]
		switch {
		case !ok:
			out = append(out, "removed "+k)
		case s != t:
			out = append(out, "changed "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "created "+k)
		}
	}
	sort.Strings(out)
	return out
}

// hugePNG is a PNG whose header claims width × height RGB pixels, with a
// few bytes of image data.
func hugePNG(width, height uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(kind string, data []byte) {
		binenc.Write(&b, binenc.BigEndian, uint32(len(data)))
		crc := crc32.NewIEEE()
		crc.Write([]byte(kind))
		crc.Write(data)
		b.WriteString(kind)
		b.Write(data)
		binenc.Write(&b, binenc.BigEndian, crc.Sum32())
	}
	ihdr := make([]byte, 13)
	binenc.BigEndian.PutUint32(ihdr[0:], width)
	binenc.BigEndian.PutUint32(ihdr[4:], height)
	ihdr[8], ihdr[9] = 8, 2 // 8 bits, RGB
	chunk("IHDR", ihdr)
	chunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})
	chunk("IEND", nil)
	return b.Bytes()
}
