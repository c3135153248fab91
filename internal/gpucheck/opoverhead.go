package gpucheck

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/torchfit/torchfit/bench"
	"github.com/torchfit/torchfit/internal/opfloor"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

func init() {
	register(&Check{Name: "op-overhead", Doc: "one op's host time on 1-element tensors, on CUDA and on the CPU: libtorch from a C++ loop with no binding " +
		"(the floor any binding can reach), torchfit's typed path and Python, interleaved rounds, best of each; " +
		"floor/Python is the lowest eager Go/Python a launch-bound step of the same ops can reach",
		Timeout: 2 * time.Minute, Run: opOverhead})
}

// opCalls is how a side is timed: runs repetitions of n calls per round,
// rounds interleaved rounds (floor, Go, Python), the best of each side.
type opCalls struct{ n, runs, rounds int }

var opOverheadCalls = opCalls{n: 20000, runs: 3, rounds: 3}

func opOverhead(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	return opOverheadOn(env, []torch.Device{gpu, torch.CPU}, opOverheadCalls)
}

// opRow is one op on one device: nanoseconds per call.
type opRow struct {
	dev               torch.Device
	op                opfloor.Op
	floor, goNS, pyNS float64
}

// opOverheadOn measures each op on each device (tests run it on the CPU).
func opOverheadOn(env Env, devs []torch.Device, c opCalls) Result {
	root, err := bench.RepoRoot()
	if err != nil {
		return failf("%v", err)
	}
	py := env.Python
	if py == "" {
		py = pyref.Python
	}
	torch.Main().Do(func() { torch.SetNumThreads(1) })
	r := Result{Figures: map[string]any{}}
	var rows []*opRow
	for _, dev := range devs {
		add := &opRow{dev: dev, op: opfloor.Add, floor: math.Inf(1), goNS: math.Inf(1), pyNS: math.Inf(1)}
		inplace := &opRow{dev: dev, op: opfloor.AddInPlace, floor: math.Inf(1), goNS: math.Inf(1), pyNS: math.Inf(1)}
		rows = append(rows, add, inplace)
		for round := 0; round < c.rounds; round++ {
			for _, row := range []*opRow{add, inplace} {
				f, err := opfloor.PerCall(dev, row.op, c.n, c.runs)
				if err != nil {
					return failf("floor, %v on %v: %v", row.op, dev, err)
				}
				g, err := goPerCall(dev, row.op, c.n, c.runs)
				if err != nil {
					return failf("torchfit, %v on %v: %v", row.op, dev, err)
				}
				row.floor, row.goNS = math.Min(row.floor, f), math.Min(row.goNS, g)
			}
			p, err := pyPerCall(py, root, dev, c)
			if err != nil {
				return failf("python on %v: %v", dev, err)
			}
			r.Figures["python torch"] = p.Torch
			add.pyNS, inplace.pyNS = math.Min(add.pyNS, p.Add), math.Min(inplace.pyNS, p.AddInPlace)
		}
	}
	lines := []string{fmt.Sprintf("%-7s %-10s %9s %9s %9s %8s %9s", "device", "op", "floor ns", "Go ns", "Py ns", "Go/Py", "floor/Py")}
	var summary []string
	for _, row := range rows {
		goPy, floorPy := row.goNS/row.pyNS, row.floor/row.pyNS
		lines = append(lines, fmt.Sprintf("%-7s %-10s %9.0f %9.0f %9.0f %8.2f %9.2f", row.dev, row.op, row.floor, row.goNS, row.pyNS, goPy, floorPy))
		key := fmt.Sprintf("%v %v", row.dev, row.op)
		r.Figures[key+" Go/Python"] = round3(goPy)
		r.Figures[key+" floor/Python"] = round3(floorPy)
		summary = append(summary, fmt.Sprintf("%s: Go/Python %.2f, floor/Python %.2f", key, goPy, floorPy))
	}
	r.Figures["timing"] = fmt.Sprintf("1-element float32 tensors, one thread; %d interleaved rounds (floor, Go, Python) of %d runs × %d calls per side, the best run; on CUDA each run ends with a wait for the device",
		c.rounds, c.runs, c.n)
	r.Figures["ns per call (floor: libtorch from a C++ loop with no binding, package internal/opfloor; Go: torchfit's (*Tensor).Add then Free, AddIn)"] = strings.Join(lines, "\n")
	r.Status = Pass
	r.Summary = strings.Join(summary, "; ")
	return r
}

// goPerCall times torchfit's ops as BenchmarkOpAdd and BenchmarkOpAddInPlace
// do, on dev: the best of runs repetitions of n calls, ns per call.
func goPerCall(dev torch.Device, op opfloor.Op, n, runs int) (float64, error) {
	best := math.Inf(1)
	err := torch.Main().DoErr(func() error {
		var syncErr error
		err := torch.Try(func() {
			x := torch.Zeros([]int64{1}, torch.Float32, dev)
			y := torch.Ones([]int64{1}, torch.Float32, dev)
			defer x.Free()
			defer y.Free()
			for r := 0; r < runs && syncErr == nil; r++ {
				start := time.Now()
				if op == opfloor.AddInPlace {
					for i := 0; i < n; i++ {
						x.AddIn(y, 1)
					}
				} else {
					for i := 0; i < n; i++ {
						x.Add(y).Free()
					}
				}
				syncErr = torch.Synchronize(dev)
				best = math.Min(best, float64(time.Since(start).Nanoseconds())/float64(n))
			}
		})
		if err != nil {
			return err
		}
		return syncErr
	})
	return best, err
}

type pyOps struct {
	Torch      string  `json:"torch"`
	Add        float64 `json:"add"`
	AddInPlace float64 `json:"add_"`
}

func pyPerCall(py, root string, dev torch.Device, c opCalls) (pyOps, error) {
	var out pyOps
	spec, _ := json.Marshal(map[string]any{"device": dev.String(), "n": c.n, "runs": c.runs})
	err := runPy(py, filepath.Join(root, "scripts", "gpucheck", "op_overhead.py"), []string{string(spec)}, nil, &out)
	return out, err
}
