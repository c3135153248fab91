package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/monitor"
)

// fakeGPU is one device whose memory grows 1 GiB per reading: what
// monitor.OpenNVML returns on a machine with a driver.
type fakeGPU struct {
	used   uint64
	closed bool
}

func (f *fakeGPU) Read() ([]monitor.GPU, error) {
	f.used += 1 << 30
	return []monitor.GPU{{Index: 0, Name: "Fake H100", MemUsed: f.used, MemTotal: 80 << 30, Util: 90, PowerW: 300, TempC: 60}}, nil
}

func (f *fakeGPU) Close() error { f.closed = true; return nil }

// TestMonitorWithGPU takes the branch a machine with NVML takes: the
// device named on stderr, its samples in the log, its figures and the
// seed's reading in the summary, NVML closed at the end.
func TestMonitorWithGPU(t *testing.T) {
	gpu := &fakeGPU{used: 70 << 30}
	defer func(o func(string) (monitor.GPUSource, error)) { openGPU = o }(openGPU)
	var asked string
	openGPU = func(lib string) (monitor.GPUSource, error) { asked = lib; return gpu, nil }
	log := filepath.Join(t.TempDir(), "gpu.jsonl")
	app := newApp()
	var stdout, stderr bytes.Buffer
	app.Writer, app.ErrWriter = &stdout, &stderr
	err := run(app, []string{"torchfit", "monitor", "--duration", "0.25", "--interval", "0.05", "--log-file=" + log, "--nvml-library", "libfake.so"})
	require.NoError(t, err, stderr.String())
	require.Equal(t, "libfake.so", asked)
	require.True(t, gpu.closed)
	require.Equal(t, "torchfit monitor: GPU 0: Fake H100, 80.0 GiB\n", stderr.String())
	out := stdout.String()
	require.Contains(t, out, "GPU 0 (Fake H100): memory peak")
	require.Contains(t, out, "above the seed's expected 60–80 %")
	require.Contains(t, out, "log: "+log)
	samples, err := monitor.ReadLog(log)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(samples), 3)
	for i, s := range samples {
		// the first reading named the device on stderr
		require.Equal(t, uint64(72+i)<<30, s.GPUs[0].MemUsed, "sample %d", i)
	}
}

// TestMonitorWithoutNVML is the branch this machine takes: one line says
// why there is no GPU, the host is monitored, a watched command's exit
// status comes back, and plot draws the log.
func TestMonitorWithoutNVML(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "m.csv")
	missing := filepath.Join(dir, "libnvidia-ml.so.1")
	r := runCLI(t, bin, "monitor", "--nvml-library", missing, "--interval", "0.05", "--log-file", log, "--", "sleep", "0.3")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "torchfit monitor: no NVIDIA GPU: "+missing+" not found: monitoring the host only\n", r.stderr)
	require.Contains(t, r.stdout, "watched process ended")
	require.Contains(t, r.stdout, "GPU: none monitored")
	require.Regexp(t, `process \d+ RSS: peak`, r.stdout)
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "time,elapsed_s,cpu_percent,"))

	png := filepath.Join(dir, "m.png")
	r = runCLI(t, bin, "plot", "--log", log, "--out", png)
	require.Equal(t, 0, r.code, r.stderr)
	_, err = os.Stat(png)
	require.NoError(t, err)

	// The guide's line: a bare --log-file names the file by the time.
	cmd := exec.Command(bin, "monitor", "--log-file", "--duration", "0.2", "--interval", "0.05", "--nvml-library", missing)
	cmd.Dir = t.TempDir()
	b, err = cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	logs, err := filepath.Glob(filepath.Join(cmd.Dir, "monitor_*.jsonl"))
	require.NoError(t, err)
	require.Len(t, logs, 1, string(b))
	samples, err := monitor.ReadLog(logs[0])
	require.NoError(t, err)
	require.NotEmpty(t, samples)

	// A watched command's failure is exit 1 naming its status, whatever
	// the status: 2 is monitor's own bad input, 3 running out of memory.
	for _, status := range []string{"5", "2", "3"} {
		r = runCLI(t, bin, "monitor", "--nvml-library", missing, "--interval", "0.05", "--", "sh", "-c", "exit "+status)
		require.Equal(t, 1, r.code, "watched command exits %s", status)
		require.Contains(t, lastLine(r.stderr), "exit status "+status)
	}
}

func TestMonitorBadInput(t *testing.T) {
	exists := filepath.Join(t.TempDir(), "taken.jsonl")
	require.NoError(t, os.WriteFile(exists, []byte("keep"), 0o644))
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"zero interval", []string{"--interval", "0", "--duration", "1", "--log-file=" + exists}, `interval`},
		{"bad duration", []string{"--duration", "an hour"}, `duration`},
		{"negative duration", []string{"--duration", "-5"}, `duration`},
		{"negative pid", []string{"--pid", "-3", "--duration", "1"}, "not a process id"},
		{"no such pid", []string{"--pid", "2147483600", "--duration", "1"}, "no such process"},
		{"pid and command", []string{"--pid", "1", "--", "true"}, "not both"},
		{"nothing to stop it", []string{}, "give --duration"},
		{"command not found", []string{"--duration", "1", "--", "/no/such/command"}, "no such file"},
		{"log file in no directory", []string{"--duration", "1", "--log-file=" + filepath.Join(exists, "x.csv")}, "--log-file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Without a GPU the error is the only line (issue 24, item 11:
			// the "monitoring the host only" notice came first).
			app := newApp()
			var out bytes.Buffer
			app.ErrWriter = &out
			err := run(app, append([]string{"torchfit", "monitor", "--nvml-library", "/nonexistent/libnvidia-ml.so.1"}, c.args...))
			code := exitStatus(err, &out)
			require.Equal(t, 2, code, out.String())
			requireOneLine(t, out.String(), c.want)
		})
	}
	b, err := os.ReadFile(exists)
	require.NoError(t, err)
	require.Equal(t, "keep", string(b))
}
