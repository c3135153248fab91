package recipes

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
)

// UserError is implemented by the error types a user causes — a bad flag, a
// config file, a missing or corrupt input — which a command line reports
// in one line with exit status 2. IsUserError finds one with errors.As.
type UserError interface {
	error
	UserError()
}

// UsageError is a user's mistake in words (a flag, a file, an input).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// UserError marks it as the user's.
func (*UsageError) UserError() {}

// Usagef returns a *UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Usage marks err as the user's (nil stays nil).
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}

// CheckpointError is a checkpoint a recipe cannot use: unreadable or
// corrupt, not that recipe's, or with a model description that is out of
// range or disagrees with the weights stored beside it. Nothing is built
// from such a file; a command line exits 2.
type CheckpointError struct {
	Recipe string // "asr", "clip", ...; "" for none
	Path   string
	Err    error
}

func (e *CheckpointError) Error() string {
	if e.Recipe == "" {
		return fmt.Sprintf("checkpoint %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("%s: checkpoint %s: %v", e.Recipe, e.Path, e.Err)
}

func (e *CheckpointError) Unwrap() error { return e.Err }

// UserError marks it as the user's.
func (*CheckpointError) UserError() {}

// ConfigError is a setting outside what it may be: Field is the flag's
// name (batch-size), Value what was given, and Reason why it does not fit
// (or Err, an underlying error). A command line reports it as the flag or
// the --config file's key that gave the value.
type ConfigError struct {
	Field  string
	Value  any
	Reason string
	Err    error
}

func (e *ConfigError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("--%s: %v", e.Field, e.Err)
	}
	v := fmt.Sprint(e.Value)
	if s, ok := e.Value.(string); ok {
		v = strconv.Quote(s)
	}
	return fmt.Sprintf("--%s %s: %s", e.Field, v, e.Reason)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// UserError marks it as the user's.
func (*ConfigError) UserError() {}

// IsUserError reports whether err was caused by the user: a UserError in
// its chain, a file that does not exist, or a file that is not a valid
// torch.save or safetensors file.
func IsUserError(err error) bool {
	var ue UserError
	return errors.As(err, &ue) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, ptfile.ErrBadFile) || errors.Is(err, safetensors.ErrBadFile)
}
