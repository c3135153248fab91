package gpucheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Datasets are the small data sets the recipe checks train on, made by
// `torchfit RECIPE data` (which needs espeak-ng, sox and bible-kjv: the GPU
// machines have none, so `make gpu-pack` makes them beforehand and they
// travel in .device/gpucheck-data).
var Datasets = []struct {
	Name string
	Args []string // after "torchfit"; OUT is replaced by the directory
}{
	{"asr", []string{"asr", "data", "--out", "OUT", "--utterances", "48", "--workers", "2", "--seed", "1"}},
	{"clip", []string{"clip", "data", "--out", "OUT", "--images", "96", "--seed", "1", "--workers", "2"}},
	{"ganvit", []string{"ganvit", "data", "--out", "OUT", "--clips", "40", "--seconds", "3", "--workers", "2"}},
	{"tts", []string{"tts", "data", "--out", "OUT", "--utterances", "32", "--seed", "3", "--workers", "2"}},
	{"mamba", []string{"mamba", "data", "--out", "OUT", "--workers", "2"}},
}

// PrepareData makes every data set under dir with the torchfit binary.
func PrepareData(ctx context.Context, torchfit, dir string) error {
	for _, d := range Datasets {
		out := filepath.Join(dir, d.Name)
		if _, err := os.Stat(out); err == nil {
			continue
		}
		args := make([]string, len(d.Args))
		for i, a := range d.Args {
			args[i] = strings.ReplaceAll(a, "OUT", out)
		}
		cmd := exec.CommandContext(ctx, torchfit, args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("torchfit %s: %v\n%s", strings.Join(args, " "), err, tail(string(b), 2000))
		}
	}
	return nil
}

// commandTimeout bounds one torchfit command of a check.
const commandTimeout = 100 * time.Second

// run is one torchfit command of a check.
type run struct {
	args    []string
	code    int
	seconds float64
	out     string
	metrics []map[string]any
}

func (r *run) cmdline(bin string) string {
	return "torchfit " + strings.Join(r.args, " ")
}

// torchfit runs the binary; metrics, when set, is read back afterwards.
func torchfit(ctx context.Context, env Env, metrics string, args ...string) *run {
	r := &run{args: args}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.Torchfit, args...)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r.seconds = time.Since(start).Seconds()
	r.out = out.String()
	r.code = cmd.ProcessState.ExitCode()
	if err != nil && r.code == 0 {
		r.code = -1
	}
	if metrics != "" {
		if f, err := os.Open(metrics); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var m map[string]any
				if json.Unmarshal(sc.Bytes(), &m) == nil {
					r.metrics = append(r.metrics, m)
				}
			}
			f.Close()
		}
	}
	return r
}

// lastStep is the last step line of the metrics.
func (r *run) lastStep() map[string]any {
	for i := len(r.metrics) - 1; i >= 0; i-- {
		if _, ok := r.metrics[i]["loss"]; ok {
			return r.metrics[i]
		}
	}
	return nil
}

func (r *run) peakMiB() float64 { return r.maxMiB("peak") }

// stepSeconds is the median time of the steps after the first (the
// trainer's own timing of each: samples / samples_per_sec), and how many
// steps it is the median of; NaN with none.
func (r *run) stepSeconds() (float64, int) {
	var ts []float64
	first := true
	for _, m := range r.metrics {
		n, rate := num(m["samples"]), num(m["samples_per_sec"])
		if !(n > 0 && rate > 0) { // NaN for lines without them
			continue
		}
		if first {
			first = false
			continue
		}
		ts = append(ts, n/rate)
	}
	if len(ts) == 0 {
		return math.NaN(), 0
	}
	sort.Float64s(ts)
	return ts[len(ts)/2], len(ts)
}

// maxMiB is the highest value of a byte-valued metrics field, in MiB.
func (r *run) maxMiB(field string) float64 {
	p := 0.0
	for _, m := range r.metrics {
		if v := num(m[field]); v == v { // lines without the field are NaN
			p = max(p, v)
		}
	}
	return p / mib
}

func init() {
	register(&Check{Name: "recipes", Doc: "each recipe trains a few steps on CUDA with mixed precision from its seed's flags, then resumes from its checkpoint",
		Timeout: 7 * time.Minute, Run: recipes})
	register(&Check{Name: "oom-adapt", Doc: "ASR under a memory cap that holds micro-batch 1 but not 16 adapts mid-run at the same effective batch",
		Timeout: 3 * time.Minute, Run: oomAdapt})
	register(&Check{Name: "go-test", Doc: "the Go tests of the packages with CUDA paths, with the cuda tag",
		Timeout: 4 * time.Minute, Run: goTest})
}

// recipeRun is one recipe's commands on CUDA: the last resumes from a
// checkpoint of the one before and trains on.
type recipeRun struct {
	name string
	// steps are torchfit commands; DATA, WORK and CODEC are replaced, and
	// an argument LAST:dir is the newest checkpoint in WORK/dir.
	steps [][]string
}

// with returns args with the pairs flag, value set: replaced where args
// has the flag, else appended.
func with(args []string, pairs ...string) []string {
	out := slices.Clone(args)
	for k := 0; k+1 < len(pairs); k += 2 {
		if i := slices.Index(out, pairs[k]); i >= 0 && i+1 < len(out) {
			out[i+1] = pairs[k+1]
		} else {
			out = append(out, pairs[k], pairs[k+1])
		}
	}
	return out
}

var (
	asrTrain = []string{"asr", "train", "--data", "DATA", "--preset", "optimized", "--device", "cuda", "--mixed_precision",
		"--batch_size", "4", "--gradient_accumulation_steps", "2", "--max-steps", "8", "--valid-limit", "8",
		"--checkpoint-dir", "WORK/ck", "--metrics", "WORK/metrics.jsonl"}
	clipTrain = []string{"clip", "train", "--data", "DATA", "--device", "cuda", "--mixed-precision", "auto", "--max-steps", "6",
		"--batch-size", "8", "--grad-accum", "4",
		"--checkpoint-dir", "WORK/ck", "--metrics", "WORK/metrics.jsonl"}
	ganvitTrain = []string{"ganvit", "train", "--data", "DATA", "--device", "cuda", "--preset", "cpu", "--vit", "tiny",
		"--gan-epochs", "1", "--epochs", "1", "--max-steps", "4", "--checkpoint-dir", "WORK/ck", "--metrics", "WORK/metrics.jsonl"}
	ttsTrain = []string{"tts", "train", "--data", "DATA", "--codec", "CODEC", "--device", "cuda", "--mixed-precision", "auto", "--max-steps", "6",
		"--batch-size", "2", "--grad-accum", "2", "--checkpoint-dir", "WORK/gpt", "--metrics", "WORK/metrics.jsonl"}
	mambaTrain = []string{"mamba", "train", "--data_dir", "DATA", "--device", "cuda", "--vram", "8gb", "--max-steps", "6",
		"--eval-tokens", "4096", "--checkpoint-dir", "WORK/ck", "--metrics", "WORK/metrics.jsonl"}
)

var recipeRuns = []recipeRun{
	{"asr", [][]string{asrTrain,
		with(asrTrain, "--max-steps", "10", "--metrics", "WORK/resumed.jsonl", "--resume", "LAST:ck")}},
	{"clip", [][]string{clipTrain,
		with(clipTrain, "--max-steps", "8", "--metrics", "WORK/resumed.jsonl", "--resume", "LAST:ck")}},
	{"ganvit", [][]string{ganvitTrain, // the classifier's checkpoint, written after the GAN's
		with(ganvitTrain, "--epochs", "2", "--max-steps", "8", "--metrics", "WORK/resumed.jsonl", "--resume", "WORK/ck/checkpoint_epoch_1.pt")}},
	{"tts", [][]string{
		{"tts", "train-codec", "--data", "DATA", "--device", "cuda", "--max-steps", "6", "--batch-size", "4",
			"--checkpoint-dir", "WORK/codec"},
		ttsTrain,
		with(ttsTrain, "--max-steps", "8", "--metrics", "WORK/resumed.jsonl", "--resume", "LAST:gpt")}},
	{"mamba", [][]string{mambaTrain,
		with(mambaTrain, "--max-steps", "8", "--metrics", "WORK/resumed.jsonl", "--resume", "LAST:ck")}},
}

func newestCheckpoint(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.pt"))
	sort.Slice(files, func(i, j int) bool {
		a, _ := os.Stat(files[i])
		b, _ := os.Stat(files[j])
		return a.ModTime().Before(b.ModTime())
	})
	if len(files) == 0 {
		return filepath.Join(dir, "none.pt")
	}
	return files[len(files)-1]
}

func recipes(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	return recipesOn(env, "cuda", recipeRuns)
}

// recipesOn runs runs with --device dev (TestRecipesOnCPU: cpu): each
// command must exit 0, and the last, a resume, must say so and train on
// past the step its checkpoint holds.
func recipesOn(env Env, dev string, runs []recipeRun) Result {
	ctx := context.Background()
	r := Result{Figures: map[string]any{}, Cmd: "make gpu-check GPUCHECK=recipes"}
	var bad, good []string
	bud := env.budget()
	for _, rr := range runs {
		if !bud.next(rr.name) {
			continue
		}
		data := filepath.Join(env.Data, rr.name)
		if _, err := os.Stat(data); err != nil {
			bad = append(bad, rr.name+": no data set (make gpu-pack makes them)")
			continue
		}
		work, err := os.MkdirTemp(env.Work, rr.name)
		if err != nil {
			return failf("%v", err)
		}
		var last, trained *run
		total := 0.0
		ok := true
		for _, step := range rr.steps {
			args := make([]string, len(step))
			metrics := ""
			for i, a := range step {
				if dir, isLast := strings.CutPrefix(a, "LAST:"); isLast {
					a = newestCheckpoint(filepath.Join(work, dir))
				}
				a = strings.ReplaceAll(a, "DATA", data)
				a = strings.ReplaceAll(a, "WORK", work)
				a = strings.ReplaceAll(a, "CODEC", newestCheckpoint(filepath.Join(work, "codec")))
				if a == "cuda" && i > 0 && step[i-1] == "--device" {
					a = dev
				}
				args[i] = a
				if i > 0 && step[i-1] == "--metrics" {
					metrics = a
				}
			}
			trained, last = last, torchfit(ctx, env, metrics, args...)
			total += last.seconds
			if last.code != 0 {
				ok = false
				bad = append(bad, fmt.Sprintf("%s: exit %d: %s", rr.name, last.code, lastLines(last.out, 2)))
				r.Log += fmt.Sprintf("$ %s\n%s\n", last.cmdline(env.Torchfit), tail(last.out, 1500))
				break
			}
		}
		fig := fmt.Sprintf("exit %d, %.1f s", last.code, total)
		if s := last.lastStep(); s != nil {
			fig += fmt.Sprintf(", last step %v loss %.4g micro-batch %v, peak %.0f MiB", s["step"], num(s["loss"]), s["micro_batch"], last.peakMiB())
		}
		if ok {
			// The resume: from the checkpoint of the run before, on.
			from, to := trained.lastStep(), last.lastStep()
			switch {
			case !strings.Contains(last.out, "resum"):
				ok = false
				bad = append(bad, rr.name+": the last command did not resume")
			case from == nil || to == nil || !(num(to["step"]) > num(from["step"])):
				ok = false
				bad = append(bad, fmt.Sprintf("%s: the resumed run did not train past step %v", rr.name, from["step"]))
			default:
				fig += fmt.Sprintf(" (resumed from step %v)", from["step"])
			}
		}
		r.Figures[rr.name] = fig
		r.Figures[rr.name+" command"] = last.cmdline(env.Torchfit)
		if ok {
			good = append(good, rr.name)
		}
	}
	if len(bad) > 0 {
		r.Status, r.Summary = Fail, strings.Join(bad, "; ")
	} else {
		r.Status, r.Summary = Pass, "trained on "+dev+": "+strings.Join(good, ", ")
	}
	bud.report(&r)
	return r
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

func oomAdapt(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	data := filepath.Join(env.Data, "asr")
	if _, err := os.Stat(data); err != nil {
		return failf("no ASR data set (make gpu-pack makes it)")
	}
	ctx := context.Background()
	train := func(name string, micro, accum int, extra ...string) *run {
		work := filepath.Join(env.Work, "oom-"+name)
		_ = os.MkdirAll(work, 0o755)
		args := append([]string{"asr", "train", "--data", data, "--preset", "optimized", "--device", "cuda", "--mixed-precision", "fp16",
			"--batch-size", fmt.Sprint(micro), "--grad-accum", fmt.Sprint(accum), "--max-steps", "2", "--valid-limit", "4",
			"--checkpoint-dir", filepath.Join(work, "ck"), "--metrics", filepath.Join(work, "m.jsonl"), "--empty-cache-every", "0"}, extra...)
		return torchfit(ctx, env, filepath.Join(work, "m.jsonl"), args...)
	}
	r := Result{Figures: map[string]any{}}
	const big = 16 // two steps of 16 fit the 38 training utterances
	rb := train("16x1", big, 1)
	r1 := train("1x16", 1, big)
	for _, x := range []*run{rb, r1} {
		if x.code != 0 {
			r.Status, r.Summary, r.Log = Fail, "calibration run failed: "+lastLines(x.out, 2), tail(x.out, 2000)
			return r
		}
	}
	// A memory fraction caps what the allocator reserves: tensors plus its
	// cache and fragments. Below micro-batch 16's allocated peak it cannot
	// run; at micro-batch 1's reserved peak (what it needed with no cap to
	// press the cache) it can. (A cap halfway between the allocated peaks of
	// micro-batches 2 and 8, 284 and 349 MiB on an H100, left micro-batch 1
	// short by 51 MiB of fragments.)
	pb, p1, res1 := rb.peakMiB(), r1.peakMiB(), r1.maxMiB("peak_reserved")
	limit := (pb + res1) / 2
	r.Figures["peak allocated micro-batch 16, 1 (MiB)"] = fmt.Sprintf("%.1f, %.1f", pb, p1)
	r.Figures["peak reserved micro-batch 16, 1 (MiB)"] = fmt.Sprintf("%.1f, %.1f", rb.maxMiB("peak_reserved"), res1)
	r.Figures["cap (MiB)"] = limit
	if !(pb > res1+16) {
		r.Status, r.Summary = Fail, fmt.Sprintf("micro-batch 16 peaks at %.0f MiB allocated, 1 at %.0f reserved: too close to place a cap between", pb, res1)
		return r
	}
	capped := train("capped", big, 1, "--memory-limit", fmt.Sprintf("%dMiB", int(limit)))
	r.Cmd = capped.cmdline(env.Torchfit)
	r.Figures["capped run"] = fmt.Sprintf("exit %d, %.1f s", capped.code, capped.seconds)
	if capped.code != 0 {
		r.Status, r.Summary, r.Log = Fail, "under the cap: exit "+fmt.Sprint(capped.code)+": "+lastLines(capped.out, 2), tail(capped.out, 2000)
		return r
	}
	s := capped.lastStep()
	micro := num(s["micro_batch"])
	r.Figures["capped: last micro-batch, samples, oom retries"] = fmt.Sprintf("%v, %v, %v", s["micro_batch"], s["samples"], s["oom_retries"])
	if !(micro < big) || num(s["samples"]) != big {
		r.Status, r.Summary = Fail, fmt.Sprintf("under a %.0f MiB cap the run kept micro-batch %v with %v samples a step", limit, s["micro_batch"], s["samples"])
		r.Log = tail(capped.out, 2000)
		return r
	}
	r.Status = Pass
	r.Summary = fmt.Sprintf("cap %.0f MiB, under micro-batch 16's allocated peak (%.0f), above micro-batch 1's reserved peak (%.0f): the run went to micro-batch %v, 16 samples a step",
		limit, pb, res1, s["micro_batch"])
	return r
}

func goTest(env Env) Result {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return Result{Status: Skip, Summary: "skipped: no go toolchain on this machine"}
	}
	// go test's own timeout ends before the check's deadline: its report
	// (which test was running) then reaches ours.
	timeout := 200 * time.Second
	if !env.Deadline.IsZero() {
		timeout = max(10*time.Second, min(timeout, time.Until(env.Deadline)-margin))
	}
	args := []string{"test", "-tags", "cuda", "-count=1", "-timeout", timeout.Round(time.Second).String(), "./torch", "./amp", "./torch/data", "./torch/cudagraph"}
	r := Result{Cmd: "go " + strings.Join(args, " ")}
	if _, ok := needGPU(); !ok {
		r.Cmd += " (without a GPU they run the CPU paths: make test does that)"
		r.Status, r.Summary = Skip, "skipped: no GPU (the same tests run in make test)"
		return r
	}
	cmd := exec.Command(goBin, args...)
	// The tests' Python side is this machine's torch, the library under test.
	cmd.Env = append(os.Environ(), "TORCHFIT_PYTHON="+env.Python)
	out, err := cmd.CombinedOutput()
	r.Figures = map[string]any{"output": lastLines(string(out), 12)}
	if err != nil {
		r.Status, r.Summary, r.Log = Fail, "go test failed: "+lastLines(string(out), 3), tail(string(out), 3000)
		return r
	}
	r.Status, r.Summary = Pass, "passed: "+lastLines(string(out), 3)
	return r
}
