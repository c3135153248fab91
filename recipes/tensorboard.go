package recipes

import (
	"os"

	"github.com/torchfit/torchfit/report"
	"github.com/torchfit/torchfit/train"
)

// checkTensorBoardDir refuses a --tensorboard path that is an existing
// file other than a directory: the event files go into a directory
// (created when missing; the files of earlier runs stay).
func checkTensorBoardDir(dir string) error {
	if dir == "" {
		return nil
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return &ConfigError{Field: "tensorboard", Value: dir, Reason: "is a file, not a directory: name the directory for the event files"}
	}
	return nil
}

// openTensorBoard opens a TensorBoard sink writing a new event file in
// dir (nil sink and no file when dir is "").
func openTensorBoard(dir string) (*report.TensorBoard, train.Sink, error) {
	if dir == "" {
		return nil, nil, nil
	}
	if err := checkTensorBoardDir(dir); err != nil {
		return nil, nil, err
	}
	tb, err := report.OpenTensorBoard(dir)
	if err != nil {
		return nil, nil, Usagef("--tensorboard: %w", err)
	}
	return tb, tb.Sink, nil
}
