package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// binary builds the command once per test run.
func binary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "torchfit")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func TestUserErrorsExitTwoWithOneLine(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	badJSON := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(badJSON, []byte(`{"batch_size": 2,`), 0o644))
	unknownKey := filepath.Join(dir, "unknown.json")
	require.NoError(t, os.WriteFile(unknownKey, []byte(`{"batch_sise": 2}`), 0o644))
	notASR := filepath.Join(dir, "other.pt")
	require.NoError(t, ptfile.Save(notASR, ptfile.NewDict("step", int64(3))))
	wav22 := filepath.Join(dir, "x.wav")
	require.NoError(t, exec.Command("sox", "-n", "-r", "22050", "-c", "1", "-b", "16", wav22, "synth", "0.2", "sine", "440").Run())

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing data dir", []string{"asr", "train", "--data", filepath.Join(dir, "nope"), "--device", "cpu"}, "torchfit asr data"},
		{"bad config JSON", []string{"asr", "train", "--config", badJSON}, "not valid JSON"},
		{"unknown config key", []string{"asr", "train", "--config", unknownKey}, `unknown setting "batch_sise"`},
		{"unknown vram", []string{"asr", "train", "--vram", "10gb"}, "not a row of the guide's table"},
		{"unknown preset", []string{"asr", "train", "--preset", "huge"}, "unknown model preset"},
		{"bad memory limit", []string{"asr", "train", "--memory-limit", "lots"}, "bad memory size"},
		{"bad device", []string{"asr", "train", "--device", "tpu"}, "unknown device"},
		{"unknown flag", []string{"asr", "train", "--batchsize", "2"}, "flag provided but not defined"},
		{"bad flag value", []string{"asr", "train", "--batch-size", "two"}, "invalid value"},
		{"missing checkpoint", []string{"asr", "eval", "--checkpoint", filepath.Join(dir, "none.pt")}, "no such file"},
		{"not an ASR checkpoint", []string{"asr", "eval", "--checkpoint", notASR}, "not an ASR checkpoint"},
		{"wav of another sample rate", []string{"asr", "transcribe", "--checkpoint", notASR, wav22}, "not an ASR checkpoint"},
		{"plot without metrics", []string{"plot", "--metrics", filepath.Join(dir, "none.jsonl")}, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, string(out))
			require.Equal(t, 2, ee.ExitCode(), string(out))
			requireOneLine(t, string(out), c.want)
		})
	}
}

// requireOneLine checks that a failed command printed exactly one line, with
// want in it, and no panic trace.
func requireOneLine(t *testing.T, out, want string) {
	t.Helper()
	text := strings.TrimSpace(out)
	require.NotContains(t, text, "goroutine", "no panic trace")
	require.NotContains(t, text, "panic:")
	require.Len(t, strings.Split(text, "\n"), 1, "one line:\n%s", text)
	require.Contains(t, text, want)
	require.True(t, strings.HasPrefix(text, "torchfit: "), text)
}

// runInProcess runs the CLI in this process, as main does, and returns
// the exit status and what it printed on stderr.
func runInProcess(args ...string) (int, string) {
	var stderr strings.Builder
	code := exitStatus(run(newApp(), append([]string{"torchfit"}, args...)), &stderr)
	return code, stderr.String()
}

// TestBadHyperparametersExitTwoWithOneLine runs in-process (a process
// start loads libtorch, about a second on a loaded machine);
// TestBadTrainInputsWriteNothing checks the binary.
func TestBadHyperparametersExitTwoWithOneLine(t *testing.T) {
	// libtorch 2.4+ autocasts to float16 on the CPU: the next fault is the missing corpus.
	fp16CPU := "--mixed-precision"
	if amp.CPUFloat16() {
		fp16CPU = "torchfit asr data"
	}
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	nodata := filepath.Join(dir, "nodata")
	cases := []struct {
		name string
		args []string
		want string
	}{
		// Fault 3: invalid hyperparameters, before anything runs.
		{"negative lr", []string{"--lr", "-1"}, "--lr -1: must be a finite number > 0"},
		{"zero lr", []string{"--lr", "0"}, "--lr 0: must be a finite number > 0"},
		{"negative warmup", []string{"--warmup", "-1"}, "--warmup -1: must be at least 0"},
		{"negative clip-norm", []string{"--clip-norm", "-1"}, "--clip-norm -1"},
		{"zero epochs", []string{"--epochs", "0"}, "--epochs 0: must be at least 1"},
		{"zero batch", []string{"--batch-size", "0"}, "--micro-batch 0: must be at least 1"},
		{"huge batch", []string{"--batch-size", "100000000"}, "--micro-batch 100000000: must be at most 16777216"},
		{"zero grad-accum", []string{"--grad-accum", "0"}, "--grad-accum 0"},
		{"huge effective batch", []string{"--batch-size", "65536", "--grad-accum", "65536"}, "--grad-accum 65536: the effective batch"},
		{"negative workers", []string{"--workers", "-1"}, "--workers -1"},
		{"negative threads", []string{"--threads", "-1"}, "--threads -1"},
		{"negative checkpoint-every", []string{"--checkpoint-every", "-1"}, "--checkpoint-every -1"},
		{"negative memory-every", []string{"--memory-every", "-1"}, "--memory-every -1"},
		{"negative valid-limit", []string{"--valid-limit", "-1"}, "--valid-limit -1"},
		{"negative max-steps", []string{"--max-steps", "-1"}, "--max-steps -1"},
		{"negative empty-cache-every", []string{"--empty-cache-every", "-1"}, "--empty-cache-every -1"},
		{"negative d-model", []string{"--d-model", "-8"}, "--d-model -8"},
		{"absurd d-model", []string{"--d-model", "10000000"}, "--d-model 10000000: must be at most"},
		{"negative layers", []string{"--encoder-layers", "-1"}, "--encoder-layers -1"},
		{"max-nonfinite-steps", []string{"--max-nonfinite-steps", "-2"}, "--max-nonfinite-steps -2"},
		{"fp16 on the CPU", []string{"--mixed-precision", "fp16", "--device", "cpu"}, fp16CPU},

		// Fault 4: non-finite values, on the command line or in a config file.
		{"NaN lr", []string{"--lr", "NaN"}, "--lr NaN: must be a finite number"},
		{"inf lr", []string{"--lr", "inf"}, "--lr +Inf: must be a finite number"},
		{"-inf lr", []string{"--lr", "-Inf"}, "--lr -Inf: must be a finite number"},
		{"NaN clip-norm", []string{"--clip-norm", "nan"}, "--clip-norm NaN: must be a finite number"},
		{"NaN lr in JSON", []string{"--config", file("nan.json", `{"lr": "NaN"}`)}, "lr: must be a finite number, not NaN"},
		{"inf lr in JSON", []string{"--config", file("inf.json", `{"lr": 1e999}`)}, "lr: 1e999 is out of range"},
		{"NaN lr in YAML", []string{"--config", file("nan.yaml", "lr: .nan\n")}, "lr: must be a finite number, not .nan"},
		{"inf clip-norm in YAML", []string{"--config", file("inf.yml", "clip_norm: -.inf\n")}, "clip_norm: must be a finite number"},

		// Fault 5: numbers in config files.
		{"JSON 1000000 parses", []string{"--config", file("million.json", `{"batch-size": 1000000}`)}, "torchfit asr data"},
		{"JSON 1e6 parses", []string{"--config", file("e6.json", `{"batch-size": 1e6}`)}, "torchfit asr data"},
		{"JSON 1000000.0 parses", []string{"--config", file("f6.json", `{"batch_size": 1000000.0}`)}, "torchfit asr data"},
		{"JSON 1e8 is exact", []string{"--config", file("e8.json", `{"batch-size": 1e8}`)},
			"--config " + filepath.Join(dir, "e8.json") + ": micro-batch 100000000: must be at most 16777216"},
		{"JSON integers stay exact", []string{"--config", file("exact.json", `{"d-model": 65537}`)}, "d-model 65537: must be at most 65536"},
		{"JSON fraction for an int", []string{"--config", file("frac.json", `{"batch-size": 1.5}`)}, "batch-size: must be an integer, not 1.5"},
		{"JSON beyond int64", []string{"--config", file("big.json", `{"epochs": 1e30}`)}, "epochs: 1e30 is out of range"},
		{"JSON negative seed", []string{"--config", file("seed.json", `{"seed": -1}`)}, "seed: must not be negative"},
		{"JSON null", []string{"--config", file("null.json", `{"warmup": null}`)}, "warmup: has no value"},
		{"JSON list", []string{"--config", file("list.json", `{"warmup": [1]}`)}, "warmup: must be a single value"},
		{"JSON key twice", []string{"--config", file("twice.json", `{"warmup": 1, "warmup": 2}`)}, `"warmup" is set twice`},
		{"JSON two spellings", []string{"--config", file("spell.json", `{"grad-accum": 1, "grad_accum": 2}`)}, "set the same flag"},
		{"JSON trailing data", []string{"--config", file("trail.json", `{"warmup": 1} {}`)}, "not valid JSON"},
		{"JSON not an object", []string{"--config", file("arr.json", `[1]`)}, "not valid JSON"},
		{"YAML 1e6 parses", []string{"--config", file("e6.yaml", "batch-size: 1e6\n")}, "torchfit asr data"},
		{"YAML hex parses", []string{"--config", file("hex.yaml", "batch-size: 0x10\ngrad_accum: 1_0\nspec-augment: yes\n")}, "torchfit asr data"},
		{"YAML 1e8 is exact", []string{"--config", file("e8.yaml", "batch-size: 1e8\n")}, "micro-batch 100000000: must be at most 16777216"},
		{"YAML hex is exact", []string{"--config", file("hexbig.yml", "d-model: 0x10001\n")}, "d-model 65537"},
		{"YAML fraction for an int", []string{"--config", file("frac.yaml", "batch-size: 1.5\n")}, "batch-size: must be an integer, not 1.5"},
		{"YAML beyond int64", []string{"--config", file("big.yaml", "epochs: 99999999999999999999999\n")}, "epochs: 99999999999999999999999 is out of range"},
		{"YAML unknown key", []string{"--config", file("unknown.yaml", "batch_sise: 2\n")}, `unknown setting "batch_sise"`},
		{"YAML not a mapping", []string{"--config", file("list.yaml", "- 1\n")}, "want a mapping"},
		{"YAML syntax", []string{"--config", file("bad.yaml", "warmup: [1\n")}, "not valid YAML"},
		{"YAML bool for an int", []string{"--config", file("bool.yaml", "warmup: true\n")}, "warmup: must be an integer"},

		// Fault 6: memory limits.
		{"memory limit 1.5", []string{"--memory-limit", "1.5"}, "a fraction must be in (0, 1]; for 1.5 GiB write 1.5GiB"},
		{"memory limit nan", []string{"--memory-limit", "nan"}, "not a finite number"},
		{"memory limit inf", []string{"--memory-limit", "inf"}, "not a finite number"},
		{"memory limit 1e30", []string{"--memory-limit", "1e30"}, "too large"},
		{"memory limit in bytes too small", []string{"--memory-limit", "1024"}, "too small"},
		{"memory limit zero", []string{"--memory-limit", "0"}, "zero"},
		{"memory limit 1KiB", []string{"--memory-limit", "1KiB"}, "less than 1 MiB"},
		{"memory limit negative", []string{"--memory-limit", "-1GiB"}, "negative"},
		{"memory limit unit", []string{"--memory-limit", "6PB"}, `unknown unit "pb"`},
		{"memory limit in a config", []string{"--config", file("mem.yaml", "memory-limit: 1.5\n")}, "a fraction must be in (0, 1]"},
		{"memory limit good", []string{"--memory-limit", "1.5GiB"}, "torchfit asr data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"asr", "train", "--data", nodata, "--preset", "tiny", "--device", "cpu"}, c.args...)
			code, out := runInProcess(args...)
			require.Equal(t, 2, code, out)
			requireOneLine(t, out, c.want)
		})
	}
	t.Run("asr data --noise NaN", func(t *testing.T) {
		code, out := runInProcess("asr", "data", "--out", filepath.Join(dir, "corpus"), "--noise", "NaN")
		require.Equal(t, 2, code, out)
		requireOneLine(t, out, "--noise NaN: must be a finite number")
		require.NoDirExists(t, filepath.Join(dir, "corpus"))
	})
}

// TestBadTrainInputsWriteNothing runs the binary on a real (small) corpus:
// a bad learning rate must stop the run before it trains or writes a
// checkpoint, and a bad flag value is one line without the command's help.
func TestBadTrainInputsWriteNothing(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus")
	code, out := runCLI(t, bin, "asr", "data", "--out", corpus, "--utterances", "16", "--workers", "2").both()
	require.Equal(t, 0, code, out)
	cfg := filepath.Join(dir, "lr.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"lr": "NaN"}`), 0o644))
	for _, lr := range [][]string{{"--lr", "NaN"}, {"--lr", "-1"}, {"--config", cfg}} {
		ck := filepath.Join(dir, "ck")
		args := append([]string{"asr", "train", "--data", corpus, "--preset", "tiny", "--d-model", "32", "--encoder-layers", "1",
			"--device", "cpu", "--batch-size", "2", "--grad-accum", "1", "--max-steps", "2", "--checkpoint-every", "1",
			"--checkpoint-dir", ck, "--valid-limit", "2", "--workers", "0", "--warmup", "0"}, lr...)
		code, out := runCLI(t, bin, args...).both()
		require.Equal(t, 2, code, "%v: %s", lr, out)
		requireOneLine(t, out, "lr")
		require.NoDirExists(t, ck, "%v: no checkpoint", lr)
	}
	code, out = runCLI(t, bin, "asr", "train", "--data", corpus, "--batch-size", "1e6").both()
	require.Equal(t, 2, code, out)
	requireOneLine(t, out, `invalid value "1e6" for flag -batch-size`)
}

func TestPanicsBecomeOneLine(t *testing.T) {
	app := func(fn func()) *cli.App {
		return &cli.App{Name: "torchfit", ExitErrHandler: func(*cli.Context, error) {},
			Commands: []*cli.Command{{Name: "boom", Action: func(*cli.Context) error { fn(); return nil }}}}
	}
	var nilMap map[string]int
	cases := []struct {
		name string
		fn   func()
		code int
		want string
	}{
		{"string", func() { panic("nn: AdamW: group 0: negative lr -1") }, 1, "torchfit: internal error: nn: AdamW: group 0: negative lr -1"},
		{"error", func() { panic(errors.New("boom")) }, 1, "torchfit: internal error: boom"},
		{"runtime error", func() { nilMap["x"] = 1 }, 1, "torchfit: internal error: assignment to entry in nil map"},
		{"multi-line", func() { panic("first\nsecond") }, 1, "torchfit: internal error: first | second"},
		{"torch error", func() { torch.Zeros([]int64{2}).Matmul(torch.Zeros([]int64{3})) }, 1, "torchfit: "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, debug := range []string{"", "1"} {
				t.Setenv("TORCHFIT_DEBUG", debug)
				var stderr strings.Builder
				err := run(app(c.fn), []string{"torchfit", "boom"})
				require.Error(t, err)
				require.Equal(t, c.code, exitStatus(err, &stderr))
				out := strings.TrimSpace(stderr.String())
				lines := strings.Split(out, "\n")
				require.Contains(t, lines[len(lines)-1], c.want)
				if debug == "" || c.name == "torch error" {
					require.Len(t, lines, 1, out)
					require.NotContains(t, out, "goroutine")
				} else {
					require.Contains(t, out, "goroutine", "TORCHFIT_DEBUG=1 prints the trace")
				}
			}
		})
	}
}

// tinyCheckpoint saves a small randomly initialised ASR model.
func tinyCheckpoint(t *testing.T, path string) {
	t.Helper()
	toks := []string{"<blank>", "<pad>", "<sos>", "<eos>", "<unk>", " "}
	for r := 'क'; len(toks) < 40; r++ {
		toks = append(toks, string(r))
	}
	v, err := asr.NewVocab(toks)
	require.NoError(t, err)
	cfg, err := asr.Preset("tiny", v.Size())
	require.NoError(t, err)
	cfg.DModel, cfg.EncoderLayers, cfg.DecoderLayers = 64, 2, 1
	torch.ManualSeed(1)
	m, err := asr.NewConformer(cfg)
	require.NoError(t, err)
	defer nn.Free(m)
	m.Vocab = v
	require.NoError(t, asr.SaveModel(path, m, "tiny"))
}

// TestTranscribeInputs: every bad audio input exits 2 with one line; the
// common WAV formats transcribe (exit 0).
func TestTranscribeInputs(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "model.pt")
	tinyCheckpoint(t, ckpt)
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	sox := func(name string, args ...string) string {
		p := filepath.Join(dir, name)
		cmd := append([]string{"-D", "-n"}, args...)
		cmd = append(cmd, p, "synth", "1.5", "pinknoise", "vol", "0.3")
		out, err := exec.Command("sox", cmd...).CombinedOutput()
		require.NoError(t, err, string(out))
		return p
	}
	good := sox("good.wav", "-r", "16000", "-c", "1", "-b", "16")
	raw, err := os.ReadFile(good)
	require.NoError(t, err)
	empty := append(append([]byte(nil), raw[:40]...), 0, 0, 0, 0) // data chunk of 0 bytes
	copy(empty[4:8], []byte{36, 0, 0, 0})

	for _, c := range []struct {
		name string
		file string
		want string // in the one line of stderr
	}{
		{"missing file", filepath.Join(dir, "none.wav"), "none.wav: no such file or directory"},
		{"not RIFF", file("notes.wav", []byte("just some text, not audio\n")), "notes.wav: not a RIFF/WAVE file"},
		{"empty audio", file("empty.wav", empty), "empty.wav: no audio samples"},
		{"truncated header", file("trunc.wav", raw[:30]), "trunc.wav: truncated fmt chunk"},
		{"directory", dir, "is a directory"},
		{"too short", file("short.wav", audio.EncodeWAV(make([]int16, 400), 16000)), "short.wav: 0.025 s of audio is too short to transcribe"},
		{"a-law", sox("alaw.wav", "-r", "8000", "-c", "1", "-e", "a-law"), "format code 6 (A-law)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, "asr", "transcribe", "--checkpoint", ckpt, "--device", "cpu", c.file)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, stdout.String()+stderr.String())
			require.Equal(t, 2, ee.ExitCode(), stderr.String())
			text := strings.TrimSpace(stderr.String())
			require.NotContains(t, text, "\n", "one line")
			require.Contains(t, text, c.want)
			require.True(t, strings.HasPrefix(text, "torchfit: "+c.file), text)
			require.Empty(t, stdout.String())
		})
	}

	// The common formats transcribe: one line per file, exit 0.
	files := []string{
		good,
		sox("u8.wav", "-r", "16000", "-c", "1", "-b", "8", "-e", "unsigned-integer"),
		sox("s24.wav", "-r", "16000", "-c", "1", "-b", "24"),
		sox("f32.wav", "-r", "16000", "-c", "1", "-b", "32", "-e", "floating-point"),
		sox("f64.wav", "-r", "16000", "-c", "1", "-b", "64", "-e", "floating-point"),
		sox("cd.wav", "-r", "44100", "-c", "2", "-b", "16"),
		sox("tel.wav", "-r", "8000", "-c", "1", "-b", "16"),
		sox("dat.wav", "-r", "48000", "-c", "1", "-b", "24"),
	}
	cmd := exec.Command(bin, append([]string{"asr", "transcribe", "--checkpoint", ckpt, "--device", "cpu"}, files...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, len(files), stdout.String())
	for k, f := range files {
		require.True(t, strings.HasPrefix(lines[k], f+"\t"), lines[k])
	}
	// The peak on stderr, the one line there (stdout stays the transcripts).
	require.Regexp(t, `^transcribed 8 files; peak memory [0-9.]+ MiB \(cpu\)\n$`, stderr.String())
}

// A command never writes over a file of another kind (issue 24, item 10):
// `plot --out` naming the metrics file, `tts say --out` naming a
// checkpoint; each is refused in one line, exit 2, the file unchanged.
// Without --out, plot writes beside its input.
func TestOutputsOfAnotherKindAreRefused(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	metrics := filepath.Join(dir, "m.jsonl")
	lines := `{"step":1,"loss":2.5,"micro_batch":2,"samples":4}` + "\n" + `{"step":2,"loss":2.0,"micro_batch":2,"samples":4}` + "\n"
	require.NoError(t, os.WriteFile(metrics, []byte(lines), 0o644))
	ckpt := filepath.Join(dir, "checkpoint_step_000010.pt")
	require.NoError(t, ptfile.Save(ckpt, ptfile.NewDict("step", int64(10))))
	before, err := os.ReadFile(ckpt)
	require.NoError(t, err)
	wav := filepath.Join(dir, "ref.wav")
	require.NoError(t, exec.Command("sox", "-n", "-r", "16000", "-c", "1", "-b", "16", wav, "synth", "1", "sine", "440").Run())

	code, out := runCLI(t, bin, "plot", "--metrics", metrics, "--out", metrics).both()
	require.Equal(t, 2, code, out)
	requireOneLine(t, out, "something else than a PNG image")
	got, err := os.ReadFile(metrics)
	require.NoError(t, err)
	require.Equal(t, lines, string(got), "the metrics are untouched")

	code, out = runCLI(t, bin, "tts", "say", "--checkpoint", ckpt, "--text", "नमस्कार", "--speaker", wav, "--out", ckpt).both()
	require.Equal(t, 2, code, out)
	requireOneLine(t, out, "something else than a WAV file")
	got, err = os.ReadFile(ckpt)
	require.NoError(t, err)
	require.Equal(t, before, got, "the checkpoint is untouched")

	code, out = runCLI(t, bin, "plot", "--metrics", metrics).both()
	require.Equal(t, 0, code, out)
	require.FileExists(t, filepath.Join(dir, "m.png"))
}

// Out of memory exits 3 even inside a user error (a checkpoint that does
// not load under the cap); a user error alone 2, anything else 1.
func TestExitStatusOutOfMemoryFirst(t *testing.T) {
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, torch.MustMemoryStats(torch.CPU).Allocated+(1<<20)))
	oom := torch.Try(func() { torch.Zeros([]int64{1 << 22}).Free() })
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0))
	require.ErrorIs(t, oom, torch.ErrOutOfMemory)
	for _, c := range []struct {
		name string
		err  error
		code int
	}{
		{"out of memory", oom, 3},
		{"out of memory in a user error", recipes.Usage(fmt.Errorf("loading the codec: %w", oom)), 3},
		{"user error", &recipes.ConfigError{Field: "lr", Value: -1, Reason: "must be > 0"}, 2},
		{"other", errors.New("disk on fire"), 1},
	} {
		var w strings.Builder
		require.Equal(t, c.code, exitStatus(c.err, &w), c.name)
		require.Equal(t, 1, strings.Count(w.String(), "\n"), c.name)
	}
}
