// Command gpucheck runs torchfit's CUDA checks (package
// internal/gpucheck), each in a child process, and writes gpu-report.md and
// gpu-report.json. `make gpu-check OUT=dir` builds it and torchfit with the
// cuda tag and runs it; `make gpu-pack` prepares what a GPU machine needs.
//
//	gpucheck -out DIR [-checks a,b] [-torchfit BIN] [-data DIR] [-build FILE] [-deadline UNIX]
//	gpucheck -prepare-data DIR -torchfit BIN
//	gpucheck -list
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/torchfit/torchfit/internal/gpucheck"
	"github.com/torchfit/torchfit/torch"
)

func main() {
	out := flag.String("out", "out/gpu-check", "where gpu-report.md and gpu-report.json go")
	checks := flag.String("checks", "", "comma-separated checks to run (default: all; -list names them)")
	bin := flag.String("torchfit", "bin/torchfit-cuda", "the torchfit binary built with the cuda tag")
	data := flag.String("data", ".device/gpucheck-data", "the recipes' data sets (-prepare-data makes them)")
	build := flag.String("build", "", "a JSON file of build facts to put in the report (make writes it)")
	prepare := flag.String("prepare-data", "", "make the recipes' data sets in this directory and exit")
	list := flag.Bool("list", false, "list the checks and exit")
	deadline := flag.Int64("deadline", 0, "when the run must have ended, in Unix seconds (make gpu-check GPUBUDGET=s sets it): "+
		"no check starts with under 20 s left, and each ends its items in time to report")
	childName := flag.String("child", "", "run one check in this process and print its result (internal)")
	flag.Parse()

	self, _ := os.Executable()
	py := os.Getenv("TORCHFIT_PYTHON")
	if py == "" {
		py = "python3"
	}
	work, err := os.MkdirTemp("", "gpucheck")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	absBin, _ := filepath.Abs(*bin)
	absData, _ := filepath.Abs(*data)
	env := gpucheck.Env{Torchfit: absBin, Python: py, Data: absData, Work: work, Self: self}

	switch {
	case *list:
		for _, c := range gpucheck.Checks() {
			fmt.Printf("%-22s %s\n", c.Name, c.Doc)
		}
		return
	case *prepare != "":
		if err := gpucheck.PrepareData(context.Background(), absBin, *prepare); err != nil {
			fatal(err)
		}
		return
	case *childName != "":
		if env.Deadline, err = gpucheck.ChildDeadline(); err != nil {
			fatal(err)
		}
		var r gpucheck.Result
		torch.Main().Do(func() { r = gpucheck.RunOne(*childName, env) })
		gpucheck.Emit(r)
		return
	}

	if *deadline < 0 {
		fmt.Fprintf(os.Stderr, "gpucheck: -deadline %d: a Unix time in seconds, or 0 for none\n", *deadline)
		os.Exit(2)
	}
	if *deadline > 0 {
		env.Deadline = time.Unix(*deadline, 0)
	}
	var names []string
	if *checks != "" {
		names = strings.Split(*checks, ",")
	}
	rep := gpucheck.Report{Started: time.Now(), Deadline: env.Deadline, Machine: machine()}
	if *build != "" {
		if b, err := os.ReadFile(*build); err == nil {
			_ = json.Unmarshal(b, &rep.Build)
		}
	}
	// The report is rewritten after each check, so a run cut short (a
	// lease's time limit) still leaves what it found.
	_, err = gpucheck.RunAll(context.Background(), env, names, func(r gpucheck.Result) {
		fmt.Printf("%-22s %-4s %6.1fs  %s\n", r.Name, r.Status, r.Seconds, r.Summary)
		rep.Checks = append(rep.Checks, r)
		rep.Seconds = time.Since(rep.Started).Seconds()
		if err := rep.Write(*out); err != nil {
			fatal(err)
		}
	})
	if err != nil {
		fatal(err)
	}
	p, f, s := rep.Counts()
	fmt.Printf("gpu-check: %d passed, %d failed, %d skipped; %s\n", p, f, s, filepath.Join(*out, "gpu-report.md"))
}

// machine collects the report's header facts.
func machine() map[string]any {
	m := map[string]any{"cpus": runtime.NumCPU(), "go": runtime.Version()}
	if h, err := os.Hostname(); err == nil {
		m["host"] = h
	}
	if b, err := exec.Command("nvidia-smi", "--query-gpu=name,memory.total,driver_version,compute_cap", "--format=csv,noheader").Output(); err == nil {
		m["nvidia-smi"] = strings.TrimSpace(string(b))
	} else {
		m["nvidia-smi"] = "none (" + err.Error() + ")"
	}
	if b, err := torch.Build(); err == nil {
		m["libtorch"] = b.Version + " (" + filepath.Dir(b.Library) + ")"
		m["cuda"] = b.CUDA.Runtime
		m["cudnn"] = b.CUDA.CuDNN
		m["nccl"] = b.CUDA.NCCL
		m["cuda available"] = b.CUDA.Available
		if !b.CUDA.Available {
			m["why no cuda"] = b.CUDA.Reason
		}
		for _, d := range b.CUDA.Devices {
			m[fmt.Sprintf("device %d", d.Index)] = fmt.Sprintf("%s, capability %s, %.1f GiB", d.Name, d.Capability(), float64(d.TotalBytes)/(1<<30))
		}
	}
	return m
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "gpucheck:", err)
	os.Exit(1)
}
