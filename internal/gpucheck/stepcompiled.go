package gpucheck

import (
	"fmt"
	"strings"
	"time"

	"github.com/torchfit/torchfit/bench"
	"github.com/torchfit/torchfit/torch"
)

func init() {
	register(&Check{Name: "step-compiled", Doc: "each recipe's small preset four ways on CUDA, as cuda-graph compares a synthetic model's: " +
		"Go's eager step, the Python twin's eager step and the twin under torch.compile(mode=\"reduce-overhead\") (inductor's kernels " +
		"replayed as CUDA graphs; the optimizer step eager, as the twin's) in one rotation, then Go's step captured as a CUDA graph " +
		"(bench.MeasureGraph): ms/step, each over eager Python, and graph over compiled; the compiled twin's loss and gradients checked " +
		"against Go's (reported, and timed all the same: it is what a user gets)",
		Timeout: 9 * time.Minute, Run: stepCompiled})
}

// compiledTwins are step-time's twins but Mamba's, whose Python reference
// scan is a loop over positions that dynamo would unroll (minutes of
// compilation, not what a Mamba user compiles).
var compiledTwins = []string{"asr/tiny", "clip/cpu", "clip/cpu-naive", "ganvit/vit-cpu", "ganvit/gan-cpu", "tts/cpu"}

// compiledOptions time as step-time does; the compiled twin's first step
// (its compilation) is timed apart.
var compiledOptions = bench.Options{Reps: 3, Steps: 3, Warmup: 2, NoPeak: true, CompileMode: "reduce-overhead"}

func stepCompiled(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	return stepCompiledOn(env, gpu, compiledTwins, compiledOptions)
}

// stepCompiledOn is step-compiled's measurement on dev (tests run it on
// the CPU, where reduce-overhead has no graphs to replay and Go's step
// is not captured: its row says so).
func stepCompiledOn(env Env, dev torch.Device, twins []string, opts bench.Options) Result {
	r := Result{Figures: map[string]any{}}
	srv, err := startTwins(env, "step-compiled")
	if err != nil {
		return failf("%v", err)
	}
	defer srv.close()
	dir, root, py, info := srv.dir, srv.root, srv.py, srv.info
	r.Figures["python torch"] = info.Torch
	if !info.Compile {
		r.Status, r.Summary = Skip, fmt.Sprintf("skipped: Python's torch %s has no torch.compile", info.Torch)
		return r
	}
	// The compiled twin runs in a server of its own (bench.Options.Compiled).
	cp, err := bench.StartPython(root)
	if err != nil {
		return failf("python twin server (compiled): %v", err)
	}
	defer cp.Close()
	opts.Compiled = cp
	mode := opts.CompileMode
	if mode == "" {
		mode = "default"
	}
	r.Figures["timing"] = fmt.Sprintf("batch 8, %d interleaved repetitions × %d steps per side after %d warm-up steps; each step ends with the device synchronised; "+
		"the compiled twin's first step (compilation) timed apart; Go's graph: 5 replays after its warm-up, as step-time's", opts.Reps, opts.Steps, opts.Warmup)
	rows := []string{fmt.Sprintf("%-16s %-5s %8s %8s %8s %9s %13s %7s %9s %9s %9s  %s", "twin", "prec", "Go ms", "graph ms", "Py ms", "comp. ms",
		"compile s (gr)", "Go/Py", "graph/Py", "comp./Py", "graph/comp", "compiled check: loss Δ, worst grad Δ")}
	var failed, summary []string
	bud := env.budget()
	for _, name := range twins {
		if !bud.next(name) {
			continue
		}
		tw, err := bench.Lookup(name)
		if err != nil {
			failed = append(failed, name)
			rows = append(rows, fmt.Sprintf("%-16s %v", name, err))
			continue
		}
		cfg := stepConfig(tw, dev)
		p := cfg.Precision
		res, err := bench.Measure(py, tw, cfg, opts, dir)
		if err != nil {
			failed = append(failed, name)
			rows = append(rows, fmt.Sprintf("%-16s %-5s failed: %s", name, p, firstLine(err.Error())))
			continue
		}
		goMS, pyMS := 1000*res.GoMedian(), 1000*res.PyMedian()
		// Off CUDA there is no graph to time: MeasureGraph would run the
		// capturable step eagerly (step-time's test checks that on the CPU).
		gr, gerr := bench.GraphResult{NA: "a CUDA graph needs CUDA"}, error(nil)
		if dev.IsCUDA() {
			gr, gerr = bench.MeasureGraph(tw, cfg, bench.Options{Reps: opts.Reps, Steps: opts.Steps, Warmup: opts.Warmup, NoPeak: true})
		}
		if gerr != nil {
			failed = append(failed, name+" (graph)")
		}
		graph, graphPy := "–", "–"
		var graphMS float64
		if gerr == nil && gr.Captured {
			graphMS = gr.GraphMS
			graph, graphPy = fmt.Sprintf("%.2f", graphMS), fmt.Sprintf("%.2f", graphMS/pyMS)
			r.Figures[name+" graph/Python"] = round3(graphMS / pyMS)
		}
		comp, compile, compPy, graphComp, check := "–", "–", "–", "–", "–"
		if res.CompiledNA != "" {
			check = "n/a: " + res.CompiledNA
		} else if len(res.PyCompiled) > 0 {
			compMS := pyMS * res.CompiledOverEager()
			comp, compPy = fmt.Sprintf("%.2f", compMS), fmt.Sprintf("%.2f", compMS/pyMS)
			compile = fmt.Sprintf("%.1f (%d)", res.CompileSeconds, res.CompileGraphs)
			r.Figures[name+" compiled/Python"] = round3(compMS / pyMS)
			if graphMS > 0 {
				graphComp = fmt.Sprintf("%.2f", graphMS/compMS)
				r.Figures[name+" graph/compiled"] = round3(graphMS / compMS)
				summary = append(summary, fmt.Sprintf("%s %.2f", name, graphMS/compMS))
			}
			if c := res.CompiledCheck; c != nil {
				check = fmt.Sprintf("%.0e, %.0e (%s)", c.LossRel(), c.MaxRel, c.Worst)
				if !res.CompiledCheckOK() {
					check += " beyond tolerance"
				}
			}
		}
		rows = append(rows, fmt.Sprintf("%-16s %-5s %8.2f %8s %8.2f %9s %13s %7.2f %9s %9s %9s  %s", name, p, goMS, graph, pyMS, comp,
			compile, res.Ratio(), graphPy, compPy, graphComp, check))
		if gerr != nil {
			rows = append(rows, fmt.Sprintf("%-16s %-5s graph failed: %s", name, p, firstLine(gerr.Error())))
		} else if !gr.Captured {
			rows = append(rows, fmt.Sprintf("%-16s %-5s graph not captured: %s", name, p, gr.NA))
		}
	}
	r.Figures["Go eager and as a CUDA graph beside Python eager and torch.compile(mode=\""+mode+"\") (ms/step, medians; "+
		"–: not measured, the line below says why)"] = strings.Join(rows, "\n")
	switch {
	case len(failed) > 0:
		r.Status = Fail
		r.Summary = fmt.Sprintf("%d of %d twins failed on %s: %s", len(failed), len(twins), dev, strings.Join(failed, ", "))
	case len(summary) == 0:
		r.Status = Pass
		r.Summary = fmt.Sprintf("measured on %s; no twin has both a captured Go step and a compiled Python one (the table says why)", dev)
	default:
		r.Status = Pass
		r.Summary = fmt.Sprintf("Go's graph over compiled Python (%s) on %s: %s", mode, dev, strings.Join(summary, ", "))
	}
	bud.report(&r)
	return r
}
