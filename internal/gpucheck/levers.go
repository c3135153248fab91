package gpucheck

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/torchfit/torchfit/monitor"
	"github.com/torchfit/torchfit/recipes/ganvit"
	"github.com/torchfit/torchfit/torch"
)

func init() {
	register(&Check{Name: "seed-tables", Doc: "the seeds' memory tables measured on the GPU: asr memory-table, ganvit memory-table, mamba estimate --dry-run, clip measure, tts memory-test",
		Timeout: 5 * time.Minute, Run: seedTables})
	register(&Check{Name: "vram-presets", Doc: "each --vram preset runs under a memory cap of that size on the card (trains; GAN/ViT: its test-memory)",
		Timeout: 6 * time.Minute, Run: vramPresets})
	register(&Check{Name: "cpu-offload", Doc: "Mamba's --cpu-offload (the seed's use_cpu_offload): device bytes saved, step-time cost",
		Timeout: 3 * time.Minute, Run: cpuOffload})
	register(&Check{Name: "data-on-device", Doc: "GAN/ViT data kept on the CPU (one batch moved) vs --data-on-device (the seed's notebook)",
		Timeout: 2 * time.Minute, Run: dataOnDevice})
	register(&Check{Name: "monitor", Doc: "torchfit monitor's NVML reading against nvidia-smi at the same moment",
		Run: monitorCheck})
}

// runAll runs torchfit commands whose output is a table for the report,
// but not those bud leaves out (the caller reports bud).
func runAll(env Env, bud *budget, runs [][]string) (Result, []*run) {
	r := Result{Figures: map[string]any{}}
	var bad []string
	var out []*run
	for _, args := range runs {
		if !bud.next(strings.Join(args[:2], " ")) {
			continue
		}
		x := torchfit(context.Background(), env, "", args...)
		out = append(out, x)
		if b := record(&r, x, env.Torchfit); b != "" {
			bad = append(bad, b)
		}
	}
	if len(bad) > 0 {
		r.Status, r.Summary = Fail, strings.Join(bad, "; ")
	} else {
		r.Status = Pass
	}
	return r, out
}

// record puts x's command line and the end of its output (its table) in
// r's figures, under its recipe and verb; it returns x's failure line, or
// "" when x exited 0.
func record(r *Result, x *run, bin string) string {
	key := strings.Join(x.args[:2], " ")
	r.Figures[key+" command"] = x.cmdline(bin)
	r.Figures[key] = strings.TrimSpace(tail(x.out, 2500))
	if x.code != 0 {
		return fmt.Sprintf("%s: exit %d: %s", key, x.code, lastLines(x.out, 2))
	}
	return ""
}

func seedTables(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	d := func(name string) string { return filepath.Join(env.Data, name) }
	bud := env.budget()
	// The tables not yet run on a GPU come first (the budget may end the
	// check early). The TTS seed's test_memory_optimization.py trains the
	// GPT over a frozen codec: a codec is trained first (two steps: its
	// weights do not change the GPT's memory).
	var tts *run
	if bud.next("tts memory-test") {
		tts = ttsMemoryTest(env, "cuda", "2,4,8,16", "5")
	}
	r, _ := runAll(env, bud, [][]string{
		// The CLIP seed's layouts at ViT-B/32, its GPU model.
		{"clip", "measure", "--device", "cuda", "--preset", "vit-b32", "--steps", "2"},
		{"asr", "memory-table", "--data", d("asr"), "--device", "cuda"},
		{"ganvit", "memory-table", "--data", d("ganvit"), "--device", "cuda", "--preset", "cpu"},
		{"mamba", "estimate", "--device", "cuda", "--dry-run", "--all"},
	})
	if tts != nil {
		if bad := record(&r, tts, env.Torchfit); bad != "" {
			if r.Status == Fail {
				bad = r.Summary + "; " + bad
			}
			r.Status, r.Summary = Fail, bad
		}
	}
	if r.Status == Pass {
		r.Summary = "tts memory-test (batch 2–16), clip measure (ViT-B/32's layouts), asr memory-table (every preset, levers on and off), " +
			"ganvit memory-table (cpu preset), mamba estimate --dry-run --all, measured on CUDA"
	}
	bud.report(&r)
	r.Cmd = "make gpu-check GPUCHECK=seed-tables"
	return r
}

// ttsMemoryTest trains a codec two steps on dev, then runs `tts
// memory-test` over it at each of sizes for seconds each; it returns the
// run that failed, or the memory test's (TestRecipesOnCPU runs it on the
// CPU).
func ttsMemoryTest(env Env, dev, sizes, seconds string) *run {
	data := filepath.Join(env.Data, "tts")
	work, err := os.MkdirTemp(env.Work, "tts")
	if err != nil {
		return &run{args: []string{"tts", "train-codec"}, code: -1, out: err.Error()}
	}
	x := torchfit(context.Background(), env, "", "tts", "train-codec", "--data", data, "--device", dev,
		"--max-steps", "2", "--batch-size", "4", "--checkpoint-dir", filepath.Join(work, "codec"))
	if x.code != 0 {
		return x
	}
	return torchfit(context.Background(), env, "", "tts", "memory-test", "--data", data, "--device", dev,
		"--codec", newestCheckpoint(filepath.Join(work, "codec")), "--batch-sizes", sizes, "--duration", seconds)
}

func vramPresets(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	r := Result{Figures: map[string]any{}, Cmd: "make gpu-check GPUCHECK=vram-presets"}
	type preset struct {
		recipe string
		args   []string
		sizes  []string
		// steps: the command trains and writes metrics (the peak comes
		// from them); else it is a test-memory, whose lines say its peaks.
		steps bool
	}
	all := []string{"8gb", "12gb", "16gb", "24gb"}
	// The rows not yet run on a GPU come first (the budget may end the
	// check early); the small data sets decide some flags: CLIP's 81
	// images are fewer than a preset's effective 128 (the accumulation is
	// cut; the micro-batch, what the memory depends on, is the row's), and
	// the GAN/ViT rows' 30 s clips are not among them, so their check is
	// the seed's test_memory_config (`ganvit test-memory`: one GAN
	// iteration and one classifier step at the row's sizes). CLIP's and
	// Mamba's 16gb rows are their 12gb rows' settings, which a 12 GiB cap
	// checks.
	presets := []preset{
		{"ganvit", []string{"ganvit", "test-memory"}, all, false},
		{"clip", []string{"clip", "train", "--data", filepath.Join(env.Data, "clip"), "--max-steps", "2", "--grad-accum", "1"}, []string{"12gb", "24gb"}, true},
		{"mamba", []string{"mamba", "train", "--data_dir", filepath.Join(env.Data, "mamba"), "--max-steps", "2", "--eval-tokens", "2048"}, []string{"12gb"}, true},
		{"asr", []string{"asr", "train", "--data", filepath.Join(env.Data, "asr"), "--max-steps", "3", "--valid-limit", "4"}, all, true},
		{"clip", []string{"clip", "train", "--data", filepath.Join(env.Data, "clip"), "--max-steps", "2", "--grad-accum", "2"}, []string{"8gb"}, true},
		{"mamba", []string{"mamba", "train", "--data_dir", filepath.Join(env.Data, "mamba"), "--max-steps", "2", "--eval-tokens", "2048"}, []string{"8gb", "24gb"}, true},
	}
	var bad, good []string
	bud := env.budget()
	for _, p := range presets {
		for _, size := range p.sizes {
			if !bud.next(p.recipe + " --vram " + size) {
				continue
			}
			gib, _ := strconv.Atoi(strings.TrimSuffix(size, "gb"))
			work, _ := os.MkdirTemp(env.Work, p.recipe+size)
			metrics := ""
			args := append(append([]string{}, p.args...), "--device", "cuda", "--vram", size, "--memory-limit", fmt.Sprintf("%dGiB", gib))
			if p.steps {
				metrics = filepath.Join(work, "m.jsonl")
				args = append(args, "--checkpoint-dir", filepath.Join(work, "ck"), "--metrics", metrics)
			}
			x := torchfit(context.Background(), env, metrics, args...)
			name := p.recipe + " --vram " + size
			fig := fmt.Sprintf("exit %d, %.1f s, peak %.0f MiB of a %d GiB cap", x.code, x.seconds, x.peakMiB(), gib)
			if !p.steps {
				fig = fmt.Sprintf("exit %d, %.1f s under a %d GiB cap: %s", x.code, x.seconds, gib, lastLines(x.out, 4))
			}
			if s := x.lastStep(); s != nil {
				fig += fmt.Sprintf(", micro-batch %v, oom retries %v", s["micro_batch"], s["oom_retries"])
			}
			r.Figures[name] = fig
			if x.code != 0 {
				bad = append(bad, name+": "+lastLines(x.out, 2))
				r.Log += "$ " + x.cmdline(env.Torchfit) + "\n" + tail(x.out, 1200) + "\n"
				continue
			}
			good = append(good, name)
		}
	}
	if len(bad) > 0 {
		r.Status, r.Summary = Fail, strings.Join(bad, "; ")
	} else {
		r.Status, r.Summary = Pass, "ran under a cap of the preset's size: "+strings.Join(good, ", ")
	}
	bud.report(&r)
	return r
}

func cpuOffload(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	r := Result{Figures: map[string]any{}, Cmd: "make gpu-check GPUCHECK=cpu-offload"}
	var res [2]*run
	var steps [2]float64 // seconds per step, without and with the offload
	for i, off := range []bool{false, true} {
		work, _ := os.MkdirTemp(env.Work, "offload")
		metrics := filepath.Join(work, "m.jsonl")
		args := []string{"mamba", "train", "--data_dir", filepath.Join(env.Data, "mamba"), "--device", "cuda", "--vram", "8gb",
			"--max-steps", "4", "--eval-tokens", "2048", "--checkpoint-dir", filepath.Join(work, "ck"), "--metrics", metrics}
		if off {
			args = append(args, "--cpu-offload")
		}
		res[i] = torchfit(context.Background(), env, metrics, args...)
		if res[i].code != 0 {
			r.Status, r.Summary, r.Log = Fail, fmt.Sprintf("offload %v: exit %d: %s", off, res[i].code, lastLines(res[i].out, 2)), tail(res[i].out, 2000)
			return r
		}
		st, n := res[i].stepSeconds()
		steps[i] = st
		r.Figures[fmt.Sprintf("offload %v", off)] = fmt.Sprintf("peak %.0f MiB; a step %.3f s (the median of steps 2–%d, the trainer's timing); the process %.1f s",
			res[i].peakMiB(), st, n+1, res[i].seconds)
	}
	saved := res[0].peakMiB() - res[1].peakMiB()
	r.Figures["device MiB saved"] = saved
	if !(saved > 0) {
		r.Status, r.Summary = Fail, fmt.Sprintf("--cpu-offload did not lower the device peak (%.0f → %.0f MiB)", res[0].peakMiB(), res[1].peakMiB())
		return r
	}
	on, off := steps[0], steps[1]
	if !(on > 0 && off > 0) {
		r.Status, r.Summary = Fail, "the metrics hold no step time after the first step"
		return r
	}
	r.Figures["step time with offload / without"] = round3(off / on)
	r.Status = Pass
	r.Summary = fmt.Sprintf("mamba --vram 8gb: device peak %.0f → %.0f MiB with --cpu-offload; a step %.3f → %.3f s (%.2f×)",
		res[0].peakMiB(), res[1].peakMiB(), on, off, off/on)
	return r
}

func dataOnDevice(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	return dataOnDeviceOn(env, "cuda")
}

// ganDataScale is how many times data-on-device repeats each training
// clip: the check's 40 clips (32 for training) give 1 MiB of
// spectrograms, too little beside the models to show the seed's mistake.
const ganDataScale = 20

// dataOnDeviceOn trains the GAN stage with the data kept on the host and
// with --data-on-device, on a data set of ganDataScale times the training
// clips (TestRecipesOnCPU runs it with dev "cpu", whose allocator counts
// the device copy as CUDA's does and the host's Go slices not at all).
func dataOnDeviceOn(env Env, dev string) Result {
	r := Result{Figures: map[string]any{}, Cmd: "make gpu-check GPUCHECK=data-on-device"}
	data, n, err := scaledGANData(filepath.Join(env.Data, "ganvit"), env.Work, ganDataScale)
	if err != nil {
		return failf("%v", err)
	}
	p := ganvit.Presets["cpu"]
	want := float64(int64(n)*ganvit.Shape{Mels: p.Mels, Frames: p.Frames}.SampleBytes()) / mib
	r.Figures["training set"] = fmt.Sprintf("%d spectrograms of %d mels × %d frames (the check's %d training clips, each %d times): %.1f MiB as float32",
		n, p.Mels, p.Frames, n/ganDataScale, ganDataScale, want)
	var peaks [2]float64
	moved := math.NaN() // what the run says the training set took on the device, MiB
	for i, on := range []bool{false, true} {
		work, _ := os.MkdirTemp(env.Work, "dod")
		metrics := filepath.Join(work, "m.jsonl")
		args := []string{"ganvit", "train", "--data", data, "--device", dev, "--preset", "cpu", "--vit", "tiny",
			"--stage", "gan", "--gan-epochs", "1", "--max-steps", "3", "--checkpoint-dir", filepath.Join(work, "ck"), "--metrics", metrics}
		if on {
			args = append(args, "--data-on-device")
		}
		x := torchfit(context.Background(), env, metrics, args...)
		if x.code != 0 {
			r.Status, r.Summary, r.Log = Fail, fmt.Sprintf("data on device %v: exit %d: %s", on, x.code, lastLines(x.out, 2)), tail(x.out, 2000)
			return r
		}
		// The GAN stage writes no step metrics: its summary line says the peak.
		m := peakLine.FindStringSubmatch(x.out)
		if m == nil {
			r.Status, r.Summary, r.Log = Fail, "no \"peak memory\" in the GAN stage's summary", tail(x.out, 1500)
			return r
		}
		peaks[i] = mibOf(m[1], m[2])
		if m := movedLine.FindStringSubmatch(x.out); on && m != nil {
			moved = mibOf(m[1], m[2])
		}
		r.Figures[fmt.Sprintf("--data-on-device %v", on)] = lastLines(x.out, 1)
		r.Figures[fmt.Sprintf("--data-on-device %v command", on)] = x.cmdline(env.Torchfit)
	}
	r.Figures["device peak MiB, data on the host / on the device"] = fmt.Sprintf("%.2f / %.2f", peaks[0], peaks[1])
	r.Summary = fmt.Sprintf("ganvit GAN stage, %d training spectrograms (%.2f MiB on the device): device peak %.1f MiB with the data on the host, %.1f MiB with it on the device (+%.1f)",
		n, moved, peaks[0], peaks[1], peaks[1]-peaks[0])
	// The whole training set goes to the device (the allocator's count,
	// to the log's two decimals) and stays there for the run.
	switch {
	case !(math.Abs(moved-want) <= 0.01):
		r.Status = Fail
		r.Summary += fmt.Sprintf(": the run moved %.2f MiB, not the training set's %.2f MiB", moved, want)
	case !(peaks[1] > peaks[0]):
		r.Status = Fail
		r.Summary += ": the data on the device did not raise the peak"
	default:
		r.Status = Pass
	}
	return r
}

// movedLine is the GAN/ViT run's line for the training set copied to the device.
var movedLine = regexp.MustCompile(`the whole training set is on \S+ first .*: ([0-9.]+) (B|KiB|MiB|GiB) allocated`)

// mibOf is torch.FormatBytes' figure and unit in MiB.
func mibOf(v, unit string) float64 {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return math.NaN()
	}
	return x * map[string]float64{"B": 1.0 / mib, "KiB": 1.0 / 1024, "MiB": 1, "GiB": 1024}[unit]
}

// scaledGANData writes a GAN/ViT data set in work whose training split is
// each of dir's training clips k times (the same WAV files, through a
// link to dir's clips; new ids), and the other splits as they are. It
// returns its directory and the number of training clips.
func scaledGANData(dir, work string, k int) (string, int, error) {
	clips, err := ganvit.ReadManifest(dir)
	if err != nil {
		return "", 0, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", 0, err
	}
	out, err := os.MkdirTemp(work, "ganvit-scaled")
	if err != nil {
		return "", 0, err
	}
	// Every path is relative to the manifest's directory; each names a
	// file of dir through the link.
	link := filepath.Join(out, "data")
	if err := os.Symlink(abs, link); err != nil {
		return "", 0, err
	}
	var scaled []ganvit.Clip
	n := 0
	for _, c := range clips {
		c.Path = filepath.Join("data", c.Path)
		if c.Split != ganvit.SplitTrain {
			scaled = append(scaled, c)
			continue
		}
		id := c.ID
		for j := 0; j < k; j++ {
			c.ID = fmt.Sprintf("%s_x%d", id, j)
			scaled = append(scaled, c)
			n++
		}
	}
	if err := ganvit.WriteManifest(filepath.Join(out, "clips.jsonl"), scaled); err != nil {
		return "", 0, err
	}
	return out, n, nil
}

var peakLine = regexp.MustCompile(`peak memory ([0-9.]+) (KiB|MiB|GiB)`)

func monitorCheck(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	src, err := monitor.OpenNVML("")
	if err != nil {
		return failf("NVML: %v", err)
	}
	defer src.Close()
	x := torch.Empty([]int64{1 << 28}, torch.Float32, gpu) // 1 GiB
	defer x.Free()
	must(torch.Synchronize(gpu))
	gpus, err := src.Read()
	smi, smiErr := nvidiaSMI("--query-gpu=memory.used")
	if err != nil || len(gpus) == 0 {
		return failf("NVML read: %v", err)
	}
	if smiErr != nil {
		return failf("nvidia-smi: %v", smiErr)
	}
	smiMiB, _ := strconv.ParseFloat(strings.TrimSpace(strings.Split(smi, "\n")[0]), 64)
	nvmlMiB := float64(gpus[0].MemUsed) / mib
	r := Result{Figures: map[string]any{"NVML used (MiB)": nvmlMiB, "nvidia-smi used (MiB)": smiMiB,
		"allocated by this process (MiB)": float64(torch.MustMemoryStats(gpu).Allocated) / mib}}
	if d := nvmlMiB - smiMiB; d > 64 || d < -64 {
		r.Status, r.Summary = Fail, fmt.Sprintf("NVML says %.0f MiB used, nvidia-smi %.0f", nvmlMiB, smiMiB)
		return r
	}
	r.Status = Pass
	r.Summary = fmt.Sprintf("with 1 GiB allocated: NVML %.0f MiB used, nvidia-smi %.0f MiB", nvmlMiB, smiMiB)
	return r
}
