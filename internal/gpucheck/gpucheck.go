package gpucheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// Status is a check's outcome.
type Status string

// Outcomes.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is one check's outcome, figures and the command reproducing it.
type Result struct {
	Name    string         `json:"name"`
	Status  Status         `json:"status"`
	Summary string         `json:"summary"`
	Figures map[string]any `json:"figures,omitempty"`
	Cmd     string         `json:"cmd"`
	Seconds float64        `json:"seconds"`
	// Log is the end of the child's output when it failed.
	Log string `json:"log,omitempty"`
}

// Env is what checks need from the machine.
type Env struct {
	Torchfit string // the torchfit binary built with the cuda tag
	Python   string // python3 with torch
	Data     string // pre-generated recipe data sets (gpucheck-data)
	Work     string // scratch directory
	Self     string // this program, for children
	// Deadline, when set, is when the checks must have ended (see
	// budget.go): RunAll's for the whole run, a child's for its check.
	Deadline time.Time
}

// Check is one named check. Run executes in a child process.
type Check struct {
	Name    string
	Doc     string
	Timeout time.Duration
	// Hidden checks are helpers other checks run in children.
	Hidden bool
	Run    func(env Env) Result
}

var registry = map[string]*Check{}

func register(c *Check) {
	if _, dup := registry[c.Name]; dup {
		panic("gpucheck: duplicate check " + c.Name)
	}
	registry[c.Name] = c
}

// Checks lists the visible checks in run order.
func Checks() []*Check {
	var out []*Check
	for _, c := range registry {
		if !c.Hidden {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return order(out[i].Name) < order(out[j].Name) })
	return out
}

// runOrder puts the cheap facts first and the long recipe runs last.
var runOrder = []string{"facts", "memory-stats", "empty-cache", "memory-fraction-oom", "expandable-segments",
	"amp", "step-time", "cuda-graph", "step-compiled", "pinned-transfer", "nccl", "scan-cuda", "scan-cuda-memory", "monitor", "recipes", "oom-adapt", "data-on-device", "cpu-offload", "vram-presets",
	"seed-tables", "go-test"}

func order(name string) int {
	for i, n := range runOrder {
		if n == name {
			return i
		}
	}
	return len(runOrder)
}

// Lookup returns the check named name.
func Lookup(name string) (*Check, bool) {
	c, ok := registry[name]
	return c, ok
}

// RunOne runs check name in this process and returns its result (the child
// side of RunAll). A panic is a failure.
func RunOne(name string, env Env) (r Result) {
	c, ok := registry[name]
	if !ok {
		return Result{Name: name, Status: Fail, Summary: "no such check"}
	}
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			r = Result{Name: name, Status: Fail, Summary: fmt.Sprintf("panic: %v", p)}
		}
		r.Name = name
		r.Seconds = time.Since(start).Seconds()
		if r.Cmd == "" {
			r.Cmd = "make gpu-check GPUCHECK=" + name
		}
	}()
	return c.Run(env)
}

// marker starts the line a child prints its result on.
const marker = "GPUCHECK-RESULT "

// Emit prints r for the parent.
func Emit(r Result) {
	b, _ := json.Marshal(r)
	fmt.Printf("\n%s%s\n", marker, b)
}

// child runs `self -child name` with a timeout and reads its result.
func child(ctx context.Context, env Env, c *Check, extraEnv ...string) Result {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	start := time.Now()
	if !env.Deadline.IsZero() {
		timeout = min(timeout, env.Deadline.Sub(start))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.Self, "-child", c.Name)
	cmd.Env = append(os.Environ(), extraEnv...)
	// The child ends its items by this, to report before it is killed.
	cmd.Env = append(cmd.Env, deadlineVar+"="+start.Add(timeout-margin).Format(time.RFC3339Nano))
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := out.String()
	if i := strings.LastIndex(text, marker); i >= 0 {
		line := text[i+len(marker):]
		if j := strings.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		var r Result
		if json.Unmarshal([]byte(line), &r) == nil {
			if r.Status == Fail {
				r.Log = tail(text[:i], 3000)
			}
			return r
		}
	}
	r := Result{Name: c.Name, Status: Fail, Seconds: time.Since(start).Seconds(), Log: tail(text, 3000),
		Cmd: "make gpu-check GPUCHECK=" + c.Name}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		r.Summary = fmt.Sprintf("timed out after %s", timeout)
	case err != nil:
		r.Summary = "the check's process died: " + err.Error()
	default:
		r.Summary = "the check printed no result"
	}
	return r
}

func tail(s string, n int) string {
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// RunAll runs the named checks (all when names is empty) one child each,
// calling progress after each. With env.Deadline it starts no check with
// less than minStart left (each is reported as not started).
func RunAll(ctx context.Context, env Env, names []string, progress func(Result)) ([]Result, error) {
	var todo []*Check
	if len(names) == 0 {
		todo = Checks()
	} else {
		for _, n := range names {
			c, ok := registry[n]
			if !ok {
				return nil, fmt.Errorf("gpucheck: no check %q", n)
			}
			todo = append(todo, c)
		}
	}
	var out []Result
	for _, c := range todo {
		var r Result
		if left := time.Until(env.Deadline); !env.Deadline.IsZero() && left < minStart {
			r = notStarted(c, left)
		} else {
			r = child(ctx, env, c)
		}
		out = append(out, r)
		if progress != nil {
			progress(r)
		}
	}
	return out, nil
}

// skip is the result of a CUDA check on a machine without a usable GPU.
func skip(reason string) Result {
	return Result{Status: Skip, Summary: "skipped: no GPU (" + reason + ")"}
}

func failf(format string, args ...any) Result {
	return Result{Status: Fail, Summary: fmt.Sprintf(format, args...)}
}
