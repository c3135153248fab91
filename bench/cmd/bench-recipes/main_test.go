package main

import (
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// Bad flags are usage errors (exit status 2) found before anything runs.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"unknown flag", []string{"-nope"}},
		{"threads", []string{"-threads", "0"}},
		{"precision", []string{"-precisions", "fp8"}},
		{"twin", []string{"-twins", "nope/tiny"}},
		{"variant", []string{"-variants", "nope"}},
		{"shapes", []string{"-shapes", "0"}},
		{"profile", []string{"-profile", "-1"}},
		{"python env", []string{"-python-env", "NOEQUALS"}},
		{"grow list", []string{"-grow-batch", "2,x"}},
		{"grow both", []string{"-grow-batch", "2", "-grow-length", "64"}},
		{"compile mode", []string{"-compile-mode", "fast"}},
		{"compile mode, no compiled side", []string{"-compile=false", "-compile-mode", "reduce-overhead"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, io.Discard, io.Discard)
			require.Error(t, err)
			require.True(t, errors.Is(err, errUsage), "%v", err)
		})
	}
	require.ErrorIs(t, run([]string{"-h"}, io.Discard, io.Discard), flag.ErrHelp)
}
