package gpucheck

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/bench"
	"github.com/torchfit/torchfit/torch"
)

// TestStepTimeOnCPU runs step-time's measurement and report on the CPU
// (on a GPU only `make gpu-check` runs it): the timing row, and the
// profile's row, whose GPU time is 0 without a GPU.
func TestStepTimeOnCPU(t *testing.T) {
	r := stepTimeOn(Env{Work: t.TempDir()}, torch.CPU, []string{"ganvit/gan-cpu"},
		bench.Options{Reps: 1, Steps: 1, Warmup: 1, NoPeak: true, Profile: 1})
	require.Equal(t, Pass, r.Status, "%s", r.Summary)
	require.Contains(t, r.Summary, "eager Go/Python on cpu: ganvit/gan-cpu ")
	require.Contains(t, r.Figures, "ganvit/gan-cpu Go/Python")
	require.Equal(t, 0.0, r.Figures["ganvit/gan-cpu device floor"])
	var prof string
	for k, v := range r.Figures {
		if strings.HasPrefix(k, "where the time goes") {
			prof = v.(string)
		}
	}
	lines := strings.Split(prof, "\n")
	require.Len(t, lines, 2, "%s", prof)
	f := strings.Fields(lines[1])
	t.Logf("%s", prof)
	require.Equal(t, []string{"ganvit/gan-cpu", "0.00", "0.00"}, f[:3])
	require.Equal(t, []string{"100%", "100%", "0", "0.0"}, f[4:8])
	host := r.Figures["ganvit/gan-cpu host floor"].(float64)
	require.Greater(t, host, 0.5)
	require.Less(t, host, 1.0)
}
