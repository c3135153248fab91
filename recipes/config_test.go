package recipes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
)

// runWith parses args for a train-like command with the shared flags plus
// d-model, applying the config file with keys, and returns what it read.
func runWith(t *testing.T, keys map[string]string, args ...string) (Common, *cli.Context, error) {
	t.Helper()
	return runWithDefaults(t, Defaults{MicroBatch: 4, Accum: 1, Epochs: 1, LR: 1e-3}, keys, args...)
}

// runWithDefaults is runWith for a recipe with defaults d.
func runWithDefaults(t *testing.T, d Defaults, keys map[string]string, args ...string) (Common, *cli.Context, error) {
	t.Helper()
	cmd := &cli.Command{Name: "train", Flags: append(Flags(d),
		&cli.IntFlag{Name: "d-model"}, &cli.IntFlag{Name: "text-encoder-dim"}, &cli.IntFlag{Name: "loader-batch"})}
	var cm Common
	var ctx *cli.Context
	var runErr error
	cmd.Action = func(c *cli.Context) error {
		ctx = c
		from, err := ApplyConfig(c, keys)
		if err != nil {
			runErr = err
			return nil
		}
		cm, err = ReadCommon(c)
		runErr = Reword(err, from)
		return nil
	}
	Underscores([]*cli.Command{cmd})
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	require.NoError(t, app.Run(append([]string{"x", "train"}, args...)))
	return cm, ctx, runErr
}

func writeFile(t *testing.T, name, text string) string {
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

func TestConfigSections(t *testing.T) {
	// The Mamba seed's layout: model / vram / training sections.
	mamba := writeFile(t, "c.json", `{
	  "model": {"d_model": 768},
	  "vram": {"batch_size": 2, "gradient_accumulation_steps": 8, "use_fp16": true},
	  "training": {"learning_rate": 3e-4, "max_grad_norm": 1.0, "max_steps": 1000, "warmup_steps": 100}
	}`)
	cm, c, err := runWith(t, map[string]string{"vram.use_fp16": "mixed_precision"}, "--config", mamba, "--batch-size", "3")
	require.NoError(t, err)
	require.Equal(t, 768, c.Int("d-model"))
	require.Equal(t, 3, cm.MicroBatch, "the flag overrides the file")
	require.Equal(t, 8, cm.Accum)
	require.Equal(t, "auto", cm.Precision)
	require.Equal(t, 3e-4, cm.LR)
	require.Equal(t, 1.0, cm.ClipNorm)
	require.Equal(t, 1000, cm.MaxSteps)
	require.Equal(t, 100, cm.Warmup)

	// The TTS seed's config.yaml: two batch sizes, told apart by the recipe's keys.
	tts := writeFile(t, "config.yaml", "training:\n  batch_size: 4\n  gradient_accumulation_steps: 8\n  max_memory_fraction: 0.9\ndata:\n  batch_size: 32\n  prefetch_buffer_size: 2\nmodel:\n  text_encoder_dim: 256\n")
	cm, c, err = runWith(t, map[string]string{"training.batch_size": "micro-batch", "data.batch_size": "loader-batch",
		"training.max_memory_fraction": "memory-fraction"}, "--config", tts)
	require.NoError(t, err)
	require.Equal(t, 4, cm.MicroBatch)
	require.Equal(t, 8, cm.Accum)
	require.Equal(t, 0.9, cm.MemoryFraction)
	require.Equal(t, 2, cm.Prefetch)
	require.Equal(t, 32, c.Int("loader-batch"))
	require.Equal(t, 256, c.Int("text-encoder-dim"))

	for _, tc := range []struct{ name, text, want string }{
		{"unknown.json", `{"vram": {"batch_sise": 2}}`, `unknown setting "vram.batch_sise"`},
		{"twice.yaml", "training:\n  batch_size: 4\ndata:\n  batch_size: 32\n", `"training.batch_size" and "data.batch_size" set the same flag --micro-batch`},
		{"zero.json", `{"vram": {"batch_size": 0}}`, "micro-batch"},
		{"frac.json", `{"vram": {"batch_size": 1.5}}`, "must be an integer"},
		{"type.yaml", "training:\n  learning_rate: fast\n", "training.learning_rate"},
		// The Mamba seed's step-4 snippet, comments and all.
		{"comments.json", "{\n  \"batch_size\": 1,  // Very small\n  \"max_length\": 256\n}", "JSON has no comments"},
		// The Mamba seed's Step 4 snippets: comments inside a section.
		{"section-comments.json", "{\"model\": {\"max_seq_len\": 128  // Very small\n}}", "JSON has no comments"},
		{"vram-comments.json", "{\"vram\": {\"batch_size\": 1,  // Very small\n \"x\": 2}}", "JSON has no comments"},
		{"block-comment.json", "{\"model\": {/* small */ \"max_seq_len\": 128}}", "JSON has no comments"},
		{"garbage.json", "{\"batch_size\": 1,, }", "not valid JSON"},
	} {
		_, _, err := runWith(t, nil, "--config", writeFile(t, tc.name, tc.text))
		require.Error(t, err, tc.name)
		require.Contains(t, err.Error(), tc.want, tc.name)
		require.True(t, IsUserError(err), tc.name)
	}
	// A // inside a string is no comment.
	_, _, err = runWith(t, nil, "--config", writeFile(t, "url.json", `{"data": "http://x/y",, }`))
	require.ErrorContains(t, err, "not valid JSON")
	require.NotContains(t, err.Error(), "comments")
}

// A recipe's default memory fraction (CLIP's 0.95, the seed's) gives way to
// a --memory-limit the user gives; both given by the user is refused.
func TestMemoryLimitReplacesTheDefaultFraction(t *testing.T) {
	d := Defaults{MicroBatch: 4, Accum: 1, Epochs: 1, LR: 1e-3, MemoryFraction: 0.95}
	cm, _, err := runWithDefaults(t, d, nil)
	require.NoError(t, err)
	require.Equal(t, 0.95, cm.MemoryFraction)
	cm, _, err = runWithDefaults(t, d, nil, "--memory-limit", "8GiB")
	require.NoError(t, err)
	require.Equal(t, "8GiB", cm.MemoryLimit)
	require.Zero(t, cm.MemoryFraction)
	_, _, err = runWithDefaults(t, d, nil, "--memory-limit", "8GiB", "--memory-fraction", "0.5")
	require.ErrorContains(t, err, "not both")
}

// The precision line says "asked for" only when the user chose it (flag,
// switch or config file); the recipe's fp32 default says so.
func TestPrecisionAskedForOrDefault(t *testing.T) {
	cfg := writeFile(t, "c.json", `{"mixed_precision": false}`)
	for _, tc := range []struct {
		name string
		args []string
		def  string
		want string
	}{
		{"default no", nil, "no", "fp32 (the default)"},
		{"default auto", nil, "auto", "auto"},
		{"flag no", []string{"--mixed-precision", "no"}, "no", "fp32 (asked for)"},
		{"flag fp32", []string{"--mixed-precision", "fp32"}, "auto", "fp32 (asked for)"},
		{"config file", []string{"--config", cfg}, "auto", "fp32 (asked for)"},
		{"flag bf16", []string{"--mixed-precision", "bf16"}, "no", "bf16 (asked for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm, _, err := runWithDefaults(t, Defaults{MicroBatch: 4, Accum: 1, Epochs: 1, LR: 1e-3, Precision: tc.def}, nil, tc.args...)
			require.NoError(t, err)
			ch, err := amp.ParsePrecision(cm.Precision, torch.CPU)
			require.NoError(t, err)
			require.Contains(t, ch.String(), strings.TrimSuffix(tc.want, "auto"))
			if tc.want == "auto" {
				require.Contains(t, ch.Reason, "auto")
			}
		})
	}
}
