// Command bench-recipes runs torchfit's recipes beside their Python twins
// (package bench) and prints the table docs/performance.md keeps. `make bench-recipes`
// runs it; flags pick twins, thread counts, precisions, batch and
// repetitions.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/bench"
	"github.com/torchfit/torchfit/torch"
)

// compileModes are torch.compile's modes (its mode argument).
var compileModes = []string{"default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"}

// errUsage marks bad flags (exit status 2).
var errUsage = errors.New("usage")

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "bench-recipes:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "bench-recipes:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-recipes", flag.ContinueOnError)
	twins := fs.String("twins", "", "comma-separated twins (default: all registered)")
	threads := fs.String("threads", "1,2", "thread counts")
	precs := fs.String("precisions", "fp32,bf16", "precisions (fp32, bf16)")
	batch := fs.Int("batch", 8, "samples per step")
	length := fs.Int("length", 0, "sequence length (0: each twin's default)")
	reps := fs.Int("reps", 5, "interleaved repetitions")
	steps := fs.Int("steps", 3, "timed steps per side per repetition")
	warmup := fs.Int("warmup", 2, "untimed steps per side first")
	seed := fs.Uint64("seed", 1, "seed of weights and batch")
	out := fs.String("out", "", "also write the table to this file")
	raw := fs.String("json", "", "write every step time to this JSON file")
	countOnly := fs.Bool("count", false, "only count the calls into libtorch of one step per twin and precision (no Python)")
	shapes := fs.String("shapes", "", "only sweep padding multiples of the ASR twin's frames (lever 4, shape bucketing), e.g. 1,32: Go only")
	shapeSteps := fs.Int("shape-steps", 24, "steps per multiple of -shapes (a new batch of random lengths each)")
	growBatch := fs.String("grow-batch", "", "measure at each of these batch sizes (e.g. 2,4,8,16,32) and plot cost against batch into -plot")
	growLength := fs.String("grow-length", "", "measure at each of these lengths (e.g. 160,320,640) and plot cost against length into -plot")
	plotPNG := fs.String("plot", "bench-growth.png", "the picture -grow-batch or -grow-length draws")
	pyEnv := fs.String("python-env", "", "comma-separated KEY=VALUE added to the Python side's environment (e.g. MALLOC_MMAP_THRESHOLD_=33554432)")
	compile := fs.Bool("compile", false, "also time Python with torch.compile (inductor, -compile-mode; a second Python process) in the same rotation (default: on when the Python side's torch has torch.compile, 2.x)")
	compileMode := fs.String("compile-mode", "default", "torch.compile's mode for the compiled side: "+strings.Join(compileModes, ", ")+
		" (reduce-overhead: inductor's kernels replayed as CUDA graphs on a GPU)")
	perfCtl := fs.String("perf-control", "", "CTL,ACK: the FIFOs of a `perf record --control fifo:CTL,ACK -D -1` to switch on around Go's and eager Python's timed steps only (scripts/bench_split.sh)")
	profile := fs.Int("profile", 0, "after the timed steps, run this many Python steps under torch.profiler and count one Go step's calls: a second table of where the time goes (host floor; on a GPU, device time)")
	variants := fs.String("variants", "", "Go variants timed in the same rotation (see bench.Levers): "+strings.Join(bench.LeverNames(), ", "))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if !slices.Contains(compileModes, *compileMode) {
		return fmt.Errorf("%w: bad -compile-mode %q (want one of %s)", errUsage, *compileMode, strings.Join(compileModes, ", "))
	}
	if *profile < 0 {
		return fmt.Errorf("%w: bad -profile %d (steps, 0 for none)", errUsage, *profile)
	}
	var tws []bench.Twin
	if *twins == "" {
		tws = bench.Twins()
	} else {
		for _, n := range strings.Split(*twins, ",") {
			t, err := bench.Lookup(strings.TrimSpace(n))
			if err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			tws = append(tws, t)
		}
	}
	var ths []int
	for _, s := range strings.Split(*threads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("%w: bad -threads %q", errUsage, *threads)
		}
		ths = append(ths, n)
	}
	var ps []amp.Precision
	for _, s := range strings.Split(*precs, ",") {
		p := amp.Precision(strings.TrimSpace(s))
		if p != amp.FP32 && p != amp.BF16 {
			return fmt.Errorf("%w: bad -precisions %q (fp32, bf16)", errUsage, *precs)
		}
		ps = append(ps, p)
	}
	var vs []bench.Variant
	if *variants != "" {
		for _, n := range strings.Split(*variants, ",") {
			v, err := bench.Lever(strings.TrimSpace(n))
			if err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			vs = append(vs, v)
		}
	}
	axis, values := "", []int{0}
	var err error
	switch {
	case *growBatch != "" && *growLength != "":
		return fmt.Errorf("%w: -grow-batch and -grow-length: one at a time", errUsage)
	case *growBatch != "":
		axis = "batch"
		values, err = ints(*growBatch)
	case *growLength != "":
		axis = "length"
		values, err = ints(*growLength)
	}
	if err != nil {
		return err
	}
	if *shapes != "" {
		var ms []int
		for _, f := range strings.Split(*shapes, ",") {
			m, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || m < 1 {
				return fmt.Errorf("%w: bad -shapes %q", errUsage, *shapes)
			}
			ms = append(ms, m)
		}
		for _, tw := range tws {
			a, ok := tw.(bench.ASRTwin)
			if !ok {
				continue
			}
			for _, p := range ps {
				cfg := bench.Config{Threads: ths[0], Precision: p, Batch: *batch, Length: *length, Seed: *seed}
				rs, err := bench.ASRShapeSweep(a.Preset, cfg, ms, *shapeSteps, *warmup)
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "%s, %s, batch %d, %d thread(s), utterances of 50–100 %% of the longest length:\n", tw.Name(), p, *batch, ths[0])
				bench.ShapeTable(stdout, rs)
				fmt.Fprintln(stdout)
			}
		}
		return nil
	}
	if *countOnly {
		for _, tw := range tws {
			for _, p := range ps {
				if !bench.Supports(tw, p) {
					continue
				}
				cfg := bench.Config{Threads: ths[0], Precision: p, Batch: *batch, Length: *length, Seed: *seed}
				prof, err := bench.CountStep(tw, cfg, *warmup)
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "%s, %s, batch %d, %d thread(s): calls into libtorch in one training step\n", tw.Name(), p, *batch, ths[0])
				torch.WriteCallStats(stdout, prof.Calls)
				n, ops, bw, shim, rest := prof.Summary()
				pc := func(d time.Duration) float64 { return 100 * d.Seconds() / prof.Wall.Seconds() }
				fmt.Fprintf(stdout, "step %v: %d calls; operators %v (%.1f %%), backward %v (%.1f %%), other shim calls %v (%.1f %%), Go between calls %v (%.1f %%)\n",
					prof.Wall.Round(time.Microsecond), n, ops.Round(time.Microsecond), pc(ops), bw.Round(time.Microsecond), pc(bw),
					shim.Round(time.Microsecond), pc(shim), rest.Round(time.Microsecond), pc(rest))
				fmt.Fprintln(stdout)
			}
		}
		return nil
	}
	root, err := bench.RepoRoot()
	if err != nil {
		return err
	}
	var env []string
	if *pyEnv != "" {
		for _, kv := range strings.Split(*pyEnv, ",") {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("%w: bad -python-env %q (KEY=VALUE,...)", errUsage, *pyEnv)
			}
			env = append(env, strings.TrimSpace(kv))
		}
	}
	py, err := bench.StartPython(root, env...)
	if err != nil {
		return err
	}
	defer py.Close()
	dir, err := os.MkdirTemp("", "torchfit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	maj, mi, pa := torch.LibtorchVersion()
	logf("libtorch %d.%d.%d; BLAS %s; malloc: %s", maj, mi, pa, torch.BLAS(), torch.Malloc())
	if len(env) > 0 {
		logf("Python's environment adds %v", env)
	}
	info, err := py.Info()
	if err != nil {
		return fmt.Errorf("bench-recipes: the Python side's torch: %w", err)
	}
	compiled := info.Compile
	if flagSet(fs, "compile") {
		compiled = *compile
	} else if !info.Compile {
		logf("Python's torch %s has no torch.compile: no compiled-Python columns (-compile shows them as n/a)", info.Torch)
	}
	if flagSet(fs, "compile-mode") && !compiled {
		return fmt.Errorf("%w: -compile-mode needs the compiled side (-compile; Python's torch %s has torch.compile: %v)", errUsage, info.Torch, info.Compile)
	}
	var cpy *bench.Python
	if compiled {
		// A server of its own: dynamo, the inductor's compile workers
		// and kernels stay out of the eager twin's process.
		if cpy, err = bench.StartPython(root, env...); err != nil {
			return err
		}
		defer cpy.Close()
		logf("Python %s also with torch.compile (inductor, %s mode), in a second process", info.Torch, *compileMode)
	}
	var perf *bench.PerfControl
	if *perfCtl != "" {
		if perf, err = bench.OpenPerfControl(*perfCtl); err != nil {
			return err
		}
		defer perf.Close()
	}
	start := time.Now()
	var results []bench.Result
	for _, tw := range tws {
		for _, th := range ths {
			for _, p := range ps {
				if !bench.Supports(tw, p) {
					logf("%s, %s: skipped (the recipe does not train in %s)", tw.Name(), p, p)
					continue
				}
				for _, v := range values {
					cfg := bench.Config{Threads: th, Precision: p, Batch: *batch, Length: *length, Seed: *seed}
					switch axis {
					case "batch":
						cfg.Batch = v
					case "length":
						cfg.Length = v
					}
					logf("%s, %d thread(s), %s, batch %d, length %d", tw.Name(), th, p, cfg.Batch, cfg.Length)
					r, err := bench.Measure(py, tw, cfg, bench.Options{Reps: *reps, Steps: *steps, Warmup: *warmup, Variants: vs, Compiled: cpy, CompileMode: *compileMode, Perf: perf, Profile: *profile, Logf: logf}, dir)
					if err != nil {
						return err
					}
					results = append(results, r)
				}
			}
		}
	}
	if axis != "" {
		if err := bench.PlotGrowth(results, axis, *plotPNG); err != nil {
			return err
		}
		logf("wrote %s", *plotPNG)
	}
	var b strings.Builder
	bench.Table(&b, results)
	if len(vs) > 0 {
		b.WriteString("\n")
		bench.VariantTable(&b, results)
	}
	if *profile > 0 {
		b.WriteString("\n")
		bench.ProfileTable(&b, results)
	}
	fmt.Fprintf(&b, "\n%d interleaved repetitions of %d steps per side (after %d warm-up steps), %s in all.\n",
		*reps, *steps, *warmup, time.Since(start).Round(time.Second))
	if compiled && info.Compile {
		fmt.Fprintf(&b, "Compiled Python: torch %s in a process of its own, torch.compile (inductor, %s mode) of each twin's loss() "+
			"(or backward() and step()), AdamW eager; its first step (compilation included) is timed apart, and its warm-up goes on "+
			"while a step compiles a graph (3 more steps at most).\n", info.Torch, *compileMode)
	}
	fmt.Fprint(stdout, b.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if *raw != "" {
		js, err := json.MarshalIndent(results, "", " ")
		if err != nil {
			return err
		}
		return os.WriteFile(*raw, js, 0o644)
	}
	return nil
}

// flagSet reports whether the command line set the flag called name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// ints parses a comma-separated list of positive integers.
func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: bad list %q (positive integers, comma-separated)", errUsage, s)
		}
		out = append(out, n)
	}
	return out, nil
}
