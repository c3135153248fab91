package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
)

// The demo's path at small size, with both answers of the CPU probe forced
// whatever this machine has: "auto" trains in bf16 where the CPU computes it
// natively and in fp32 where it does not, says which and why, and finishes
// (on a CPU without native bf16 the forced branch runs emulated bf16: slow,
// hence few steps).
func TestDemoBothPrecisionBranches(t *testing.T) {
	if testing.Short() {
		t.Skip("synthesises speech and trains")
	}
	bin := binary(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		native string
		want   string
	}{
		{"1", "precision bf16 (auto: the CPU computes bfloat16 natively (" + amp.EnvNativeBF16 + "=1))"},
		{"0", "precision fp32 (auto: the CPU has no native bfloat16 (" + amp.EnvNativeBF16 + "=0)"},
	} {
		t.Run("native="+tc.native, func(t *testing.T) {
			cmd := exec.Command(bin, "demo", "--dir", dir, "--utterances", "48", "--epochs", "1", "--max-steps", "4")
			cmd.Env = append(os.Environ(), amp.EnvNativeBF16+"="+tc.native)
			out, err := cmd.CombinedOutput()
			text := string(out)
			require.NoError(t, err, text)
			require.Contains(t, text, tc.want)
			require.Contains(t, text, "4 steps of effective batch 8")
			require.Contains(t, text, "held-out test split")
			require.NotContains(t, text, "out of memory")
			_, err = os.Stat(filepath.Join(dir, "checkpoints", "checkpoint_step_000004.pt"))
			require.NoError(t, err)
			require.Equal(t, 1, strings.Count(text, "reference: "), text)
		})
	}
}
