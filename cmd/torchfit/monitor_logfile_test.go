package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/monitor"
)

// TestMonitorLogFileName: flags after a name given right after
// --log-file are monitor's, not a command to run (the sweep's
// `monitor --log-file mon3.jsonl --duration 2` ran "--duration"), and a
// start that fails leaves no log to refuse the retry, nor empties one
// that was there.
func TestMonitorLogFileName(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	require.NoError(t, os.WriteFile(p("keep.csv"), []byte("keep"), 0o644))
	for _, c := range []struct {
		name    string
		args    []string
		code    int
		want    string // in stdout (code 0) or the one stderr line
		log     string // the log file
		written bool   // whether the log holds samples after
	}{
		{"flags after the name", []string{"--log-file", p("a.jsonl"), "--duration", "0.2", "--interval", "0.05"}, 0, "duration reached", p("a.jsonl"), true},
		{"flags, then a command", []string{"--interval", "0.05", "--log-file", p("b.csv"), "--duration", "5", "--", "sleep", "0.2"}, 0, "watched process ended", p("b.csv"), true},
		{"a command right after the name", []string{"--interval", "0.05", "--log-file", p("c.jsonl"), "sleep", "0.2"}, 0, "watched process ended", p("c.jsonl"), true},
		{"an unknown flag after the name", []string{"--log-file", p("d.jsonl"), "--bogus", "1"}, 2, "-bogus", p("d.jsonl"), false},
		{"a bad duration after the name", []string{"--log-file", p("e.jsonl"), "--duration", "an hour"}, 2, "duration", p("e.jsonl"), false},
		{"no such command", []string{"--log-file", p("f.jsonl"), "--duration", "1", "--", "/no/such/command"}, 2, "no such file", p("f.jsonl"), false},
		{"no such command, named with =", []string{"--log-file=" + p("keep.csv"), "--duration", "1", "--", "/no/such/command"}, 2, "no such file", p("keep.csv"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for try := range 2 { // a failure leaves nothing that changes the retry
				app := newApp()
				var stdout, stderr bytes.Buffer
				app.Writer, app.ErrWriter = &stdout, &stderr
				err := run(app, append([]string{"torchfit", "monitor", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"}, c.args...))
				code := exitStatus(err, &stderr)
				if c.code != 0 {
					require.Equal(t, c.code, code, stderr.String())
					requireOneLine(t, stderr.String(), c.want)
					if c.log == p("keep.csv") {
						b, err := os.ReadFile(c.log)
						require.NoError(t, err)
						require.Equal(t, "keep", string(b), "an existing log is kept")
					} else {
						require.NoFileExists(t, c.log)
					}
					continue
				}
				require.Equal(t, 0, code, stderr.String())
				require.Contains(t, stdout.String(), c.want)
				samples, err := monitor.ReadLog(c.log)
				require.NoError(t, err)
				require.NotEmpty(t, samples)
				require.NoError(t, os.Remove(c.log), "try %d", try) // a name after --log-file is never overwritten
			}
		})
	}
}
