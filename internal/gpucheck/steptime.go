package gpucheck

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/bench"
	"github.com/torchfit/torchfit/internal/pyref"
)

func init() {
	register(&Check{Name: "step-time", Doc: "each recipe's small preset trained eagerly on CUDA in bf16 (fp32 where the recipe has no bf16), Go beside its Python twin " +
		"(package bench, the same weights and batch, one step's loss and gradients checked): ms/step and Go/Python",
		Timeout: 3 * time.Minute, Run: stepTime})
}

// stepTwins are the bench twins step-time measures: each recipe's small
// preset (bench's CPU presets; on an H100 launch-bound models).
var stepTwins = []string{"asr/tiny", "clip/cpu", "ganvit/vit-cpu", "ganvit/gan-cpu", "mamba/tiny", "tts/cpu"}

// stepOptions keep the check near a minute (the Mamba twin's Python scan
// is a loop over its 128 positions, the slowest step): 3 interleaved
// repetitions of 3 steps per side after 2 warm-up steps, no memory peaks.
var stepOptions = bench.Options{Reps: 3, Steps: 3, Warmup: 2, NoPeak: true}

// stepPrecision is bf16 where the twin trains in it, else fp32.
func stepPrecision(tw bench.Twin) amp.Precision {
	if bench.Supports(tw, amp.BF16) {
		return amp.BF16
	}
	return amp.FP32
}

func stepTime(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	r := Result{Figures: map[string]any{}}
	dir, err := os.MkdirTemp(env.Work, "step-time")
	if err != nil {
		return failf("scratch directory: %v", err)
	}
	defer os.RemoveAll(dir)
	root, err := bench.RepoRoot()
	if err != nil {
		return failf("%v", err)
	}
	if env.Python != "" {
		pyref.Python = env.Python
	}
	py, err := bench.StartPython(root)
	if err != nil {
		return failf("python twin server: %v", err)
	}
	defer py.Close()
	info, err := py.Info()
	if err != nil {
		return failf("python twin server: %v", err)
	}
	r.Figures["python torch"] = info.Torch
	r.Figures["timing"] = fmt.Sprintf("batch 8, %d interleaved repetitions × %d steps per side after %d warm-up steps; each step ends with the device synchronised",
		stepOptions.Reps, stepOptions.Steps, stepOptions.Warmup)
	rows := []string{fmt.Sprintf("%-16s %-5s %10s %10s %8s  %s", "twin", "prec", "Go ms", "Python ms", "Go/Py", "check: loss Δ, worst grad Δ")}
	var failed []string
	var ratios []string
	met := 0
	for _, name := range stepTwins {
		tw, err := bench.Lookup(name)
		if err != nil {
			failed = append(failed, name)
			rows = append(rows, fmt.Sprintf("%-16s %v", name, err))
			continue
		}
		p := stepPrecision(tw)
		cfg := bench.Config{Threads: 4, Precision: p, Batch: 8, Seed: 1, Device: gpu}
		res, err := bench.Measure(py, tw, cfg, stepOptions, dir)
		if err != nil {
			failed = append(failed, name)
			rows = append(rows, fmt.Sprintf("%-16s %-5s failed: %s", name, p, firstLine(err.Error())))
			continue
		}
		goMS, pyMS := 1000*res.GoMedian(), 1000*res.PyMedian()
		ratio := res.Ratio()
		if ratio <= 0.7 {
			met++
		}
		rows = append(rows, fmt.Sprintf("%-16s %-5s %10.2f %10.2f %8.2f  %.0e, %.0e (%s)", name, p, goMS, pyMS, ratio,
			res.Check.LossRel(), res.Check.MaxRel, res.Check.Worst))
		ratios = append(ratios, fmt.Sprintf("%s %.2f", name, ratio))
		r.Figures[name+" Go/Python"] = round3(ratio)
	}
	r.Figures["eager step, Go beside Python (ms/step, medians)"] = strings.Join(rows, "\n")
	r.Figures["twins at or under the goal Go ≤ 0.7× Python"] = fmt.Sprintf("%d of %d", met, len(ratios))
	if len(failed) > 0 {
		r.Status = Fail
		r.Summary = fmt.Sprintf("%d of %d twins failed on CUDA (%s); Go/Python: %s", len(failed), len(stepTwins),
			strings.Join(failed, ", "), strings.Join(ratios, ", "))
		return r
	}
	r.Status = Pass
	r.Summary = "eager Go/Python on CUDA: " + strings.Join(ratios, ", ")
	return r
}
