package gpucheck

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/bench"
	"github.com/torchfit/torchfit/torch"
)

// TestStepTimeOnCPU runs step-time's measurement and report on the CPU
// (on a GPU only `make gpu-check` runs it): the timing row (ASR's twice:
// with its CTC on the device too), and the profile's row, whose GPU time
// is 0 without a GPU.
func TestStepTimeOnCPU(t *testing.T) {
	twins := []string{"ganvit/gan-cpu", "ganvit/vit-cpu", "asr/tiny"}
	r := stepTimeOn(Env{Work: t.TempDir()}, torch.CPU, twins,
		bench.Options{Reps: 1, Steps: 1, Warmup: 1, NoPeak: true, Profile: 1, ProfileCap: 60}) // a loaded machine's steps are profiled too
	require.Equal(t, Pass, r.Status, "%s", r.Summary)
	require.Contains(t, r.Summary, "eager Go/Python on cpu: ganvit/gan-cpu ")
	table := func(prefix string) []string {
		for k, v := range r.Figures {
			if strings.HasPrefix(k, prefix) {
				t.Logf("%s\n%s", k, v)
				return strings.Split(v.(string), "\n")
			}
		}
		t.Fatalf("no figure %q", prefix)
		return nil
	}
	eager := table("eager step")
	require.Len(t, eager, 1+len(twins)+1, "a row per twin, and ASR's with its CTC on the device")
	require.True(t, strings.HasPrefix(eager[4], "asr/tiny ctc-on-device "), eager[4])
	require.Contains(t, r.Figures, "asr/tiny ctc-on-device Go/Python")
	prof := table("where the time goes")
	require.Len(t, prof, 1+len(twins))
	graphs := table("the step as a CUDA graph")
	require.Len(t, graphs, 1+len(twins))
	for k, name := range twins {
		require.Contains(t, r.Figures, name+" Go/Python")
		require.Equal(t, 0.0, r.Figures[name+" device floor"])
		f := strings.Fields(prof[1+k])
		require.Equal(t, []string{name, "0.00", "0.00"}, f[:3])
		require.Equal(t, []string{"100%", "100%", "0", "0.0"}, f[4:8])
		host := r.Figures[name+" host floor"].(float64)
		require.Greater(t, host, 0.5)
		require.LessOrEqual(t, host, 1.0)
	}
	// The GAN's step (two models, two AdamWs) and the ViT's are
	// capturable, and on the CPU each runs eagerly against the trainer's.
	_, err := torch.OpSchema("aten::_fused_adamw_", "")
	for _, row := range graphs[1:3] {
		if err != nil {
			require.Contains(t, row, "has no _fused_adamw_")
		} else {
			require.Contains(t, row, "not captured: a CUDA graph needs CUDA: the capturable step ran eagerly")
		}
	}
	// The ViT's eager step (the trainer's) reads two values on the host:
	// the loss and the gradients' norm; the GAN's four (two windows).
	require.Equal(t, "4", strings.Fields(eager[1])[5], "GAN: Go waits")
	require.Equal(t, "2", strings.Fields(eager[2])[5], "ViT: Go waits")
	require.Equal(t, "2", strings.Fields(eager[3])[5], "ASR: Go waits")
}

// TestOpOverheadOnCPU runs op-overhead's measurement and report on the CPU
// (on a GPU make gpu-check runs it on CUDA and the CPU): a row per op
// with each side's time, and the two ratios. (Which side is faster is a
// benchmark's question: make bench-ops-floor.)
func TestOpOverheadOnCPU(t *testing.T) {
	r := opOverheadOn(Env{}, []torch.Device{torch.CPU}, opCalls{n: 5000, runs: 2, rounds: 1})
	require.Equal(t, Pass, r.Status, "%s", r.Summary)
	table := ""
	for k, v := range r.Figures {
		t.Logf("%s: %v", k, v)
		if strings.HasPrefix(k, "ns per call") {
			table = v.(string)
		}
	}
	lines := strings.Split(table, "\n")
	require.Len(t, lines, 3, "%s", table)
	for k, op := range []string{"x + y", "x.add_(y)"} {
		require.True(t, strings.HasPrefix(lines[1+k], "cpu     "+op), "%q", lines[1+k])
		for _, ratio := range []string{" Go/Python", " floor/Python"} {
			v := r.Figures["cpu "+op+ratio].(float64)
			require.True(t, v > 0 && !math.IsInf(v, 0), "%s%s = %v", op, ratio, v)
		}
	}
}

// TestStepCompiledOnCPU runs step-compiled's measurement and report on
// the CPU: with a torch that has torch.compile (2.x) the ViT twin is
// timed eagerly on both sides and compiled in reduce-overhead mode (on
// the CPU inductor without graphs), its compiled loss and gradients
// checked, and the graph column says why Go's step was not captured;
// with one that has none (1.13) the check says so and is skipped.
func TestStepCompiledOnCPU(t *testing.T) {
	r := stepCompiledOn(Env{Work: t.TempDir()}, torch.CPU, []string{"ganvit/vit-cpu"},
		bench.Options{Reps: 1, Steps: 1, Warmup: 1, NoPeak: true, CompileMode: "reduce-overhead"})
	for k, v := range r.Figures {
		t.Logf("%s:\n%v", k, v)
	}
	if !strings.HasPrefix(r.Figures["python torch"].(string), "2.") {
		require.Equal(t, Skip, r.Status, "%s", r.Summary)
		require.Contains(t, r.Summary, "has no torch.compile")
		return
	}
	require.Equal(t, Pass, r.Status, "%s", r.Summary)
	var rows []string
	for k, v := range r.Figures {
		if strings.HasPrefix(k, "Go eager and as a CUDA graph") {
			require.Contains(t, k, `torch.compile(mode="reduce-overhead")`)
			rows = strings.Split(v.(string), "\n")
		}
	}
	require.Len(t, rows, 3, "a header, the twin's row and why its graph is not there")
	f := strings.Fields(rows[1])
	require.Equal(t, []string{"ganvit/vit-cpu", "bf16"}, f[:2])
	require.Equal(t, "–", f[3], "no graph on the CPU")
	ratio, ok := r.Figures["ganvit/vit-cpu compiled/Python"].(float64)
	require.True(t, ok, "the compiled twin was timed: %s", rows[1])
	require.Greater(t, ratio, 0.0)
	require.NotContains(t, rows[1], "beyond tolerance")
	require.Contains(t, rows[2], "graph not captured: a CUDA graph needs CUDA")
	require.Contains(t, r.Summary, "no twin has both")
}
