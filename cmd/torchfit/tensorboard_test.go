package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// Every training verb takes --tensorboard DIR, as every command with the
// shared training flags (recipes.Flags: --metrics) does: the measuring
// verbs (asr plan, mamba estimate, ...) too.
func TestEveryTrainingVerbHasTensorBoard(t *testing.T) {
	var got, metrics []string
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := strings.TrimSpace(prefix + " " + c.Name)
			for _, f := range c.Flags {
				if slices.Contains(f.Names(), "tensorboard") {
					got = append(got, name)
				}
				if slices.Contains(f.Names(), "metrics") && c.Name != "plot" {
					metrics = append(metrics, name)
				}
			}
			walk(name, c.Subcommands)
		}
	}
	walk("", newApp().Commands)
	slices.Sort(got)
	slices.Sort(metrics)
	require.Equal(t, metrics, got)
	for _, verb := range []string{"asr train", "clip pretrain", "clip train", "ganvit train", "mamba train", "tts train", "tts train-codec"} {
		require.Contains(t, got, verb)
	}
}

// A --tensorboard path that is a file is refused in one line, exit 2,
// before anything runs, and the file is left as it was.
func TestTensorBoardFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "metrics.jsonl")
	require.NoError(t, os.WriteFile(file, []byte("{}\n"), 0o644))
	for _, args := range [][]string{
		{"asr", "train", "--preset", "tiny"},
		{"clip", "pretrain"},
		{"clip", "train"},
		{"ganvit", "train"},
		{"mamba", "train", "--model_size", "tiny"},
		{"tts", "train-codec"},
		{"tts", "train"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out := runInProcess(append(args, "--data", filepath.Join(dir, "nodata"), "--device", "cpu", "--tensorboard", file)...)
			require.Equal(t, 2, code, out)
			requireOneLine(t, out, `--tensorboard "`+file+`": is a file, not a directory`)
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			require.Equal(t, "{}\n", string(b))
		})
	}
}
