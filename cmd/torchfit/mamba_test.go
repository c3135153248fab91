package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch/ptfile"
)

// The Mamba recipe's bad configs: the seed's config file with one thing
// wrong is one line naming it and exit status 2, before any data is read
// or anything written.
func TestMambaBadConfigsExitTwo(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "recipes", "mamba", "testdata", "config_16gb_safe.json"))
	require.NoError(t, err)
	seed := string(raw)
	dir := t.TempDir()
	file := func(name, old, new string) string {
		text := strings.Replace(seed, old, new, 1)
		require.NotEqual(t, seed, text, "the seed's file has %q", old)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	nodata := filepath.Join(dir, "nodata")
	ck := filepath.Join(dir, "ck")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown key", []string{"--config", file("unknown.json", `"use_fp16": true,`, `"use_fp16": true, "use_fp32": true,`)},
			`unknown setting "vram.use_fp32"`},
		{"batch_size 0", []string{"--config", file("batch0.json", `"batch_size": 1,`, `"batch_size": 0,`)}, "micro-batch 0: must be at least 1"},
		{"vocab_size not the tokenizer's", []string{"--config", file("vocab.json", `"vocab_size": 50257`, `"vocab_size": 32000`)},
			"vocab-size 32000: the GPT-2 tokenizer (r50k_base) has 50257 tokens"},
		{"d_model 0", []string{"--config", file("dmodel.json", `"d_model": 512,`, `"d_model": 0,`)}, "d_model 0: must be in [1, 8192]"},
		{"n_layers 100000000", []string{"--config", file("layers.json", `"n_layers": 8,`, `"n_layers": 100000000,`)}, "n_layers 100000000: must be in [1, 256]"},
		{"--d-model 1000000", []string{"--d-model", "1000000"}, "d_model 1000000: must be in [1, 8192]"},
		{"--n-layers 100000000", []string{"--n-layers", "100000000"}, "n_layers 100000000: must be in [1, 256]"},
		{"--d-state 1000000", []string{"--d-state", "1000000"}, "d_state 1000000: must be in [1, 1024]"},
		{"--expand-factor 1000", []string{"--expand-factor", "1000"}, "expand_factor 1000: must be in [1, 16]"},
		{"--max-seq-len 1e9", []string{"--max-seq-len", "1000000000", "--model-max-seq-len", "0"}, "max-seq-len 1000000000: must be in [1, 1048576]"},
		{"dropout 1", []string{"--config", file("dropout.json", `"dropout": 0.1,`, `"dropout": 1,`)}, "dropout 1: must be in [0, 1)"},
		{"NaN learning rate", []string{"--config", file("lr.json", `"learning_rate": 0.0003,`, `"learning_rate": "NaN",`)},
			"learning_rate: must be a finite number"},
		{"beta2 1", []string{"--config", file("beta.json", `"adam_beta2": 0.95,`, `"adam_beta2": 1,`)}, "adam-beta2 1"},
		{"sequence beyond the model's", []string{"--config", file("seq.json", `"max_seq_len": 256,
    "vocab_size"`, `"max_seq_len": 128,
    "vocab_size"`)}, "longer than the model's max_seq_len 128"},
		{"unknown vram", []string{"--vram", "10gb"}, `--vram "10gb": not a row of the guide's table`},
		{"unknown model size", []string{"--model_size", "huge"}, `unknown --model_size "huge"`},
		{"unknown scan", []string{"--scan", "fast"}, `unknown scan "fast"`},
		{"no corpus", []string{"--vram", "cpu"}, "torchfit mamba data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"mamba", "train", "--data_dir", nodata, "--checkpoint-dir", ck, "--device", "cpu"}, c.args...)
			code, out := runInProcess(args...)
			require.Equal(t, 2, code, out)
			requireOneLine(t, out, c.want)
			require.NoDirExists(t, ck)
		})
	}
	code, out := runInProcess("mamba", "estimate", "--config", filepath.Join(dir, "batch0.json"))
	require.Equal(t, 2, code, out)
	requireOneLine(t, out, "micro-batch 0")
	code, out = runInProcess("mamba", "eval", "--checkpoint", filepath.Join(dir, "none.pt"), "--data_dir", nodata)
	require.Equal(t, 2, code, out)
	requireOneLine(t, out, "no such file")
	code, out = runInProcess("mamba", "generate", "--checkpoint", filepath.Join(dir, "unknown.json"), "--prompt", "x")
	require.Equal(t, 2, code, out)
	requireOneLine(t, out, "checkpoint")
}

// A checkpoint whose description asks for an absurd model (d_model
// 10,000,000: 2 TB) is refused by eval and generate in one line with exit
// status 2, before anything is built.
func TestMambaAbsurdCheckpointExitTwo(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "meta.json"), []byte(`{"tokenizer": "r50k_base", "vocab_size": 50257}`), 0o644))
	model := `{"d_model": 10000000, "n_layers": 8, "d_state": 16, "expand_factor": 2, "max_seq_len": 256, "vocab_size": 50257,
		"d_conv": 4, "dt_rank": 625000, "pad_vocab_size_multiple": 8, "norm_epsilon": 1e-5}`
	path := filepath.Join(dir, "absurd.pt")
	require.NoError(t, ptfile.Save(path, ptfile.NewDict("meta", ptfile.NewDict("recipe", "mamba",
		"config", `{"recipe": "mamba", "model": `+model+`, "tokenizer": "r50k_base", "seq_len": 256}`))))
	for _, args := range [][]string{
		{"mamba", "eval", "--checkpoint", path, "--data_dir", data, "--device", "cpu"},
		{"mamba", "generate", "--checkpoint", path, "--prompt", "x", "--device", "cpu"},
	} {
		code, out := runInProcess(args...)
		require.Equal(t, 2, code, out)
		requireOneLine(t, out, "d_model 10000000: must be in [1, 8192]")
	}
}
