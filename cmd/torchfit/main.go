// Command torchfit trains models that fit in memory: a registry of
// recipes (package recipes), each `torchfit RECIPE VERB` with the same
// shared training flags and config files, plus tools.
//
//	torchfit demo                      the small end-to-end ASR run of `make demo`
//	torchfit asr data|train|eval|transcribe|memory-table
//	torchfit clip data|pretrain|train|eval|measure
//	torchfit ganvit data|train|eval|test-memory|memory-table
//	torchfit mamba data|train|eval|generate|estimate
//	torchfit memory                    the memory counter against a known allocation pattern
//	torchfit doctor [--json]           libtorch, CUDA (and why not), devices, allocator, CPU, BLAS
//	torchfit tts data|train-codec|train|say|eval|memory-test
//	torchfit monitor [-- command]      GPU (NVML), host CPU and RSS: log, live line, summary
//	torchfit plot --metrics m.jsonl    loss, evaluations, lr and memory (or a monitor log) to PNG
//	torchfit launch --nproc N -- asr train ...   data-parallel training, as torchrun --no-python
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
	"os"
	"os/exec"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/recipes/clip"
	"github.com/torchfit/torchfit/recipes/ganvit"
	"github.com/torchfit/torchfit/recipes/mamba"
	"github.com/torchfit/torchfit/recipes/tts"
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
	cli.HelpPrinter, cli.FlagStringer = printHelp, flagString // compact, wrapped help (help.go)
	app := &cli.App{
		Name:           "torchfit",
		Usage:          "Go training on libtorch that fits in memory",
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   usageOnly,
		CommandNotFound: func(c *cli.Context, name string) {
			notFound = recipes.Usagef("no command %q (torchfit help lists them)", name)
		},
	}
	app.Commands = append(app.Commands, demoCommand())
	for _, r := range registry {
		app.Commands = append(app.Commands, recipes.Command(r))
	}
	app.Commands = append(app.Commands, launchCommand(), memoryCommand(), plotCommand(), convertCommand(), monitorCommand(), doctorCommand())
	harden(app.Commands)
	return app
}

// registry lists the recipes: each is `torchfit NAME VERB`. The TTS
// recipe scores its speech with the ASR recipe's models.
var registry = []recipes.Recipe{asr.Recipe{}, clip.Recipe{}, ganvit.Recipe{}, tts.Recipe{Transcribe: asr.TranscribeFiles}, mamba.Recipe{}}

// notFound is set when the command line names no command.
var notFound error

// usageOnly makes a flag error one line (urfave/cli would print the
// command's help after it).
func usageOnly(_ *cli.Context, err error, _ bool) error { return recipes.Usage(err) }

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
	line := oneLine(err.Error())
	// A rank under `torchfit launch` leaves its error to the launcher,
	// which prints it once (not once per rank, and again itself).
	if path := os.Getenv(distributed.ErrorFileEnv); path == "" || os.WriteFile(path, []byte(line+"\n"), 0o600) != nil {
		fmt.Fprintln(w, "torchfit:", line)
	}
	var re *distributed.RankError
	if errors.As(err, &re) && re.Status > 0 {
		return re.Status // the rank's (2: its user error, printed by it)
	}
	// Out of memory first: wrapped in a user error (a checkpoint that
	// could not be loaded under the cap, say) it is still memory, and a
	// script tells it apart by the status.
	var te *torch.Error
	if errors.As(err, &te) && te.OOM {
		return 3
	}
	if recipes.IsUserError(err) || errors.Is(err, torch.ErrNoCUDA) {
		return 2 // bad input, or a CUDA device asked for where there is none
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
	notFound = nil
	err = app.Run(args)
	if err == nil && notFound != nil {
		return notFound
	}
	// cli's own exit 2 (a flag it could not parse) is a usage error; a
	// watched command's exit status is that command's, not the user's
	// input to torchfit (*exec.ExitError has ExitCode too).
	var ee cli.ExitCoder
	var child *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 && !errors.As(err, &child) {
		return recipes.Usage(err)
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
// flags and report a flag error in one line; a verb that takes no
// arguments (no ArgsUsage) refuses any, before it reads or writes
// anything (a stray word was ignored: `asr data --out d extra` made a
// 2000-utterance corpus).
func harden(cmds []*cli.Command) {
	for _, cmd := range cmds {
		if cmd.OnUsageError == nil {
			cmd.OnUsageError = usageOnly
		}
		noArgs := cmd.ArgsUsage == "" && len(cmd.Subcommands) == 0 && cmd.Name != "help"
		before := cmd.Before
		cmd.Before = func(c *cli.Context) error {
			if err := recipes.FiniteFloats(c); err != nil {
				return err
			}
			if noArgs && c.NArg() > 0 {
				return recipes.Usagef("%s takes no arguments (got %q)", c.Command.FullName(), c.Args().First())
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
		harden(cmd.Subcommands)
	}
}
