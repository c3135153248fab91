package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/torchfit/torchfit/monitor"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/report"
)

// optionalValue is a flag that works as a bare switch (--log-file: a file
// named by the time) and also takes a value (--log-file=gpu.csv).
type optionalValue struct {
	set   bool
	value string
}

func (o *optionalValue) String() string   { return o.value }
func (o *optionalValue) IsBoolFlag() bool { return true }
func (o *optionalValue) Set(v string) error {
	o.set = true
	if v != "true" {
		o.value = v
	}
	return nil
}

// openGPU opens NVML (tests put a fake in its place: the branch a machine
// with a GPU takes runs on one without).
var openGPU = monitor.OpenNVML

func monitorCommand() *cli.Command {
	return &cli.Command{
		Name:      "monitor",
		Usage:     "watch GPU memory, utilisation, power and temperature (NVML), host CPU and a process's RSS; log, live line, summary",
		ArgsUsage: "[-- command args...]",
		Description: "With a command after --, runs it and watches it until it exits: torchfit monitor --log-file -- torchfit tts train ...\n" +
			"--log-file alone writes monitor_YYYYmmdd_HHMMSS.jsonl; --log-file=gpu.csv (or a .csv/.jsonl name right after it) names the file.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "interval", Value: "1", Usage: "seconds between samples (or a duration: 500ms)"},
			&cli.StringFlag{Name: "duration", Value: "0", Usage: "seconds to monitor, or a duration (0: until Ctrl-C or the command ends)"},
			&cli.GenericFlag{Name: "log-file", Value: &optionalValue{}, Usage: "write every sample: JSON lines, or CSV for a .csv name"},
			&cli.IntFlag{Name: "pid", Usage: "watch this process's RSS and GPU memory (a command after -- is watched itself)"},
			&cli.BoolFlag{Name: "no-live", Usage: "no live line on the terminal"},
			&cli.StringFlag{Name: "nvml-library", Value: monitor.DefaultNVMLLibrary, Usage: "the NVML library to open"},
		},
		Action: runMonitor,
	}
}

// seconds reads "3600", "0.5" or a Go duration ("1h").
func seconds(flag, s string, zeroOK bool) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if ferr != nil {
			return 0, &recipes.ConfigError{Field: flag, Value: s, Reason: "want seconds (3600) or a duration (1h, 500ms)"}
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 || (d == 0 && !zeroOK) || d > 10000*time.Hour {
		return 0, &recipes.ConfigError{Field: flag, Value: s, Reason: "out of range"}
	}
	return d, nil
}

func runMonitor(c *cli.Context) error {
	interval, err := seconds("interval", c.String("interval"), false)
	if err != nil {
		return err
	}
	duration, err := seconds("duration", c.String("duration"), true)
	if err != nil {
		return err
	}
	args := c.Args().Slice()
	logOpt := c.Generic("log-file").(*optionalValue)
	logPath := logOpt.value
	if logOpt.set && logPath == "" && len(args) > 0 && (strings.HasSuffix(args[0], ".jsonl") || strings.HasSuffix(args[0], ".csv")) {
		logPath, args = args[0], args[1:] // --log-file gpu.csv
		if len(args) > 0 && args[0] == "--" {
			args = args[1:] // the flag parser stopped at the name and kept the "--" after it
		}
	}
	if logOpt.set && logPath == "" {
		logPath = "monitor_" + time.Now().Format("20060102_150405") + ".jsonl"
	}
	pid := c.Int("pid")
	if pid < 0 {
		return recipes.Usagef("--pid %d: not a process id", pid)
	}
	if len(args) > 0 && pid > 0 {
		return recipes.Usagef("give --pid or a command to run, not both")
	}
	if pid > 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return recipes.Usagef("--pid %d: no such process", pid)
		}
	}
	if duration == 0 && len(args) == 0 && pid == 0 && !term.IsTerminal(int(os.Stdin.Fd())) {
		return recipes.Usagef("give --duration, --pid or a command to watch (or run it on a terminal and stop it with Ctrl-C)")
	}
	stdout, stderr := c.App.Writer, c.App.ErrWriter
	// What is watched (the GPUs, or why none) is said once monitoring
	// starts: a fault found before it (the log file, the command) is the
	// only line printed.
	var notices []string
	gpu, err := openGPU(c.String("nvml-library"))
	if errors.Is(err, monitor.ErrNoNVML) {
		notices = append(notices, fmt.Sprintf("torchfit monitor: %v: monitoring the host only", err))
		gpu = nil
	} else if err != nil {
		return err
	} else {
		defer gpu.Close()
		if gs, err := gpu.Read(); err == nil {
			for _, g := range gs {
				notices = append(notices, fmt.Sprintf("torchfit monitor: GPU %d: %s, %.1f GiB", g.Index, g.Name, float64(g.MemTotal)/(1<<30)))
			}
		}
	}
	cfg := monitor.Config{Interval: interval, Duration: duration, PID: pid}
	if gpu != nil {
		cfg.GPU = gpu
	}
	if logPath != "" {
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if !logOpt.set || logOpt.value == "" {
			flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL
		}
		f, err := os.OpenFile(logPath, flags, 0o644)
		if err != nil {
			return recipes.Usagef("--log-file: %v", err)
		}
		defer f.Close()
		cfg.Log, cfg.Format = f, monitor.FormatOf(logPath)
	}
	if !c.Bool("no-live") && term.IsTerminal(int(os.Stderr.Fd())) {
		cfg.Live = os.Stderr
	}
	ctx, stop := report.SignalContext(c.Context)
	defer stop()
	var cmd *exec.Cmd
	var waitErr error
	if len(args) > 0 {
		cmd = exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return recipes.Usagef("monitor: %v", err)
		}
	}
	for _, n := range notices {
		fmt.Fprintln(stderr, n)
	}
	if cmd != nil {
		cfg.PID = cmd.Process.Pid
		done := make(chan struct{})
		go func() { waitErr = cmd.Wait(); close(done) }()
		cfg.Exited = done
		defer func() { <-done }()
	}
	sum, err := monitor.Run(ctx, cfg)
	if err != nil {
		return err
	}
	sum.Write(stdout)
	if logPath != "" {
		fmt.Fprintf(stdout, "  log: %s\n", logPath)
	}
	if cmd != nil {
		if sum.Stop != monitor.StopExited { // duration or Ctrl-C: the command goes on; wait for it
			fmt.Fprintf(stderr, "torchfit monitor: monitoring stopped (%s); waiting for %s to exit\n", sum.StopReason, args[0])
		}
		for cfg.Exited != nil {
			select {
			case <-cfg.Exited:
				cfg.Exited = nil
			}
		}
		if waitErr != nil {
			return fmt.Errorf("monitor: %s: %w", args[0], waitErr)
		}
	}
	return nil
}
