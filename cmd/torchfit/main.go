// Command torchfit trains models that fit in memory: one subcommand per
// recipe, plus tools to look at memory and metrics.
//
//	torchfit demo                      the small end-to-end ASR run of `make demo`
//	torchfit asr data|train|eval|transcribe
//	torchfit memory                    the memory counter against a known allocation pattern
//	torchfit plot --metrics m.jsonl    loss and memory curves to PNG
//
// Errors a user can cause print one line and exit with status 2.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/torch"
)

func main() {
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
	}
	// Every command computes on libtorch's one thread, as Python does
	// (torch.Thread says why that matters for libtorch 1.13's oneDNN).
	var err error
	torch.Main().Do(func() { err = run(app, os.Args) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "torchfit:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		var te *torch.Error
		if errors.As(err, &te) && te.OOM {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

// run runs the app, turning a *torch.Error panic into an error: no panic
// trace ever reaches the user.
func run(app *cli.App, args []string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if te, ok := r.(*torch.Error); ok {
				err = te
				return
			}
			panic(r)
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
