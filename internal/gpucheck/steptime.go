package gpucheck

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/bench"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

func init() {
	register(&Check{Name: "step-time", Doc: "each recipe's small preset trained eagerly on CUDA in bf16 (fp32 where the recipe has no bf16), Go beside its Python twin " +
		"(package bench, the same weights and batch, one step's loss and gradients checked): ms/step and Go/Python, ASR's also with its CTC on the device (asr.CTCOnDevice); " +
		"then Python's steps under torch.profiler: the GPU's busy time per step, the floor it puts under Go/Python, kernels and host syncs; " +
		"then each step that can be captured as a CUDA graph (bench.MeasureGraph): replay against the trainer's losses, ms per replay and graph/Python",
		Timeout: 3 * time.Minute, Run: stepTime})
}

// stepTwins are the bench twins step-time measures: each recipe's small
// preset (bench's CPU presets; on an H100 launch-bound models).
var stepTwins = []string{"asr/tiny", "clip/cpu", "clip/cpu-naive", "ganvit/vit-cpu", "ganvit/gan-cpu", "mamba/tiny", "tts/cpu"}

// stepOptions keep the check near a minute (the Mamba twin's Python scan
// is a loop over its 128 positions, the slowest step): 3 interleaved
// repetitions of 3 steps per side after 2 warm-up steps, no memory peaks.
// Then 3 Python steps run under torch.profiler (bench.Options.Profile).
var stepOptions = bench.Options{Reps: 3, Steps: 3, Warmup: 2, NoPeak: true, Profile: 3}

// stepConfig is how step-time and step-compiled run a twin on dev: batch
// 8, 4 threads, seed 1, bf16 where the twin trains in it, else fp32.
func stepConfig(tw bench.Twin, dev torch.Device) bench.Config {
	p := amp.FP32
	if bench.Supports(tw, amp.BF16) {
		p = amp.BF16
	}
	return bench.Config{Threads: 4, Precision: p, Batch: 8, Seed: 1, Device: dev}
}

func stepTime(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	return stepTimeOn(env, gpu, stepTwins, stepOptions)
}

// ctcVariant is the bench variant step-time times beside the ASR twins'
// default Go step: asr.CTCOnDevice on.
const ctcVariant = "ctc-on-device"

// eagerStep is a twin's eager measurement that its graph is set beside.
type eagerStep struct {
	name        string
	tw          bench.Twin
	cfg         bench.Config
	pyMS, ratio float64
}

// twinServer is what the checks that time bench twins start from: a scratch
// directory under env.Work, the repository root and the Python twin
// server (env.Python's, or pyref's) with its torch.
type twinServer struct {
	dir, root string
	py        *bench.Python
	info      bench.PyInfo
}

// startTwins starts them; close ends the server and removes the
// directory.
func startTwins(env Env, name string) (*twinServer, error) {
	root, err := bench.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(env.Work, name)
	if err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	if env.Python != "" {
		pyref.Python = env.Python
	}
	srv := &twinServer{dir: dir, root: root}
	if srv.py, err = bench.StartPython(root); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("python twin server: %w", err)
	}
	if srv.info, err = srv.py.Info(); err != nil {
		srv.close()
		return nil, fmt.Errorf("python twin server: %w", err)
	}
	return srv, nil
}

func (s *twinServer) close() {
	s.py.Close()
	os.RemoveAll(s.dir)
}

// stepTimeOn is step-time's measurement on dev (tests run it on the CPU).
func stepTimeOn(env Env, dev torch.Device, twins []string, opts bench.Options) Result {
	r := Result{Figures: map[string]any{}}
	srv, err := startTwins(env, "step-time")
	if err != nil {
		return failf("%v", err)
	}
	defer srv.close()
	dir, py, info := srv.dir, srv.py, srv.info
	r.Figures["python torch"] = info.Torch
	r.Figures["timing"] = fmt.Sprintf("batch 8, %d interleaved repetitions × %d steps per side after %d warm-up steps; each step ends with the device synchronised",
		opts.Reps, opts.Steps, opts.Warmup)
	rows := []string{fmt.Sprintf("%-22s %-5s %10s %10s %8s %8s  %s", "twin", "prec", "Go ms", "Python ms", "Go/Py", "Go waits", "check: loss Δ, worst grad Δ")}
	// Where the time goes, from the profile of Python's steps. The GPU's
	// busy ms per step is the same kernels' time on Go's side (the check
	// holds both to one computation): busy / Python ms is the lowest
	// Go/Python any binding can reach with these kernels (the device never
	// idle). Python's time in libtorch over its profiled step is the
	// lowest a binding that cost nothing could reach on the host side.
	// Go ms − busy is what Go's step leaves the GPU idle.
	prof := []string{fmt.Sprintf("%-16s %8s %9s %9s %8s %8s %8s %6s %12s", "twin", "GPU ms", "dev floor", "host floor", "Go idle", "Py idle", "kernels", "syncs", "calls Go/Py")}
	graphs := []string{fmt.Sprintf("%-16s %-5s %9s %9s %8s  %s", "twin", "prec", "graph ms", "graph/Py", "Go/Py", "replay vs trainer: worst loss Δ")}
	var graphFailed []string
	var failed []string
	var measured []eagerStep
	var ratios []string
	met := 0
	// The graphs are captured after every eager twin: with a deadline, a
	// quarter of the time left is kept for them.
	eager, graphBudget := env.budget(), env.budget()
	if !env.Deadline.IsZero() {
		eager.deadline = env.Deadline.Add(-time.Until(env.Deadline) / 4)
	}
	for _, name := range twins {
		if !eager.next(name) {
			continue
		}
		tw, err := bench.Lookup(name)
		if err != nil {
			failed = append(failed, name)
			rows = append(rows, fmt.Sprintf("%-22s %v", name, err))
			continue
		}
		cfg := stepConfig(tw, dev)
		p := cfg.Precision
		o := opts
		if strings.HasPrefix(name, "asr/") {
			// ASR's CTC on the device, timed beside the recipe's default.
			v, err := bench.Lever(ctcVariant)
			if err != nil {
				return failf("%v", err)
			}
			o.Variants = append(append([]bench.Variant(nil), o.Variants...), v)
		}
		res, err := bench.Measure(py, tw, cfg, o, dir)
		if err != nil {
			failed = append(failed, name)
			rows = append(rows, fmt.Sprintf("%-22s %-5s failed: %s", name, p, firstLine(err.Error())))
			continue
		}
		goMS, pyMS := 1000*res.GoMedian(), 1000*res.PyMedian()
		ratio := res.Ratio()
		if ratio <= 0.7 {
			met++
		}
		rows = append(rows, fmt.Sprintf("%-22s %-5s %10.2f %10.2f %8.2f %8d  %.0e, %.0e (%s)", name, p, goMS, pyMS, ratio,
			res.GoTransfers, res.Check.LossRel(), res.Check.MaxRel, res.Check.Worst))
		ratios = append(ratios, fmt.Sprintf("%s %.2f", name, ratio))
		r.Figures[name+" Go/Python"] = round3(ratio)
		if vs := res.Variants[ctcVariant]; len(vs) > 0 {
			vMS := goMS * res.VariantRatio(ctcVariant)
			vr := vMS / pyMS
			rows = append(rows, fmt.Sprintf("%-22s %-5s %10.2f %10.2f %8.2f %8s  (Go with asr.CTCOnDevice: on CUDA cuDNN's CTC, lengths on the device)",
				name+" "+ctcVariant, p, vMS, pyMS, vr, ""))
			r.Figures[name+" "+ctcVariant+" Go/Python"] = round3(vr)
		}
		if pp := res.PyProfile; pp != nil {
			busy := 1000 * pp.PerStep(pp.DeviceBusy)
			devFloor, host := pp.DeviceFloor(res.PyMedian()), pp.HostFloor()
			prof = append(prof, fmt.Sprintf("%-16s %8.2f %9.2f %10.2f %7.0f%% %7.0f%% %8.0f %6.1f %5d/%-6.0f", name, busy, devFloor, host,
				100*max(0, 1-busy/goMS), 100*max(0, 1-busy/pyMS), pp.PerStep(float64(pp.Kernels)), pp.PerStep(float64(pp.Syncs)),
				res.GoOps, pp.PerStep(float64(pp.TopOps))))
			r.Figures[name+" device floor"] = round3(devFloor)
			r.Figures[name+" host floor"] = round3(host)
		} else if res.ProfileNA != "" {
			prof = append(prof, fmt.Sprintf("%-16s no profile: %s", name, res.ProfileNA))
		}
		measured = append(measured, eagerStep{name: name, tw: tw, cfg: cfg, pyMS: pyMS, ratio: ratio})
	}
	// The graphs come after every eager figure, so that a capture that
	// fails cannot disturb one.
	for _, e := range measured {
		name, p := e.name, e.cfg.Precision
		if !graphBudget.next(name + " (graph)") {
			continue
		}
		gr, err := bench.MeasureGraph(e.tw, e.cfg, opts)
		switch {
		case err != nil:
			graphFailed = append(graphFailed, name)
			graphs = append(graphs, fmt.Sprintf("%-16s %-5s failed: %s", name, p, firstLine(err.Error())))
		case gr.Captured:
			gratio := gr.GraphMS / e.pyMS
			graphs = append(graphs, fmt.Sprintf("%-16s %-5s %9.2f %9.2f %8.2f  %.0e over %d steps", name, p, gr.GraphMS, gratio, e.ratio, gr.Worst, len(gr.GraphLoss)))
			r.Figures[name+" graph/Python"] = round3(gratio)
		default:
			graphs = append(graphs, fmt.Sprintf("%-16s %-5s not captured: %s", name, p, gr.NA))
		}
	}
	r.Figures["eager step, Go beside Python (ms/step, medians; Go waits: values one eager Go step moves between Go and tensors, "+
		"each a wait for the device, torch.HostTransfers)"] = strings.Join(rows, "\n")
	r.Figures["where the time goes (per step; GPU ms: the device busy in Python's profiled steps; dev floor: GPU ms / Python ms; "+
		"host floor: Python's profiled time in libtorch over its profiled step; idle: the step's time the GPU ran nothing; "+
		"calls: operators Go calls, and Python (the twin's own, not backward's))"] = strings.Join(prof, "\n")
	r.Figures["twins at or under the goal Go ≤ 0.7× Python"] = fmt.Sprintf("%d of %d", met, len(ratios))
	r.Figures["the step as a CUDA graph (graph ms: per replay, each followed by a synchronisation, dropout on; "+
		"the losses of 5 replays from the same weights, dropout off, against the trainer's eager steps)"] = strings.Join(graphs, "\n")
	failed = append(failed, graphFailed...)
	eager.left = append(eager.left, graphBudget.left...)
	if len(failed) > 0 {
		r.Status = Fail
		r.Summary = fmt.Sprintf("%d of %d twins failed on %s (%s); Go/Python: %s", len(failed), len(twins), dev,
			strings.Join(failed, ", "), strings.Join(ratios, ", "))
	} else {
		r.Status = Pass
		r.Summary = fmt.Sprintf("eager Go/Python on %s: %s", dev, strings.Join(ratios, ", "))
	}
	eager.report(&r)
	return r
}
