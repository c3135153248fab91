package blas_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/internal/blas"
)

// skipWithoutDynamicOpenBLAS: the tests below need Debian's OpenBLAS (make deps).
func skipWithoutDynamicOpenBLAS(t *testing.T) blas.Info {
	i := blas.Read()
	if !i.Loaded || !i.Dynamic {
		t.Skipf("BLAS %+v: not an OpenBLAS built with DYNAMIC_ARCH", i)
	}
	return i
}

// matmulErr is the largest difference of a float32 product from float64's.
func matmulErr() float64 {
	var e float64
	torch.Tidy(func() {
		torch.ManualSeed(1)
		a, b := torch.Randn([]int64{67, 130}), torch.Randn([]int64{130, 45})
		ref := a.ToDType(torch.Float64).Matmul(b.ToDType(torch.Float64))
		e = a.Matmul(b).ToDType(torch.Float64).Sub(ref).Abs().Max().Item()
	})
	return e
}

// On a CPU whose OpenBLAS fell back to SSE kernels (forced here: Prescott),
// Apply selects the best kernels the CPU runs, and matrix products stay
// right; with the user's OPENBLAS_CORETYPE it changes nothing.
func TestApplyUpgradesFromPrescott(t *testing.T) {
	skipWithoutDynamicOpenBLAS(t)
	torch.Main().Do(func() {
		sel, err := blas.SelectUndoable("Prescott")
		require.NoError(t, err)
		defer sel.Undo()
		require.Equal(t, "Prescott", sel.Core)
		require.Less(t, matmulErr(), 1e-4)

		c := blas.Apply(blas.HostFeatures(), "Prescott")
		require.False(t, c.Changed, c.Reason)
		require.Equal(t, "Prescott", blas.Read().Core)

		f := blas.HostFeatures()
		d := blas.Choose("Prescott", f, "", blas.Has)
		c = blas.Apply(f, "")
		t.Logf("%s (%s)", c, f)
		require.Equal(t, d.Core != "", c.Changed)
		if c.Changed {
			require.Equal(t, d.Core, c.Core)
			require.Equal(t, d.Core, blas.Read().Core)
		}
		require.Less(t, matmulErr(), 1e-4)
	})
}

// At start-up (a new process): without OPENBLAS_CORETYPE torchfit keeps
// or improves OpenBLAS's choice; with it, the user's choice stands.
func TestStartupChoice(t *testing.T) {
	if os.Getenv("TORCHFIT_BLAS_CHILD") == "1" {
		json.NewEncoder(os.Stdout).Encode(blas.Startup)
		os.Exit(0)
	}
	skipWithoutDynamicOpenBLAS(t)
	run := func(env ...string) blas.Choice {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStartupChoice$")
		cmd.Env = []string{"TORCHFIT_BLAS_CHILD=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "OPENBLAS_CORETYPE=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.Output()
		require.NoError(t, err)
		var c blas.Choice
		require.NoError(t, json.Unmarshal(out, &c), string(out))
		return c
	}
	for _, core := range []string{"Prescott", "Haswell"} {
		c := run("OPENBLAS_CORETYPE=" + core)
		require.False(t, c.Changed, c.Reason)
		require.Equal(t, core, c.Core)
		require.Contains(t, c.Reason, "OPENBLAS_CORETYPE="+core)
	}
	c := run() // OPENBLAS_CORETYPE unset
	f := blas.HostFeatures()
	want := blas.Choose(c.Before, f, "", blas.Has)
	t.Logf("start-up: %s", c)
	require.Equal(t, want.Core != "", c.Changed)
	if c.Changed {
		require.Equal(t, want.Core, c.Core)
	} else {
		require.Equal(t, c.Before, c.Core)
	}
}
