package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// Help lists each flag by its name and at most one other spelling, and
// wraps every line at the terminal's width (80 columns when not a
// terminal): with every alias listed (issue 24, item 11) lines ran to 323
// columns. The underscore twins recipes.Underscores adds (batch_size for
// batch-size) are still accepted; a note under the options says so.

// helpWidth is the width help is wrapped at: $COLUMNS, else the
// terminal's, else 80.
func helpWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 40 {
		return n
	}
	if fd := int(os.Stdout.Fd()); term.IsTerminal(fd) {
		if w, _, err := term.GetSize(fd); err == nil && w >= 40 {
			return w
		}
	}
	return 80
}

// normalized is a flag name with '_' read as '-': the spellings a flag
// answers to that help shows once.
func normalized(name string) string { return strings.ReplaceAll(name, "_", "-") }

// flagNames is a flag's first name and its first spelling that differs
// from it by more than '_' for '-' (the seeds' name): "--micro-batch value
// (--batch-size)"; "…" says there are more.
func flagNames(f cli.DocGenerationFlag, placeholder string) string {
	names := f.Names()
	s := "--" + names[0]
	if len(names[0]) == 1 {
		s = "-" + names[0]
	}
	if placeholder != "" {
		s += " " + placeholder
	}
	seen := map[string]bool{normalized(names[0]): true}
	var others []string
	for _, n := range names[1:] {
		if !seen[normalized(n)] {
			seen[normalized(n)] = true
			if len(n) == 1 {
				others = append(others, "-"+n)
			} else {
				others = append(others, "--"+n)
			}
		}
	}
	switch {
	case len(others) == 1:
		s += " (" + others[0] + ")"
	case len(others) > 1:
		s += " (" + others[0] + ", …)"
	}
	return s
}

// flagString is cli.FlagStringer: the compact names, a tab, the usage and
// the default.
func flagString(f cli.Flag) string {
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return ""
	}
	usage := df.GetUsage()
	placeholder := ""
	if df.TakesValue() {
		placeholder = "value"
	}
	if bf, ok := f.(*cli.BoolFlag); !ok || !bf.DisableDefaultText {
		if d := df.GetDefaultText(); d != "" {
			usage = strings.TrimSpace(usage + " (default: " + d + ")")
		}
	}
	return flagNames(df, placeholder) + "\t" + usage
}

// underscoreNote is the note under a command's options when some of its
// flags answer to an underscore spelling help does not show: an example
// of them.
func underscoreNote(data any) string {
	cmd, ok := data.(*cli.Command)
	if !ok {
		return ""
	}
	for _, f := range cmd.VisibleFlags() {
		names := f.Names()
		for _, n := range names[1:] {
			if strings.Contains(n, "_") && normalized(n) == normalized(names[0]) {
				return fmt.Sprintf("Each flag also answers to its spelling with '_' for '-' (--%s for --%s).", n, names[0])
			}
		}
	}
	return ""
}

// printHelp is cli.HelpPrinter: urfave/cli's templates with flagString,
// every line then wrapped at helpWidth.
func printHelp(w io.Writer, templ string, data any) {
	var buf bytes.Buffer
	cli.HelpPrinterCustom(&buf, templ, data, nil)
	text := buf.String()
	if note := underscoreNote(data); note != "" {
		text = strings.TrimRight(text, "\n") + "\n\n" + note + "\n"
	}
	fmt.Fprint(w, wrapHelp(text, helpWidth()))
}

// wrapHelp wraps every line of text wider than width at spaces. A line
// of two columns ("   --name value  usage", "   asr  usage") continues
// under its second column; in a block of such lines whose second column
// starts past half the width, and where one is too wide, every line puts
// its second column under the first, indented 6 more.
func wrapHelp(text string, width int) string {
	lines := strings.Split(text, "\n")
	cols := make([]int, len(lines))
	for k, l := range lines {
		cols[k] = column(l)
	}
	for k := 0; k < len(lines); {
		end := k + 1
		for end < len(lines) && cols[end] == cols[k] && cols[k] > 0 {
			end++
		}
		// Stacked when the second column is past half the width or a
		// word of it does not fit there.
		stacked := false
		if c := cols[k]; c > 0 {
			at := utf8.RuneCountInString(lines[k][:c])
			for _, l := range lines[k:end] {
				wide := utf8.RuneCountInString(l) > width
				stacked = stacked || (wide && at > width/2) || (wide && longestWord(l[c:]) > width-at)
			}
		}
		for j := k; j < end; j++ {
			lines[j] = wrapLine(lines[j], cols[j], width, stacked)
		}
		k = end
	}
	return strings.Join(lines, "\n")
}

// longestWord is the length of s's longest word, in runes.
func longestWord(s string) int {
	n := 0
	for _, w := range strings.Fields(s) {
		n = max(n, utf8.RuneCountInString(w))
	}
	return n
}

// column is where a two-column line's second column starts (after the
// first run of two or more spaces past the indentation), or 0.
func column(line string) int {
	lead := len(line) - len(strings.TrimLeft(line, " "))
	i := strings.Index(line[lead:], "  ")
	if i < 0 {
		return 0
	}
	col := lead + i
	for col < len(line) && line[col] == ' ' {
		col++
	}
	if col == len(line) {
		return 0
	}
	return col
}

// wrapLine wraps line at width; col is its second column (0: none), and
// stacked puts that column on lines of its own.
func wrapLine(line string, col, width int, stacked bool) string {
	if utf8.RuneCountInString(line) <= width && !stacked {
		return line
	}
	lead := len(line) - len(strings.TrimLeft(line, " "))
	if col == 0 {
		col = lead
	}
	head, rest := line[:col], line[col:]
	indent := utf8.RuneCountInString(head)
	var b strings.Builder
	if stacked {
		b.WriteString(strings.TrimRight(head, " "))
		b.WriteByte('\n')
		indent = lead + 6
		head = strings.Repeat(" ", indent)
	}
	b.WriteString(head)
	n := indent
	first := true
	var words []string
	for _, word := range strings.Fields(rest) {
		// A word wider than the column is cut (a long default value).
		for r := []rune(word); len(r) > 0; {
			k := min(len(r), max(1, width-indent))
			words = append(words, string(r[:k]))
			r = r[k:]
		}
	}
	for _, word := range words {
		wl := utf8.RuneCountInString(word)
		if !first && n+1+wl > width {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent))
			n = indent
			first = true
		}
		if !first {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += wl
		first = false
	}
	return b.String()
}
