package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/train"
)

// frontEnd renders a run's events: log lines and a progress bar on stderr,
// and the metrics file when one is asked for.
type frontEnd struct {
	log     *report.Logger
	metrics *report.Metrics
	bar     *report.Progress
}

// newFrontEnd opens the metrics file (appending), when path is set.
func newFrontEnd(log *report.Logger, metricsPath string) (*frontEnd, error) {
	f := &frontEnd{log: log, bar: report.NewProgress(os.Stderr)}
	if metricsPath != "" {
		m, err := report.OpenMetrics(metricsPath)
		if err != nil {
			return nil, userErr("--metrics: %v", err)
		}
		f.metrics = m
	}
	return f, nil
}

// Sink is where the run's events go.
func (f *frontEnd) Sink() train.Sink {
	var m train.Sink
	if f.metrics != nil {
		m = f.metrics.Sink
	}
	return report.Tee(f.log.Sink, m, f.bar.Sink)
}

// Close finishes the bar and closes the metrics file.
func (f *frontEnd) Close() error {
	f.bar.Finish()
	return f.metrics.Close()
}

// logger returns a command's log: timestamped lines on stderr.
func logger(*cli.Context) *report.Logger { return report.NewLogger(os.Stderr) }
