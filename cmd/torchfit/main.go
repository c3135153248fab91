// Command torchfit trains models that fit in memory: one subcommand per
// recipe, plus tools to look at memory and metrics.
//
//	torchfit demo                      the small end-to-end ASR run of `make demo`
//	torchfit asr data|train|eval|transcribe
//	torchfit memory                    the memory counter against a known allocation pattern
//	torchfit plot --metrics m.jsonl    loss and memory curves to PNG
//
// Errors a user can cause (bad flags, config files, hyperparameters,
// inputs) print one line and exit with status 2; out of memory exits 3;
// other failures 1. No panic trace reaches the user: a bug prints one line,
// "torchfit: internal error: ...", and exits 1 (TORCHFIT_DEBUG=1 prints
// the trace as well).
package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
)

func main() {
	// Every command computes on libtorch's one thread, as Python does
	// (torch.Thread says why that matters for libtorch 1.13's oneDNN).
	var err error
	torch.Main().Do(func() { err = run(newApp(), os.Args) })
	os.Exit(exitStatus(err, os.Stderr))
}

func newApp() *cli.App {
	app := &cli.App{
		Name:  "torchfit",
		Usage: "Go training on libtorch that fits in memory",
		Commands: []*cli.Command{
			demoCommand(),
			asrCommand(),
			memoryCommand(),
			plotCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   usageOnly,
	}
	harden(app.Commands)
	return app
}

// usageOnly makes a flag error one line (urfave/cli would print the
// command's help after it).
func usageOnly(_ *cli.Context, err error, _ bool) error { return usageError{err} }

// exitStatus prints err as one line on w and returns the exit status: 0
// for none, 2 for an error the user caused (bad flag, config, input), 3
// for out of memory, 1 otherwise. With TORCHFIT_DEBUG=1 an internal
// error's panic trace is printed first.
func exitStatus(err error, w io.Writer) int {
	if err == nil {
		return 0
	}
	var ie *internalError
	if errors.As(err, &ie) && os.Getenv("TORCHFIT_DEBUG") == "1" {
		fmt.Fprintf(w, "panic: %v\n\n%s\n", ie.value, ie.stack)
	}
	fmt.Fprintln(w, "torchfit:", oneLine(err.Error()))
	var ue usageError
	var ce *asr.ConfigError
	if errors.As(err, &ue) || errors.As(err, &ce) {
		return 2
	}
	var te *torch.Error
	if errors.As(err, &te) && te.OOM {
		return 3
	}
	return 1
}

// oneLine joins a multi-line message (a C++ exception's, say) into one.
func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for k, l := range lines {
		lines[k] = strings.TrimSpace(l)
	}
	return strings.Join(lines, " | ")
}

// run runs the app and recovers every panic, so that no panic trace
// reaches the user: a *torch.Error (tensor math) becomes that error, and
// anything else an *internalError.
func run(app *cli.App, args []string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			var te *torch.Error
			if e, ok := r.(error); ok && errors.As(e, &te) {
				err = e
				return
			}
			err = &internalError{value: r, stack: debug.Stack()}
		}
	}()
	err = app.Run(args)
	var ee cli.ExitCoder
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return usageError{err}
	}
	if err != nil && isFlagError(err) {
		return usageError{err}
	}
	return err
}

// internalError is a panic other than a *torch.Error: a bug in torchfit.
type internalError struct {
	value any
	stack []byte
}

func (e *internalError) Error() string {
	return fmt.Sprintf("internal error: %v (a bug in torchfit; TORCHFIT_DEBUG=1 prints the trace)", e.value)
}

// harden makes every command refuse NaN and infinite values of its float
// flags and report a flag error in one line.
func harden(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if cmd.OnUsageError == nil {
			cmd.OnUsageError = usageOnly
		}
		before := cmd.Before
		cmd.Before = func(c *cli.Context) error {
			if err := finiteFloats(c); err != nil {
				return configError(err, nil)
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
		harden(cmd.Subcommands)
	}
}

// finiteFloats returns a usage error for the first float flag of c's
// command whose value is NaN or infinite.
func finiteFloats(c *cli.Context) error {
	if c.Command == nil {
		return nil
	}
	for _, f := range c.Command.Flags {
		if ff, ok := f.(*cli.Float64Flag); ok {
			if v := c.Float64(ff.Name); math.IsNaN(v) || math.IsInf(v, 0) {
				return &asr.ConfigError{Field: ff.Name, Value: v, Reason: "must be a finite number"}
			}
		}
	}
	return nil
}

// usageError is an error the user caused (bad flag, missing file, wrong
// input): exit status 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func userErr(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func isFlagError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"flag provided but not defined", "invalid value", "Required flag", "No help topic", "flag needs an argument"} {
		if len(msg) >= len(p) && contains(msg, p) {
			return true
		}
	}
	return false
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
