package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// helpOf prints `torchfit ARGS --help` in-process.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	require.NoError(t, run(app, append(append([]string{"torchfit"}, args...), "--help")))
	return out.String()
}

// Every command's help fits the width — 80 columns when not on a
// terminal, $COLUMNS when set — and lists a flag's spellings compactly
// (issue 24, item 11: every alias was listed, lines up to 323 columns).
func TestHelpFitsTheWidth(t *testing.T) {
	var paths [][]string
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string(nil), prefix...), c.Name)
			paths = append(paths, p)
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	paths = append(paths, nil) // torchfit --help
	for _, width := range []int{80, 60, 132} {
		if width == 80 {
			t.Setenv("COLUMNS", "") // stdout is not a terminal under go test
		} else {
			t.Setenv("COLUMNS", itoa(width))
		}
		for _, p := range paths {
			text := helpOf(t, p...)
			require.Contains(t, text, "USAGE:", "%v", p)
			for _, l := range strings.Split(text, "\n") {
				require.LessOrEqual(t, utf8.RuneCountInString(l), width, "torchfit %s --help at %d columns:\n%s", strings.Join(p, " "), width, l)
			}
		}
	}
}

func itoa(n int) string {
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// Help shows a flag's name and one other spelling, not its underscore
// twins, which are still accepted.
func TestHelpListsSpellingsCompactly(t *testing.T) {
	t.Setenv("COLUMNS", "")
	text := helpOf(t, "asr", "train")
	text, note, ok := strings.Cut(text, "Each flag also answers to its spelling with '_' for '-'")
	require.True(t, ok, "the note on underscore spellings")
	require.Contains(t, strings.Join(strings.Fields(note), " "), "(--micro_batch for --micro-batch)")
	require.Contains(t, text, "--micro-batch value (--batch-size)")
	require.Contains(t, text, "--grad-accum value (--gradient_accumulation_steps, …)")
	for _, hidden := range []string{"--batch_size", "--micro_batch", "--grad_accum", "--gradient-accumulation-steps", "--memory_limit"} {
		require.NotContains(t, text, hidden+" ", "help leaves out %s", hidden)
		require.NotContains(t, text, hidden+",", "help leaves out %s", hidden)
		require.NotContains(t, text, hidden+")", "help leaves out %s", hidden)
	}
	// The hidden spellings still parse: the bad value is the error.
	for _, spelling := range []string{"--batch_size", "--micro_batch", "--batch-size"} {
		code, out := runInProcess("asr", "train", "--device", "cpu", spelling, "0")
		require.Equal(t, 2, code, out)
		requireOneLine(t, out, "--micro-batch 0: must be at least 1")
	}
}

func TestWrapHelp(t *testing.T) {
	for _, c := range []struct {
		name, in string
		width    int
		want     string
	}{
		{"short", "   --seed value  the seed", 30, "   --seed value  the seed"},
		{"continues under its column", "   --seed value  one two three four five six", 40,
			"   --seed value  one two three four five\n                 six"},
		{"one column", "   alpha beta gamma delta epsilon zeta", 30, "   alpha beta gamma delta\n   epsilon zeta"},
		{"stacked block", "   --a-very-long-flag-name value  one two\n   --b                            x", 30,
			"   --a-very-long-flag-name value\n         one two\n   --b\n         x"},
		{"a word wider than the column", "   --s  0123456789012345678901234567890123456789", 30,
			"   --s\n         012345678901234567890\n         1234567890123456789"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := wrapHelp(c.in, c.width)
			require.Equal(t, c.want, got)
		})
	}
}
