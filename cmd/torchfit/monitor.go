package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
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

// parseRest parses the arguments after a --log-file name as monitor's
// own flags, into c: the flag parser stopped at the name (--log-file
// is a switch as well), and `--log-file gpu.csv --duration 2` would run
// "--duration" as the command. It returns the command after them, a
// "--" before it dropped.
func parseRest(c *cli.Context, rest []string) ([]string, error) {
	set := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if f.Names()[0] == "log-file" {
			continue // named already: a second --log-file is an unknown flag
		}
		if err := f.Apply(set); err != nil {
			return nil, err
		}
	}
	if err := set.Parse(rest); err != nil {
		return nil, recipes.Usagef("monitor: %v", err)
	}
	var err error
	help := false
	set.Visit(func(f *flag.Flag) {
		help = help || f.Name == "help" || f.Name == "h"
		if err == nil {
			err = c.Set(f.Name, f.Value.String())
		}
	})
	if help && err == nil {
		return nil, errHelpShown
	}
	return set.Args(), err
}

// errHelpShown stops parseRest's caller after --help: nothing else runs.
var errHelpShown = errors.New("help shown")

func runMonitor(c *cli.Context) error {
	args := c.Args().Slice()
	logOpt := c.Generic("log-file").(*optionalValue)
	logPath := logOpt.value
	named := false // the name came after --log-file, not with =
	if logOpt.set && logPath == "" && len(args) > 0 && (strings.HasSuffix(args[0], ".jsonl") || strings.HasSuffix(args[0], ".csv")) {
		var err error
		logPath, named = args[0], true // --log-file gpu.csv
		if args, err = parseRest(c, args[1:]); errors.Is(err, errHelpShown) {
			return cli.ShowCommandHelp(c.Lineage()[1], c.Command.Name) // as urfave/cli shows it, from the parent
		} else if err != nil {
			return err
		}
	}
	interval, err := seconds("interval", c.String("interval"), false)
	if err != nil {
		return err
	}
	duration, err := seconds("duration", c.String("duration"), true)
	if err != nil {
		return err
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
	// A command that does not start leaves no log behind (an empty one
	// would refuse the retry) and an existing one as it was.
	if len(args) > 0 {
		if _, err := exec.LookPath(args[0]); err != nil {
			return recipes.Usagef("monitor: %v", err)
		}
	}
	var log logFile
	if logPath != "" {
		// --log-file=NAME replaces NAME; a name after --log-file, or one
		// by the time, is never an existing file.
		if log, err = openLog(logPath, named || logOpt.value == ""); err != nil {
			return err
		}
		defer log.f.Close()
		cfg.Log, cfg.Format = log.f, monitor.FormatOf(logPath)
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
			log.discard()
			return recipes.Usagef("monitor: %v", err)
		}
	}
	if err := log.start(); err != nil {
		if cmd != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return err
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

// logFile is monitor's --log-file, opened before the watched command
// starts (a log that cannot be written is found first) but emptied only
// after it has started, and removed if monitor created it and the
// command failed to start.
type logFile struct {
	f       *os.File
	created bool
}

// openLog opens path for writing, without emptying it; excl refuses an
// existing file.
func openLog(path string, excl bool) (logFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		return logFile{f: f, created: true}, nil
	}
	if !excl && errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(path, os.O_WRONLY, 0o644)
	}
	if err != nil {
		return logFile{}, recipes.Usagef("--log-file: %v", err)
	}
	return logFile{f: f}, nil
}

// start empties a log that was there before, now that monitoring starts.
func (l logFile) start() error {
	if l.f == nil || l.created {
		return nil
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("--log-file: %w", err)
	}
	return nil
}

// discard removes the log if monitor created it: nothing was written.
func (l logFile) discard() {
	if l.f != nil && l.created {
		l.f.Close()
		os.Remove(l.f.Name())
	}
}
