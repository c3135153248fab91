package recipes

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// Recipe is one training recipe: its data, model, loss, metrics and
// presets. The harness supplies the rest: the shared flags and config
// files (Flags, ApplyConfig, ReadCommon), the run's set-up (Prepare:
// threads, memory cap, events, signals). A recipe's command is
// `torchfit NAME VERB`: data, train, eval, and its own verbs.
type Recipe interface {
	Name() string
	Usage() string
	// Commands are the recipe's verbs. Train commands build their flags
	// with Flags (the recipe's defaults) plus their own.
	Commands() []*cli.Command
}

// Command turns a recipe into the command line's `torchfit NAME ...`,
// every flag answering to its underscore spelling too.
func Command(r Recipe) *cli.Command {
	cmds := r.Commands()
	Underscores(cmds)
	return &cli.Command{Name: r.Name(), Usage: r.Usage(), Subcommands: cmds}
}

// Run is a train command's run, set up by Prepare.
type Run struct {
	Common
	Ctx    context.Context // cancelled by SIGINT/SIGTERM: training saves and stops
	Log    *report.Logger
	Events train.Sink // log lines and progress bar on stderr, the metrics and TensorBoard files when asked
	// FromFile names the settings the --config file gave (flag name →
	// file), for messages.
	FromFile map[string]string
	// Group is the data-parallel process group when a launcher started
	// the command (torchfit launch, torchrun); nil in one process. Only
	// rank 0 renders events (log lines, progress, the metrics file).
	Group   *distributed.Group
	steps   *report.StepLog
	cleanup []func() error
}

// LogSteps sets the cadence of the step lines the front end writes when
// stderr is not a terminal (report.LogEvery steps unless changed; 0: none,
// for a recipe whose own step lines carry the loss, learning rate, speed
// and memory).
func (r *Run) LogSteps(every int) { r.steps.SetEvery(every) }

// Logf writes a log line.
func (r *Run) Logf(format string, args ...any) {
	r.Log.Printf(format, args...)
}

// Close undoes Prepare: the signal handler, the metrics and TensorBoard
// files and the progress bar. It returns the files' first write error.
func (r *Run) Close() error {
	var first error
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		if err := r.cleanup[i](); err != nil && first == nil {
			first = err
		}
	}
	r.cleanup = nil
	return first
}

// Spec is what a recipe declares once for all its train commands.
type Spec struct {
	Name string
	// Keys maps the seeds' config-file keys to flag names (see
	// ApplyConfig).
	Keys map[string]string
	// DataParallel says the recipe trains data parallel under a launcher
	// (torchfit launch, torchrun); otherwise OneProcess must say why it
	// trains in one process, and Prepare refuses a launcher, --zero and
	// --allreduce-after-backward with that reason. A Spec that declares
	// neither panics in Prepare: no recipe can forget.
	DataParallel bool
	OneProcess   string
}

// Prepare reads a train command's config file and shared flags (the
// recipe's Spec.Keys), refuses data parallelism the recipe does not offer
// (Spec.OneProcess), sets libtorch's threads, and opens the run's front end: log lines and a progress bar on stderr,
// the metrics file, the TensorBoard event file. Under a launcher (WORLD_SIZE set) it first joins the
// data-parallel process group (Run.Group), and only rank 0 opens the front
// end. Close the Run when the command ends.
//
// unused are the command's flags it takes but cannot honour (Unused):
// given on the command line they are refused before anything else, given
// by the --config file they are logged as unused, and an unused
// --metrics or --tensorboard output is not opened.
func Prepare(c *cli.Context, spec Spec, unused ...Unused) (*Run, error) {
	if spec.DataParallel == (spec.OneProcess != "") {
		panic(fmt.Sprintf("recipes: the %s recipe's Spec must declare DataParallel or say why it trains in OneProcess (not both)", spec.Name))
	}
	if err := refuseUnused(c, unused); err != nil { // before the config file sets flags too
		return nil, err
	}
	fromFile, err := ApplyConfig(c, spec.Keys)
	if err != nil {
		return nil, err
	}
	cm, err := ReadCommon(c)
	if err != nil {
		return nil, Reword(err, fromFile)
	}
	r := &Run{Common: cm, FromFile: fromFile, Log: report.NewLogger(os.Stderr)}
	if err := r.logUnused(c, unused); err != nil {
		return nil, err
	}
	if !cm.Device.IsCUDA() {
		if err := r.NotHere(c, "empty-cache-every", cm.EmptyCacheEvery > 0,
			fmt.Sprintf("empties the CUDA cache, which %s does not have (--device cuda)", cm.Device)); err != nil {
			return nil, err
		}
		r.EmptyCacheEvery = 0 // the recipe's default, or the file's: no cache on the CPU
	}
	if spec.OneProcess != "" {
		if err := r.oneProcess(spec.Name, spec.OneProcess); err != nil {
			return nil, err
		}
	}
	if cm.Threads > 0 {
		torch.SetNumThreads(cm.Threads)
	}
	if cm.Resume != "" {
		if _, err := os.Stat(cm.Resume); err != nil {
			return nil, Usagef("--resume: %v", err)
		}
	}
	if err := r.joinGroup(c); err != nil {
		r.Close()
		return nil, err
	}
	if r.Rank() == 0 {
		fe, err := newFrontEnd(r.Log, os.Stderr, Outputs{Metrics: r.Metrics, TensorBoard: r.TensorBoard})
		if err != nil {
			r.Close()
			return nil, err
		}
		r.Events, r.steps = fe.events, fe.steps
		r.cleanup = append(r.cleanup, fe.done)
	}
	ctx, stop := report.SignalContext(c.Context)
	r.Ctx = ctx
	r.cleanup = append(r.cleanup, func() error { stop(); return nil })
	return r, nil
}

// NotHere is how a run treats a setting that cannot apply to it (a CUDA
// lever on the CPU, a data-parallel one in one process) when given is
// true: given on the command line it is refused, a *ConfigError naming
// the flag and why (a user error: exit 2); read from the --config file
// it is logged and left unused, since one file serves several machines
// (the seeds' configs are written for a GPU). The recipe's own default
// is neither: NotHere says nothing about a flag the user did not set.
func (r *Run) NotHere(c *cli.Context, flag string, given bool, why string) error {
	if !given || !c.IsSet(flag) {
		return nil
	}
	v := c.Value(flag)
	if path, ok := r.FromFile[flag]; ok {
		r.Logf("--config %s: %s %v %s: not used", path, flag, v, why)
		return nil
	}
	return &ConfigError{Field: flag, Value: v, Reason: why + ": leave it out here"}
}

// Reword turns a *ConfigError whose value came from the --config file into
// one naming the file and key; other errors pass through.
func Reword(err error, fromFile map[string]string) error {
	var ce *ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	path, ok := fromFile[ce.Field]
	if !ok {
		return err
	}
	return Usagef("--config %s: %s", path, ce.Error()[len("--"):])
}

// FrontEnd renders a run's events: log lines on log, a progress bar on
// stderr when it is a terminal, a line every report.LogEvery steps (step,
// epoch, loss, lr, samples/s, memory) when it is not, and the metrics
// file when metricsPath is set (appended to). done finishes the bar and
// closes the file.
func FrontEnd(log *report.Logger, metricsPath string) (events train.Sink, done func() error, err error) {
	return OpenFrontEnd(log, Outputs{Metrics: metricsPath})
}

// Outputs are the files a run's front end writes besides its log.
type Outputs struct {
	Metrics     string // the JSONL metrics file, appended to ("": none)
	TensorBoard string // a directory for a new TensorBoard event file ("": none)
}

// OpenFrontEnd is FrontEnd with every output: the metrics file and a
// TensorBoard event file in out.TensorBoard (report.TensorBoard). done
// finishes the bar and closes the files.
func OpenFrontEnd(log *report.Logger, out Outputs) (events train.Sink, done func() error, err error) {
	fe, err := newFrontEnd(log, os.Stderr, out)
	if err != nil {
		return nil, nil, err
	}
	return fe.events, fe.done, nil
}

// frontEnd is FrontEnd's parts: steps, the step lines off a terminal (nil
// on one), for Run.LogSteps.
type frontEnd struct {
	events train.Sink
	steps  *report.StepLog
	done   func() error
}

// newFrontEnd is OpenFrontEnd with the progress bar on tty when it is a
// terminal, step lines on log otherwise.
func newFrontEnd(log *report.Logger, tty *os.File, out Outputs) (*frontEnd, error) {
	bar := report.NewProgress(tty)
	var steps *report.StepLog
	var ss train.Sink
	if bar == nil {
		steps = report.NewStepLog(log, report.LogEvery)
		ss = steps.Sink
	}
	var metrics *report.Metrics
	var ms train.Sink
	if out.Metrics != "" {
		var err error
		if metrics, err = report.OpenMetrics(out.Metrics); err != nil {
			return nil, Usagef("--metrics: %v", err)
		}
		ms = metrics.Sink
	}
	tb, tbs, err := openTensorBoard(out.TensorBoard)
	if err != nil {
		metrics.Close()
		return nil, err
	}
	if tb != nil {
		log.Printf("TensorBoard events: %s (tensorboard --logdir %s)", tb.Path(), out.TensorBoard)
	}
	done := func() error {
		bar.Finish()
		merr, terr := metrics.Close(), tb.Close()
		if merr != nil {
			return fmt.Errorf("--metrics: %w", merr)
		}
		if terr != nil {
			return fmt.Errorf("--tensorboard: %w", terr)
		}
		return nil
	}
	return &frontEnd{events: report.Tee(log.Sink, ss, ms, tbs, bar.Sink), steps: steps, done: done}, nil
}
