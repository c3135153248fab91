package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// Options of a measurement.
type Options struct {
	Reps   int // interleaved repetitions (0: 5)
	Steps  int // timed steps per side per repetition (0: 3)
	Warmup int // untimed steps per side before timing (0: 2)
	// Variants are other Go settings timed in the same rotation (a lever
	// turned off, say), each against the same Python steps.
	Variants []Variant
	// NoPeak skips the memory measurement.
	NoPeak bool
	// Compiled, when not nil, is a second Python side (a server of its
	// own, so that dynamo and the inductor's kernels never share a process
	// with the eager twin) that runs the twin under torch.compile
	// (scripts/twins/run.py says what it compiles) in the same rotation.
	// Its failures do not fail the measurement: Result.CompiledNA says
	// why it has no figures.
	Compiled *Python
	// CompileMode is torch.compile's mode for the Compiled side
	// ("default" when empty; "reduce-overhead": inductor's kernels
	// replayed as CUDA graphs on a GPU, what gpu-check's step-compiled
	// sets beside a captured Go step).
	CompileMode string
	// Perf, when not nil, records the timed steps of Go (not its
	// variants) and of eager Python, and nothing else.
	Perf *PerfControl
	// Profile, when above 0, adds where a step's time goes, after the
	// timed steps: Python's twin runs Profile steps (at most about 2 s of
	// them; none of a longer step: Result.ProfileNA) under torch.profiler
	// (Result.PyProfile: on CUDA the device's busy time and its kernels),
	// and one Go step's calls into libtorch are counted (Result.GoOps).
	Profile int
	// ProfileCap is the most seconds of Python's steps the profile holds
	// (0: maxProfiled, 2 s): fewer steps are profiled to stay under it, and
	// a step longer than it is not profiled at all.
	ProfileCap float64
	// Logf reports progress (nil: quiet).
	Logf func(format string, args ...any)
}

func (o Options) reps() int   { return cmp0(o.Reps, 5) }
func (o Options) steps() int  { return cmp0(o.Steps, 3) }
func (o Options) warmup() int { return cmp0(o.Warmup, 2) }

func cmp0(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// Variant is a Go-side setting: Set applies it before its steps and
// returns what undoes it.
type Variant struct {
	Name string
	Set  func() (undo func())
}

// CheckResult compares one step's loss and gradients, Go against Python.
type CheckResult struct {
	Loss    float64  `json:"loss"`    // Python's
	GoLoss  float64  `json:"go_loss"` // torchfit's
	Grads   int      `json:"grads"`   // gradients compared
	MaxAbs  float64  `json:"max_abs"` // largest |Δ| over all gradient elements
	MaxRel  float64  `json:"max_rel"` // largest |Δ| of a tensor over its largest |g|
	Worst   string   `json:"worst"`   // the tensor with MaxRel
	Missing []string `json:"missing"` // nonzero Python gradients torchfit has none for
	// Rels are the four largest relative differences, with their tensors.
	Rels [][2]any `json:"rels"`
	// Noise are the gradients that are zero in exact arithmetic (a bias a
	// training-mode batch norm follows), not compared: each side's largest
	// element (Go, Python) over the model's largest gradient element.
	Noise map[string][2]float64 `json:"noise"`
}

// LossRel is the loss difference relative to the loss.
func (c CheckResult) LossRel() float64 {
	return math.Abs(c.Loss-c.GoLoss) / math.Max(math.Abs(c.GoLoss), 1e-12)
}

// Tolerance is what Check accepts at a precision: the loss relative to
// itself; each gradient's largest difference relative to its largest
// element or, when that is smaller, to floor times the model's largest
// gradient element (a bias that batch norm follows has a gradient of pure
// rounding noise). Different op orders (PyTorch's packed attention
// projection, its merged masks) round differently: in float32 the ASR
// twin's gradients agree to 4e-5 (1e-6 but for those biases), in bfloat16
// autocast to 2.3e-2 (1.1e-2).
func Tolerance(p amp.Precision) (loss, grad, floor float64) {
	if p == amp.BF16 || p == amp.FP16 {
		return 2e-2, 5e-2, 1e-2
	}
	return 1e-5, 1e-3, 1e-3
}

// ErrMismatch is a twin whose loss or gradients differ from torchfit's
// beyond Tolerance.
var ErrMismatch = errors.New("bench: the Python twin does not compute what torchfit does")

// Result is one configuration measured.
type Result struct {
	Twin   string
	Config Config
	Check  CheckResult
	// Step seconds by repetition: torchfit, Python, and each variant.
	Go, Py   [][]float64
	Variants map[string][][]float64
	// The same steps' process CPU seconds (user + system, all threads):
	// on a shared machine, time spent waiting for a core is not in them.
	GoCPU, PyCPU [][]float64
	VariantsCPU  map[string][][]float64
	// Peak bytes of a steady-state step above what was held before it,
	// and what was held (model, gradients, optimizer state, batch).
	GoPeak, GoBase, PyPeak, PyBase int64
	// PyPeakNote is why PyPeak was not measured (PyPeakLimited), or "".
	PyPeakNote string
	// Python with torch.compile (Options.Compiled), in the same rotation:
	// step seconds and process CPU seconds by repetition.
	PyCompiled, PyCompiledCPU [][]float64 `json:",omitempty"`
	// CompileSeconds is the compiled twin's first step (compilation
	// included), timed on its own before the warm-up; CompileGraphs the
	// graphs dynamo compiled in the warm-up (more than one: graph breaks).
	CompileSeconds float64 `json:",omitempty"`
	CompileGraphs  int     `json:",omitempty"`
	// CompiledCheck is the compiled twin's loss and gradients against
	// torchfit's (the same check as Check, on a model compiled for it).
	// A compiled twin beyond Tolerance is still timed (it is what
	// torch.compile gives a user) and the table marks it
	// (CompiledCheckOK).
	CompiledCheck *CheckResult `json:",omitempty"`
	// CompiledNA says why a compiled side that was asked for has no
	// figures: a torch without torch.compile, the compilation's error (its
	// first line).
	CompiledNA string `json:",omitempty"`
	// PyProfile is the eager Python twin's steps under torch.profiler and
	// GoOps the operators one Go step calls from Go (Options.Profile).
	PyProfile *PyProfile `json:",omitempty"`
	GoOps     int        `json:",omitempty"`
	// GoTransfers are the same step's calls that move values between Go
	// and tensors (torch.HostTransfers): on CUDA each waits for the device.
	GoTransfers int `json:",omitempty"`
	// ProfileNA says why a profile that was asked for has none (the
	// profiler's error, first line): it does not fail the measurement.
	ProfileNA string `json:",omitempty"`
}

// PyProfile is what torch.profiler recorded of the Python twin's steps
// (scripts/twins/run.py, "profile"): totals over Steps steps, each ending
// with the device synchronised as timed steps do.
type PyProfile struct {
	Steps int `json:"steps"`
	// Wall is the profiled steps' seconds (the profiler's cost included).
	Wall float64 `json:"wall"`
	// DeviceBusy is the seconds the GPU was running something (the union
	// of its kernels', copies' and fills' intervals); 0 on the CPU.
	DeviceBusy float64 `json:"device_busy"`
	// Kernels and Copies (memcpy, memset) ran on the device; Launches and
	// Syncs are the host's CUDA runtime calls that queue a kernel or wait
	// for the device (the steps' final synchronisations not counted).
	Kernels  int `json:"kernels"`
	Copies   int `json:"copies"`
	Launches int `json:"launches"`
	Syncs    int `json:"syncs"`
	// Ops is every ATen operator the dispatcher recorded (nested and
	// backward ones included); TopOps those Python called itself.
	Ops    int `json:"ops"`
	TopOps int `json:"top_ops"`
	// Libtorch is the seconds the host spent in libtorch: the union of
	// the outermost operators', the autograd engine's and the CUDA
	// runtime's waits' intervals, on any thread. Wall − Libtorch is
	// Python's own time (and the profiler's between operators), so
	// Libtorch / Wall is what a binding that cost nothing would leave.
	Libtorch float64 `json:"libtorch"`
}

// PerStep returns v per profiled step.
func (p *PyProfile) PerStep(v float64) float64 { return v / float64(max(p.Steps, 1)) }

// HostFloor is Python's profiled time in libtorch over its profiled steps:
// the Go/Python a binding that cost nothing would reach with the same
// kernels, on the host's side.
func (p *PyProfile) HostFloor() float64 { return p.Libtorch / max(p.Wall, 1e-12) }

// DeviceFloor is the device's busy time per profiled step over pyStep
// (Python's timed step, seconds): the lowest Go/Python any binding can
// reach with these kernels, the device never idle; 0 on the CPU.
func (p *PyProfile) DeviceFloor(pyStep float64) float64 {
	return p.PerStep(p.DeviceBusy) / max(pyStep, 1e-12)
}

// HasCompiled reports whether a compiled Python side was asked for:
// figures or the reason there are none.
func (r Result) HasCompiled() bool { return len(r.PyCompiled) > 0 || r.CompiledNA != "" }

// Measure checks twin at cfg against Python and times it. py must be a
// running Python side; dir receives the exchange files.
func Measure(py *Python, tw Twin, cfg Config, o Options, dir string) (Result, error) {
	res := Result{Twin: tw.Name(), Config: cfg, Variants: map[string][][]float64{}, VariantsCPU: map[string][][]float64{}}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	torch.Main().Do(func() { torch.SetNumThreads(cfg.Threads) })
	script := filepath.Join(py.root, tw.Script())

	// The check: dropout off, one forward/backward on both sides.
	chk := cfg
	chk.Check = true
	inst, err := tw.Build(chk)
	if err != nil {
		return res, fmt.Errorf("bench: %s: build: %w", tw.Name(), err)
	}
	loss, grads, err := inst.Check()
	if err != nil {
		inst.Free()
		return res, fmt.Errorf("bench: %s: check: %w", tw.Name(), err)
	}
	gd := ptfile.NewDict()
	for _, g := range grads {
		gd.Set(g.Name, g.T)
	}
	path := filepath.Join(dir, "check.pt")
	err = inst.Export(path, ptfile.NewDict("loss", loss, "grads", gd))
	freeNamed(grads)
	inst.Free()
	if err != nil {
		return res, err
	}
	load := func(p *Python, path string, compile bool) error {
		req := map[string]any{"op": "load", "script": script, "file": path, "threads": cfg.Threads}
		if dev := cfg.Dev(); dev.IsCUDA() {
			req["device"] = dev.String()
		}
		if compile {
			req["compile"] = true
			if o.CompileMode != "" {
				req["compile_mode"] = o.CompileMode
			}
		}
		return p.Do(req, nil)
	}
	if err := load(py, path, false); err != nil {
		return res, err
	}
	_, _, floor := Tolerance(cfg.Precision)
	if err := py.Do(map[string]any{"op": "check", "floor": floor}, &res.Check); err != nil {
		return res, err
	}
	c := res.Check
	logf("%s %s: loss %.6f (Go) vs %.6f (Python), Δ %.1e; %d gradients, worst %.1e (%s)",
		tw.Name(), cfg.Precision, c.GoLoss, c.Loss, c.LossRel(), c.Grads, c.MaxRel, c.Worst)
	if err := checkErr(tw.Name(), cfg.Precision, c); err != nil {
		os.Remove(path)
		return res, err
	}
	cp := o.Compiled
	// compiledFailed records why the compiled side has no figures and
	// takes it out of the measurement.
	compiledFailed := func(what string, err error) {
		res.CompiledNA = naReason(err)
		res.PyCompiled, res.PyCompiledCPU = nil, nil
		cp = nil
		logf("%s %s: compiled Python: %s: %v", tw.Name(), cfg.Precision, what, err)
	}
	if cp != nil {
		var cc CheckResult
		t0 := time.Now()
		err := load(cp, path, true)
		if err == nil {
			err = cp.Do(map[string]any{"op": "check", "floor": floor}, &cc)
		}
		if err == nil {
			res.CompiledCheck = &cc
			logf("%s %s: compiled Python (%.1f s, compilation included): loss %.6f, Δ %.1e; %d gradients, worst %.1e (%s)",
				tw.Name(), cfg.Precision, time.Since(t0).Seconds(), cc.Loss, cc.LossRel(), cc.Grads, cc.MaxRel, cc.Worst)
			if err := checkErr(tw.Name()+" (torch.compile)", cfg.Precision, cc); err != nil {
				logf("%s %s: compiled Python: beyond tolerance, timed all the same: %v", tw.Name(), cfg.Precision, err)
			}
		}
		if err != nil {
			compiledFailed("check", err)
		}
	}
	os.Remove(path)

	// The timed model, with the recipe's dropout.
	inst, err = tw.Build(cfg)
	if err != nil {
		return res, fmt.Errorf("bench: %s: build: %w", tw.Name(), err)
	}
	defer inst.Free()
	path = filepath.Join(dir, "weights.pt")
	if err := inst.Export(path, nil); err != nil {
		return res, err
	}
	defer os.Remove(path)
	if err := load(py, path, false); err != nil {
		return res, err
	}
	if cp != nil {
		if err := load(cp, path, true); err != nil {
			compiledFailed("load", err)
		}
	}
	goSteps := func(n int) (ts, cs []float64, err error) {
		for k := 0; k < n; k++ {
			c0 := processCPU()
			t0 := time.Now()
			if err := inst.Step(); err != nil {
				return nil, nil, err
			}
			if dev := cfg.Dev(); dev.IsCUDA() {
				if err := torch.Synchronize(dev); err != nil {
					return nil, nil, err
				}
			}
			ts = append(ts, time.Since(t0).Seconds())
			cs = append(cs, processCPU()-c0)
		}
		return ts, cs, nil
	}
	pySteps := func(n int) ([]float64, []float64, error) {
		r, err := pyStepsOn(py, n)
		return r.Times, r.CPU, err
	}
	if _, _, err := goSteps(o.warmup()); err != nil {
		return res, err
	}
	if _, _, err := pySteps(o.warmup()); err != nil {
		return res, err
	}
	if cp != nil {
		if err := compiledWarmup(cp, o.warmup(), &res); err != nil {
			compiledFailed("warm-up", err)
		} else {
			logf("%s %s: compiled Python: first step %.1f s (compilation included), %d graphs",
				tw.Name(), cfg.Precision, res.CompileSeconds, res.CompileGraphs)
		}
	}
	// The peaks are CPU allocator figures: none on CUDA.
	if !o.NoPeak && !cfg.Dev().IsCUDA() {
		if res.GoPeak, res.GoBase, err = goPeak(inst); err != nil {
			return res, err
		}
		var r struct {
			Peak int64 `json:"peak"`
			Base int64 `json:"base"`
		}
		if lim, ok := tw.(PyPeakLimited); ok {
			res.PyPeakNote = lim.PyPeakUnmeasured(cfg)
		}
		if res.PyPeakNote == "" { // else not measured: the table says why
			if err := py.Do(map[string]any{"op": "peak"}, &r); err != nil {
				return res, err
			}
			res.PyPeak, res.PyBase = r.Peak, r.Base
		}
	}
	type side struct {
		name string
		run  func() ([]float64, []float64, error)
	}
	sides := []side{{"go", func() ([]float64, []float64, error) { return goSteps(o.steps()) }}}
	for _, v := range o.Variants {
		v := v
		sides = append(sides, side{v.Name, func() ([]float64, []float64, error) {
			undo := v.Set()
			defer undo()
			return goSteps(o.steps())
		}})
	}
	sides = append(sides, side{"python", func() ([]float64, []float64, error) { return pySteps(o.steps()) }})
	if cp != nil {
		sides = append(sides, side{compiledSide, func() ([]float64, []float64, error) {
			if cp == nil { // failed in an earlier repetition
				return nil, nil, nil
			}
			r, err := pyStepsOn(cp, o.steps())
			if g := sum(r.Graphs); err == nil && g > 0 {
				logf("%s %s: compiled Python compiled %d graphs in timed steps", tw.Name(), cfg.Precision, g)
			}
			return r.Times, r.CPU, err
		}})
	}
	for r := 0; r < o.reps(); r++ {
		for k := range sides {
			s := sides[(k+r)%len(sides)] // rotate who goes first
			ts, cs, err := o.recorded(s.name, s.run)
			if err != nil && s.name == compiledSide {
				compiledFailed("steps", err)
				continue
			}
			if err != nil {
				return res, fmt.Errorf("bench: %s %s: %w", tw.Name(), s.name, err)
			}
			switch s.name {
			case "go":
				res.Go, res.GoCPU = append(res.Go, ts), append(res.GoCPU, cs)
			case "python":
				res.Py, res.PyCPU = append(res.Py, ts), append(res.PyCPU, cs)
			case compiledSide:
				if cp != nil {
					res.PyCompiled, res.PyCompiledCPU = append(res.PyCompiled, ts), append(res.PyCompiledCPU, cs)
				}
			default:
				res.Variants[s.name] = append(res.Variants[s.name], ts)
				res.VariantsCPU[s.name] = append(res.VariantsCPU[s.name], cs)
			}
		}
		line := fmt.Sprintf("  rep %d: Go %.1f ms (CPU %.1f), Python %.1f ms (CPU %.1f)", r+1, median(res.Go[r])*1e3, median(res.GoCPU[r])*1e3,
			median(res.Py[r])*1e3, median(res.PyCPU[r])*1e3)
		if r < len(res.PyCompiled) {
			line += fmt.Sprintf(", compiled Python %.1f ms (CPU %.1f)", median(res.PyCompiled[r])*1e3, median(res.PyCompiledCPU[r])*1e3)
		}
		logf("%s", line)
	}
	if o.Profile > 0 {
		limit := o.ProfileCap
		if limit <= 0 {
			limit = maxProfiled
		}
		if err := profileSides(py, inst, cfg, o.Profile, limit, &res); err != nil {
			return res, fmt.Errorf("bench: %s: profile: %w", tw.Name(), err)
		}
	}
	return res, nil
}

// maxProfiled is the most seconds of Python's steps profileSides profiles
// by default (Options.ProfileCap).
const maxProfiled = 2.0

// profileSides fills res.PyProfile (n Python steps under torch.profiler,
// at most limit seconds of them; res.ProfileNA when the profiler fails)
// and res.GoOps (the operators of one Go step, counted).
func profileSides(py *Python, inst Instance, cfg Config, n int, limit float64, res *Result) error {
	// The profiler keeps about 2.4 KB per event, 4–5 events per op: one
	// profiled step of the Mamba twin's Python scan on the CPU (10 s of
	// tiny ops) passed 22 GB. Python's profiled time is held near the
	// limit, and a step longer than that is not profiled.
	med := res.PyMedian()
	n = min(n, max(1, int(limit/med)))
	var p PyProfile
	if med > limit {
		res.ProfileNA = fmt.Sprintf("not profiled: Python's step takes %.1f s, over %.0f s (the profiler would hold GBs of events)", med, limit)
	} else if err := py.Do(map[string]any{"op": "profile", "n": n}, &p); err != nil {
		res.ProfileNA = naReason(err)
	} else if p.Steps != n {
		res.ProfileNA = fmt.Sprintf("profile: %d steps for %d", p.Steps, n)
	} else {
		res.PyProfile = &p
	}
	var err error
	calls := torch.CountCalls(func() {
		if err = inst.Step(); err == nil && cfg.Dev().IsCUDA() {
			err = torch.Synchronize(cfg.Dev())
		}
	})
	res.GoOps, res.GoTransfers = 0, 0
	for _, c := range calls {
		if !strings.HasPrefix(c.Name, "(") {
			res.GoOps += int(c.Calls)
		}
	}
	for _, c := range torch.HostTransfers(calls) {
		res.GoTransfers += int(c.Calls)
	}
	return err
}

// recorded runs a side's steps, under perf when o.Perf says so and the
// side is Go's or eager Python's.
func (o Options) recorded(name string, run func() ([]float64, []float64, error)) ([]float64, []float64, error) {
	if o.Perf == nil || (name != "go" && name != "python") {
		return run()
	}
	if err := o.Perf.Enable(); err != nil {
		return nil, nil, err
	}
	ts, cs, err := run()
	if e := o.Perf.Disable(); err == nil && e != nil {
		return nil, nil, e
	}
	return ts, cs, err
}

// compiledSide names the compiled Python side in Measure's rotation.
const compiledSide = "python-compiled"

// pyStepsReply is run.py's answer to "steps".
type pyStepsReply struct {
	Times  []float64 `json:"times"`
	CPU    []float64 `json:"cpu"`
	Graphs []int     `json:"graphs"` // graphs dynamo compiled in each step (a compiled twin)
}

func pyStepsOn(p *Python, n int) (pyStepsReply, error) {
	var r pyStepsReply
	err := p.Do(map[string]any{"op": "steps", "n": n}, &r)
	if err == nil && len(r.Times) != n {
		err = fmt.Errorf("%w: steps: %d times for %d steps", ErrPython, len(r.Times), n)
	}
	return r, err
}

// compiledWarmup runs the compiled twin's warm-up: its first step, where
// torch.compile compiles, timed on its own (res.CompileSeconds), the rest
// of warmup steps one at a time, and up to 3 more while a step still
// compiles a graph, so that the timed steps run compiled code only.
func compiledWarmup(p *Python, warmup int, res *Result) error {
	const extra = 3
	last := 0
	for k := 0; k < warmup || (last > 0 && k < warmup+extra); k++ {
		r, err := pyStepsOn(p, 1)
		if err != nil {
			return err
		}
		if k == 0 {
			res.CompileSeconds = r.Times[0]
		}
		last = sum(r.Graphs)
		res.CompileGraphs += last
	}
	return nil
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// checkErr is an ErrMismatch when c is beyond Tolerance at p.
func checkErr(name string, p amp.Precision, c CheckResult) error {
	lt, gt, _ := Tolerance(p)
	if c.LossRel() > lt || c.MaxRel > gt || len(c.Missing) > 0 || c.Grads == 0 {
		return fmt.Errorf("%w: %s %s: loss %v vs %v, gradients %d compared, worst %.2e (%s), missing %v",
			ErrMismatch, name, p, c.GoLoss, c.Loss, c.Grads, c.MaxRel, c.Worst, c.Missing)
	}
	return nil
}

// naReason is the line a table shows for a compiled side that failed:
// the Python error's first line (with the next one when the first only
// introduces it, as "backend='inductor' raised:" does), at most 160
// characters.
func naReason(err error) string {
	msg := err.Error()
	var re *RemoteError
	if errors.As(err, &re) {
		msg = re.Msg
	}
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "failed"
	}
	out := lines[0]
	if strings.HasSuffix(out, ":") && len(lines) > 1 {
		out += " " + lines[1]
	}
	if r := []rune(out); len(r) > 160 {
		out = string(r[:159]) + "…"
	}
	return out
}

// goPeak measures one step's peak above what is held before it.
func goPeak(inst Instance) (peak, base int64, err error) {
	torch.Main().Do(func() {
		var st torch.MemStats
		if st, err = torch.MemoryStats(torch.CPU); err != nil {
			return
		}
		base = st.Allocated
		torch.ResetPeakMemory(torch.CPU)
	})
	if err != nil {
		return
	}
	if err = inst.Step(); err != nil {
		return
	}
	torch.Main().Do(func() {
		var st torch.MemStats
		st, err = torch.MemoryStats(torch.CPU)
		peak = st.PeakAllocated - base
	})
	return
}

func freeNamed(ns []nn.Named) {
	for _, n := range ns {
		n.T.Free()
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func flat(xss [][]float64) []float64 {
	var out []float64
	for _, xs := range xss {
		out = append(out, xs...)
	}
	return out
}

// Ratio is Go's median step over Python's.
func (r Result) Ratio() float64 { return median(flat(r.Go)) / median(flat(r.Py)) }

// GoMedian is torchfit's median step in seconds.
func (r Result) GoMedian() float64 { return median(flat(r.Go)) }

// PyMedian is the Python twin's median step in seconds.
func (r Result) PyMedian() float64 { return median(flat(r.Py)) }

// CPURatio is Go's median process CPU time per step over Python's.
func (r Result) CPURatio() float64 { return median(flat(r.GoCPU)) / median(flat(r.PyCPU)) }

// CompiledCheckOK reports whether the compiled twin's check is within
// Tolerance.
func (r Result) CompiledCheckOK() bool {
	return r.CompiledCheck != nil && checkErr("", r.Config.Precision, *r.CompiledCheck) == nil
}

// CompiledRatio is Go's median step over compiled Python's.
func (r Result) CompiledRatio() float64 { return median(flat(r.Go)) / median(flat(r.PyCompiled)) }

// CompiledCPURatio is Go's median process CPU time per step over compiled Python's.
func (r Result) CompiledCPURatio() float64 {
	return median(flat(r.GoCPU)) / median(flat(r.PyCompiledCPU))
}

// CompiledOverEager is compiled Python's median step over eager Python's
// (below 1: torch.compile is faster).
func (r Result) CompiledOverEager() float64 { return median(flat(r.PyCompiled)) / median(flat(r.Py)) }

// VariantCPURatio is a variant's median CPU time per step over torchfit's default.
func (r Result) VariantCPURatio(name string) float64 {
	return median(flat(r.VariantsCPU[name])) / median(flat(r.GoCPU))
}

// processCPU is the process's user + system CPU seconds so far.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// PairRatios are each repetition's Go median over the same repetition's Python median.
func (r Result) PairRatios() []float64 { return pairRatios(r.Go, r.Py) }

func pairRatios(a, b [][]float64) []float64 {
	out := make([]float64, 0, len(a))
	for k := range a {
		if k < len(b) {
			out = append(out, median(a[k])/median(b[k]))
		}
	}
	return out
}

// VariantRatio is a variant's median step over torchfit's default.
func (r Result) VariantRatio(name string) float64 {
	return median(flat(r.Variants[name])) / median(flat(r.Go))
}

// Profile is where one training step's time goes, as Go sees it.
type Profile struct {
	Calls []torch.CallStat // calls into libtorch by operator (or shim call)
	Wall  time.Duration    // the whole step
}

// Summary splits the step: ops (operator calls, their C++ work and the
// crossing included), backward (the autograd engine, all C++), shim
// calls that are not operators (frees, tensor info, scopes, gradients:
// torchfit's bookkeeping), and Go's own time between calls.
func (p Profile) Summary() (calls int64, ops, backward, shim, gorest time.Duration) {
	for _, s := range p.Calls {
		calls += s.Calls
		switch {
		case s.Name == "(backward)":
			backward += s.Time
		case strings.HasPrefix(s.Name, "("):
			shim += s.Time
		default:
			ops += s.Time
		}
	}
	return calls, ops, backward, shim, p.Wall - ops - backward - shim
}

// CountStep builds twin at cfg, runs warm-up steps, and counts the calls
// one training step makes into libtorch (torch.CountCalls).
func CountStep(tw Twin, cfg Config, warmup int) (Profile, error) {
	torch.Main().Do(func() { torch.SetNumThreads(cfg.Threads) })
	inst, err := tw.Build(cfg)
	if err != nil {
		return Profile{}, err
	}
	defer inst.Free()
	for k := 0; k < warmup; k++ {
		if err := inst.Step(); err != nil {
			return Profile{}, err
		}
	}
	var p Profile
	t0 := time.Now()
	p.Calls = torch.CountCalls(func() { err = inst.Step() })
	p.Wall = time.Since(t0)
	return p, err
}
