package bench

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
)

// The table has the compiled-Python columns only when a result asked for
// them: figures, or "n/a: " and the reason.
func TestTableCompiledColumns(t *testing.T) {
	base := Result{Twin: "asr/tiny", Config: Config{Threads: 1, Precision: amp.FP32, Batch: 8},
		Go: [][]float64{{0.08}, {0.08}}, Py: [][]float64{{0.1}, {0.1}},
		GoCPU: [][]float64{{0.08}, {0.08}}, PyCPU: [][]float64{{0.1}, {0.1}},
		Check: CheckResult{Loss: 1, GoLoss: 1, Grads: 3}}
	compiled := base
	compiled.PyCompiled, compiled.PyCompiledCPU = [][]float64{{0.05}, {0.05}}, [][]float64{{0.04}, {0.04}}
	compiled.CompileSeconds, compiled.CompileGraphs = 41.5, 6
	compiled.CompiledCheck = &CheckResult{Loss: 1, GoLoss: 1, Grads: 3, MaxRel: 2e-2, Worst: "conv.weight"}
	na := base
	na.CompiledNA = "torch 1.13 has no torch.compile"
	failed := base
	failed.CompiledNA = "BackendCompilerFailed: a | b"
	for _, tc := range []struct {
		name    string
		rs      []Result
		columns bool
		want    []string
	}{
		{"eager only", []Result{base}, false, []string{"| asr/tiny | 1 | fp32 | 8 | default | 80.0 | 100.0 | **0.80** |"}},
		{"compiled", []Result{compiled}, true, []string{"| 50.0 | **1.60** | 2.00 | 0.50 | 41.5 (6) | 0e+00, 2e-02 ✗ (conv.weight) |"}},
		{"not available", []Result{na, base}, true, []string{"| n/a: torch 1.13 has no torch.compile | – | – | – | – | – |", "| – | – | – | – | – | – |"}},
		{"failed", []Result{failed}, true, []string{`| n/a: BackendCompilerFailed: a \| b | – |`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			Table(&b, tc.rs)
			out := b.String()
			require.Equal(t, tc.columns, strings.Contains(out, "Go / compiled"), out)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 2+len(tc.rs))
			cols := strings.Count(lines[0], "|")
			for _, l := range lines {
				require.Equal(t, cols, strings.Count(l, "|")-strings.Count(l, `\|`), l)
			}
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
		})
	}
}

// naReason is the Python error's first line, with the next one when the
// first only introduces it.
func TestNAReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"not available", &RemoteError{Op: "load", Msg: "torch 1.13 has no torch.compile"}, "torch 1.13 has no torch.compile"},
		{"introduced", &RemoteError{Op: "steps", Msg: "BackendCompilerFailed: backend='inductor' raised:\n\nCppCompileError: C++ compile error\n\nCommand: g++ ...", Trace: "Traceback"},
			"BackendCompilerFailed: backend='inductor' raised: CppCompileError: C++ compile error"},
		{"wrapped", fmt.Errorf("bench: %w", &RemoteError{Op: "steps", Msg: "RuntimeError: boom\nmore"}), "RuntimeError: boom"},
		{"not remote", fmt.Errorf("%w: steps: no reply (EOF): Segmentation fault", ErrPython), "bench: python: steps: no reply (EOF): Segmentation fault"},
		{"long", errors.New(strings.Repeat("x", 300)), strings.Repeat("x", 159) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, naReason(tc.err))
		})
	}
	require.ErrorIs(t, &RemoteError{Op: "load", Msg: "x"}, ErrPython)
}
