package gpucheck

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecipesOnCPU runs the recipes check's own commands (make gpu-check
// runs them on CUDA) with --device cpu: every flag of them is one the
// recipe takes, each trains, and each resumes from its checkpoint and
// trains on. Mamba's --vram 8gb run is left out: minutes on this CPU.
// Then data-on-device's commands and seed-tables' TTS memory test on the
// same data.
func TestRecipesOnCPU(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "torchfit")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/torchfit").CombinedOutput()
	require.NoError(t, err, string(out))
	data := t.TempDir()
	require.NoError(t, PrepareData(context.Background(), bin, data))

	var runs []recipeRun
	for _, rr := range recipeRuns {
		if rr.name != "mamba" {
			runs = append(runs, rr)
		}
	}
	r := recipesOn(Env{Torchfit: bin, Data: data, Work: t.TempDir()}, "cpu", runs)
	require.Equal(t, Pass, r.Status, "%s\n%s", r.Summary, r.Log)
	for _, rr := range runs {
		fig, _ := r.Figures[rr.name].(string)
		t.Logf("%s: %s", rr.name, fig)
		require.Contains(t, fig, "(resumed from step ", rr.name)
		require.True(t, strings.HasPrefix(r.Figures[rr.name+" command"].(string), "torchfit "+rr.name+" "), rr.name)
		require.Contains(t, r.Figures[rr.name+" command"], "--device cpu")
	}

	// data-on-device's commands on the same data: on the CPU too the
	// device copy of the training set is counted, the host's is not.
	r = dataOnDeviceOn(Env{Torchfit: bin, Data: data, Work: t.TempDir()}, "cpu")
	t.Logf("data-on-device: %s", r.Summary)
	require.Equal(t, Pass, r.Status, "%s\n%s", r.Summary, r.Log)
	require.Contains(t, r.Figures["--data-on-device true command"], "--device cpu")

	// seed-tables' TTS memory test: a codec, then the table.
	x := ttsMemoryTest(Env{Torchfit: bin, Data: data, Work: t.TempDir()}, "cpu", "2", "1")
	t.Logf("tts memory-test:\n%s", x.out)
	require.Zero(t, x.code, "%s\n%s", x.cmdline(bin), x.out)
	require.Equal(t, []string{"tts", "memory-test"}, x.args[:2])
	require.Contains(t, x.out, "peak allocated")
}
