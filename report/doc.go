// Package report is torchfit's front end for training: it renders the
// training core's events (package train) for people and files. The core
// never writes to the terminal; a program composes the sinks it wants:
//
//	events := report.Tee(report.Console(os.Stderr), metrics.Sink, report.Progress(os.Stderr))
//
// Console prints timestamped log lines; Metrics appends one JSON line per
// step and per evaluation (PlotMetrics draws them); TensorBoard writes
// the same scalars to an event file that `tensorboard --logdir` reads
// (OpenTensorBoard); Progress draws a
// progress bar when stderr is a terminal; SignalContext turns SIGINT and
// SIGTERM into a cancelled context, which makes train.Fit finish the step,
// save and return train.ErrInterrupted.
package report
