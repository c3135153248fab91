package gpucheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/distributed"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

const mib = 1 << 20

var gpu = torch.CUDA(0)

// needGPU returns the skip result when CUDA is not usable here.
func needGPU() (Result, bool) {
	b, err := torch.Build()
	if err != nil {
		return failf("torch.Build: %v", err), false
	}
	if !b.CUDA.Available {
		return skip(b.CUDA.Reason), false
	}
	return Result{}, true
}

// python runs scripts/gpucheck/twin.py mode and decodes its JSON.
func python(env Env, mode string, extraEnv []string, out any) error {
	return runPy(env.Python, filepath.Join("scripts", "gpucheck", "twin.py"), []string{mode}, extraEnv, out)
}

// runPy runs a Python script with args (and extraEnv added to the
// environment) and decodes the JSON on the last line it prints.
func runPy(py, script string, args, extraEnv []string, out any) error {
	cmd := exec.Command(py, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	what := strings.Join(append([]string{py, script}, args...), " ")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", what, err, tail(stderr.String(), 800))
	}
	if err := json.Unmarshal(lastLine(stdout.Bytes()), out); err != nil {
		return fmt.Errorf("%s: %w: %s", what, err, tail(stdout.String(), 400))
	}
	return nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// nvidiaSMI returns nvidia-smi's answer to a query (csv, no header, no units).
func nvidiaSMI(args ...string) (string, error) {
	out, err := exec.Command("nvidia-smi", append(args, "--format=csv,noheader,nounits")...).Output()
	return strings.TrimSpace(string(out)), err
}

// processMemoryMiB is what nvidia-smi says this process holds on the GPU.
func processMemoryMiB() (int64, error) {
	out, err := nvidiaSMI("--query-compute-apps=pid,used_memory")
	if err != nil {
		return 0, err
	}
	pid := strconv.Itoa(os.Getpid())
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) == 2 && strings.TrimSpace(f[0]) == pid {
			return strconv.ParseInt(strings.TrimSpace(f[1]), 10, 64)
		}
	}
	return 0, fmt.Errorf("nvidia-smi lists no process %s:\n%s", pid, out)
}

func init() {
	register(&Check{Name: "facts", Doc: "libtorch, CUDA, cuDNN, NCCL, the device and allocator settings, Go beside Python",
		Run: facts})
	register(&Check{Name: "memory-stats", Doc: "MemoryStats(CUDA) against torch.cuda.memory_* for the same pattern, and nvidia-smi",
		Run: memoryStats})
	register(&Check{Name: "empty-cache", Doc: "EmptyCache lowers reserved memory", Run: emptyCache})
	register(&Check{Name: "memory-fraction-oom", Doc: "SetMemoryFraction(0.1) makes a real CUDA OOM, ErrOutOfMemory, and training goes on",
		Run: fractionOOM})
	register(&Check{Name: "expandable-segments", Doc: "on by default; reserved memory with and without for a batch that grows each iteration (PyTorch's case for them)",
		Run: expandable})
	register(&Check{Name: "frag-pattern", Hidden: true, Run: fragPattern})
	register(&Check{Name: "amp", Doc: "fp32, bf16, fp16+GradScaler on an MLP step: peak and time; a forced inf skips the step and halves the scale",
		Timeout: 3 * time.Minute, Run: ampCheck})
	register(&Check{Name: "pinned-transfer", Doc: "pinned vs pageable host-to-device copies", Run: pinned})
	register(&Check{Name: "nccl", Doc: "an NCCL process group of one rank: all-reduce of a known tensor", Run: ncclCheck})
}

func facts(env Env) Result {
	b, err := torch.Build()
	if err != nil {
		return failf("torch.Build: %v", err)
	}
	r := Result{Figures: map[string]any{
		"go.libtorch": b.Version, "go.headers": b.HeaderVersion, "go.library": b.Library,
		"go.cxx11_abi": b.CXX11ABI, "go.cuda_tag": b.CUDATag, "go.cuda_available": b.CUDA.Available,
		"go.cuda_runtime": b.CUDA.Runtime, "go.cudnn": b.CUDA.CuDNN, "go.nccl": b.CUDA.NCCL,
		"go.driver_cuda": b.CUDA.Driver, "go.allocator_settings": b.CUDA.AllocatorSettings,
		"go.nccl_in_dist": distributed.HasNCCL(),
	}, Cmd: "go run -tags cuda ./cmd/torchfit doctor"}
	if b.CUDA.ExpandableSegments != nil {
		r.Figures["go.expandable_segments"] = *b.CUDA.ExpandableSegments
	}
	for _, d := range b.CUDA.Devices {
		r.Figures[fmt.Sprintf("go.device%d", d.Index)] = fmt.Sprintf("%s, capability %s, %d SMs, %.1f GiB (%.1f free)",
			d.Name, d.Capability(), d.Multiprocessors, float64(d.TotalBytes)/(1<<30), float64(d.FreeBytes)/(1<<30))
	}
	if smi, err := nvidiaSMI("--query-gpu=name,memory.total,driver_version"); err == nil {
		r.Figures["nvidia-smi"] = smi
	}
	var py map[string]any
	if err := python(env, "facts", nil, &py); err != nil {
		r.Figures["python.error"] = err.Error()
	}
	for k, v := range py {
		r.Figures["python."+k] = v
	}
	if !b.CUDA.Available {
		r.Status, r.Summary = Skip, "skipped: no GPU ("+b.CUDA.Reason+")"
		return r
	}
	var bad []string
	if name, _ := py["device"].(string); name != b.CUDA.Devices[0].Name {
		bad = append(bad, fmt.Sprintf("device %q (Go) vs %q (Python)", b.CUDA.Devices[0].Name, name))
	}
	if v, ok := py["cudnn"].(float64); ok && b.CUDA.CuDNN != cudnnString(int64(v)) {
		bad = append(bad, fmt.Sprintf("cuDNN %s (Go) vs %s (Python)", b.CUDA.CuDNN, cudnnString(int64(v))))
	}
	if b.CUDA.ExpandableSegments == nil || !*b.CUDA.ExpandableSegments {
		bad = append(bad, "expandable_segments is not on by default")
	}
	if !distributed.HasNCCL() {
		bad = append(bad, "package distributed was built without NCCL")
	}
	if len(bad) > 0 {
		r.Status, r.Summary = Fail, strings.Join(bad, "; ")
		return r
	}
	d := b.CUDA.Devices[0]
	r.Status = Pass
	r.Summary = fmt.Sprintf("%s (capability %s), libtorch %s, CUDA %s, cuDNN %s, NCCL %s, driver CUDA %s; Go and Python agree",
		d.Name, d.Capability(), b.Version, b.CUDA.Runtime, b.CUDA.CuDNN, b.CUDA.NCCL, b.CUDA.Driver)
	return r
}

func cudnnString(v int64) string {
	if v >= 90000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

type memStage struct {
	Allocated int64 `json:"allocated"`
	Reserved  int64 `json:"reserved"`
	Peak      int64 `json:"peak"`
}

func stage() memStage {
	s := torch.MustMemoryStats(gpu)
	return memStage{Allocated: s.Allocated, Reserved: s.Reserved, Peak: s.PeakAllocated}
}

// memoryPattern is twin.py's pattern: 10 × zeros(1000, 1000), free 5, one
// zeros(4096, 4096), free everything; the stats after each stage.
func memoryPattern(atBig func()) []memStage {
	must(torch.ResetPeakMemory(gpu))
	st := []memStage{stage()}
	var xs []*torch.Tensor
	for i := 0; i < 10; i++ {
		xs = append(xs, torch.Zeros([]int64{1000, 1000}, torch.Float32, gpu))
	}
	st = append(st, stage())
	for _, x := range xs[:5] {
		x.Free()
	}
	xs = xs[5:]
	st = append(st, stage())
	big := torch.Zeros([]int64{4096, 4096}, torch.Float32, gpu)
	st = append(st, stage())
	if atBig != nil {
		atBig()
	}
	big.Free()
	for _, x := range xs {
		x.Free()
	}
	return append(st, stage())
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

var stageNames = []string{"start", "10 × 4 MB", "5 freed", "+ 64 MiB", "all freed"}

func memoryStats(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	var smiMiB int64
	var smiErr error
	var atBigReserved int64
	goSt := memoryPattern(func() {
		torch.Synchronize(gpu)
		atBigReserved = torch.MustMemoryStats(gpu).Reserved
		smiMiB, smiErr = processMemoryMiB()
	})
	var py struct{ Stages []memStage }
	// The same allocator settings in both processes: torchfit's default.
	if err := python(env, "pattern", []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, &py); err != nil {
		return failf("%v", err)
	}
	r := Result{Figures: map[string]any{}, Cmd: "make gpu-check GPUCHECK=memory-stats  # Python: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 scripts/gpucheck/twin.py pattern"}
	var rows []string
	var bad []string
	for i, g := range goSt {
		var p memStage
		if i < len(py.Stages) {
			p = py.Stages[i]
		}
		rows = append(rows, fmt.Sprintf("%-10s Go %10d %10d %10d | Python %10d %10d %10d", stageNames[i],
			g.Allocated, g.Reserved, g.Peak, p.Allocated, p.Reserved, p.Peak))
		if g != p {
			bad = append(bad, stageNames[i])
		}
	}
	r.Figures["stages (allocated reserved peak)"] = strings.Join(rows, "\n")
	if want := int64(10 * 4000256); goSt[1].Allocated-goSt[0].Allocated != want {
		// 4,000,000 bytes round up to the allocator's 512-byte blocks
		bad = append(bad, fmt.Sprintf("10 tensors of 4,000,000 B allocated %d B, want %d", goSt[1].Allocated-goSt[0].Allocated, want))
	}
	if smiErr != nil {
		r.Figures["nvidia-smi"] = smiErr.Error()
	} else {
		r.Figures["nvidia-smi used by this process at + 64 MiB (MiB)"] = smiMiB
		r.Figures["reserved at + 64 MiB (MiB)"] = float64(atBigReserved) / mib
		r.Figures["nvidia-smi − reserved (MiB): CUDA context, kernels, cuBLAS workspace"] = float64(smiMiB) - float64(atBigReserved)/mib
		if smiMiB*mib < atBigReserved {
			bad = append(bad, "nvidia-smi sees less than the allocator reserved")
		}
	}
	if len(bad) > 0 {
		r.Status, r.Summary = Fail, "Go and Python differ: "+strings.Join(bad, "; ")
		return r
	}
	r.Status = Pass
	r.Summary = fmt.Sprintf("allocated, reserved and peak equal Python's at all %d stages; nvidia-smi %d MiB ≥ reserved %.1f MiB",
		len(goSt), smiMiB, float64(atBigReserved)/mib)
	return r
}

func emptyCache(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	x := torch.Empty([]int64{256 * mib / 4}, torch.Float32, gpu)
	x.Free()
	before := torch.MustMemoryStats(gpu)
	emptied, err := torch.EmptyCache()
	if err != nil {
		return failf("EmptyCache: %v", err)
	}
	after := torch.MustMemoryStats(gpu)
	r := Result{Figures: map[string]any{
		"reserved before (MiB)": float64(before.Reserved) / mib, "reserved after (MiB)": float64(after.Reserved) / mib,
		"allocated (B)": after.Allocated, "emptied": emptied,
	}}
	if !emptied || before.Reserved-after.Reserved < 256*mib {
		r.Status, r.Summary = Fail, fmt.Sprintf("reserved %d → %d B after freeing 256 MiB and EmptyCache", before.Reserved, after.Reserved)
		return r
	}
	r.Status = Pass
	r.Summary = fmt.Sprintf("reserved %.0f → %.0f MiB", float64(before.Reserved)/mib, float64(after.Reserved)/mib)
	return r
}

// mlp is a small model for the steps the checks time.
type mlp struct {
	seq *nn.Sequential
	opt *nn.Adam
}

func newMLP(width, depth int64, dev torch.Device) *mlp {
	var layers []nn.Layer
	in := int64(512)
	for i := int64(0); i < depth; i++ {
		layers = append(layers, nn.NewLinear(in, width, true), nn.NewReLU())
		in = width
	}
	layers = append(layers, nn.NewLinear(in, 1, true))
	seq := nn.NewSequential(layers...)
	nn.To(seq, dev, torch.Float32)
	return &mlp{seq: seq, opt: nn.NewAdamW(nn.Parameters(seq), nn.AdamWDefaults(1e-3))}
}

func (m *mlp) free() { nn.Free(m.seq) }

// step runs one training step under precision p (scaler for fp16) and
// returns the loss.
func (m *mlp) step(x, y *torch.Tensor, p amp.Precision, sc *amp.GradScaler, poison bool) (loss float64, stepped bool) {
	torch.Tidy(func() {
		var l *torch.Tensor
		if p == amp.FP32 {
			l = torch.MSELoss(m.seq.Forward(x), y, torch.ReduceMean)
		} else {
			amp.Autocast(x.Device(), p.DType(), func() {
				out := m.seq.Forward(x)
				amp.Float32(x.Device(), func() { l = torch.MSELoss(out.ToDType(torch.Float32), y, torch.ReduceMean) })
			})
		}
		if sc != nil {
			sc.Scale(l).Backward()
		} else {
			l.Backward()
		}
		if poison {
			g := m.opt.Parameters()[0].Grad()
			g.FillIn(math.Inf(1))
			g.Free()
		}
		if sc != nil {
			stepped = sc.Step(m.opt)
			sc.Update()
		} else {
			m.opt.Step()
			stepped = true
		}
		m.opt.ZeroGrad()
		loss = l.Item()
	})
	return loss, stepped
}

func fractionOOM(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	total := torch.MustMemoryStats(gpu).DeviceTotal
	if err := torch.SetMemoryFraction(gpu, 0.1); err != nil {
		return failf("SetMemoryFraction(0.1): %v", err)
	}
	want := int64(0.15 * float64(total))
	err := torch.Try(func() { torch.Empty([]int64{want / 4}, torch.Float32, gpu) })
	r := Result{Figures: map[string]any{"device total (GiB)": float64(total) / (1 << 30), "asked (GiB)": float64(want) / (1 << 30)}}
	var te *torch.Error
	if !errors.Is(err, torch.ErrOutOfMemory) || !errors.As(err, &te) {
		r.Status, r.Summary = Fail, fmt.Sprintf("allocating 15%% of the device under a 10%% fraction: %v, want ErrOutOfMemory", err)
		return r
	}
	r.Figures["error"] = firstLine(te.Msg)
	r.Figures["error.Device"] = te.Device.String()
	r.Figures["error.Requested (B)"] = te.Requested
	if te.Device != gpu || te.Requested < want {
		r.Status, r.Summary = Fail, fmt.Sprintf("the OOM error names %s and %d B; want cuda:0 and ≥ %d", te.Device, te.Requested, want)
		return r
	}
	// Training goes on under the same fraction.
	m := newMLP(1024, 3, gpu)
	defer m.free()
	torch.ManualSeed(1)
	x := torch.Randn([]int64{256, 512}, gpu)
	y := torch.Randn([]int64{256, 1}, gpu)
	first, last := 0.0, 0.0
	for i := 0; i < 30; i++ {
		l, _ := m.step(x, y, amp.FP32, nil, false)
		if i == 0 {
			first = l
		}
		last = l
	}
	r.Figures["loss after the OOM: step 1, step 30"] = fmt.Sprintf("%.4g, %.4g", first, last)
	s := torch.MustMemoryStats(gpu)
	r.Figures["num_ooms"] = s.OOMs
	if !(last < first) || math.IsNaN(last) {
		r.Status, r.Summary = Fail, fmt.Sprintf("training after the OOM: loss %g → %g", first, last)
		return r
	}
	r.Status = Pass
	r.Summary = fmt.Sprintf("%.1f GiB under a 10%% fraction of %.1f GiB: ErrOutOfMemory on cuda:0 (requested %d B); then 30 steps, loss %.3g → %.3g",
		float64(want)/(1<<30), float64(total)/(1<<30), te.Requested, first, last)
	return r
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// fragPattern is the case PyTorch's documentation gives for expandable
// segments: a job whose batch grows a little every iteration. Iteration n
// holds growTensors tensors of (n+4) × 4 MiB (a forward's activations) and
// frees them all. A caching allocator without expandable segments gives
// each request above its small pool's 10 MiB a segment of its own size:
// no block an earlier, smaller iteration freed fits, so every iteration
// should reserve new segments (up to the sum of all of them, 6400 MiB).
// With expandable segments the freed blocks of one segment coalesce and
// the segment grows in place, so what is reserved should stay near the
// largest iteration (640 MiB). The check fails unless it is below.
func fragPattern(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	b, _ := torch.Build()
	peak := growPattern(gpu)
	s := torch.MustMemoryStats(gpu)
	on := b.CUDA.ExpandableSegments != nil && *b.CUDA.ExpandableSegments
	return Result{Status: Pass, Figures: map[string]any{
		"expandable": on, "allocated": s.Allocated, "reserved": s.Reserved, "peak_reserved": s.PeakReserved, "peak_allocated": peak,
	}}
}

const (
	growIterations = 16
	growTensors    = 8
)

// growPattern runs fragPattern's iterations on dev and returns the most
// bytes they held at once (by the allocator's count: the same on any
// device); it frees everything it allocated.
func growPattern(dev torch.Device) int64 {
	base := torch.MustMemoryStats(dev).Allocated
	var peak int64
	for n := 1; n <= growIterations; n++ {
		var held []*torch.Tensor
		for k := 0; k < growTensors; k++ {
			held = append(held, torch.Empty([]int64{int64(n+4) * 4 * mib / 4}, torch.Float32, dev))
		}
		peak = max(peak, torch.MustMemoryStats(dev).Allocated-base)
		for _, t := range held {
			t.Free()
		}
	}
	return peak
}

func expandable(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	b, _ := torch.Build()
	r := Result{Figures: map[string]any{"allocator settings (default)": b.CUDA.AllocatorSettings},
		Cmd: "make gpu-check GPUCHECK=expandable-segments"}
	if b.CUDA.ExpandableSegments == nil || !*b.CUDA.ExpandableSegments {
		r.Status, r.Summary = Fail, "expandable_segments is not on by default"
		return r
	}
	c, _ := Lookup("frag-pattern")
	res := map[string]Result{}
	for _, conf := range []string{"expandable_segments:True", "expandable_segments:False"} {
		res[conf] = child(context.Background(), env, c, "PYTORCH_CUDA_ALLOC_CONF="+conf)
		if res[conf].Status != Pass {
			r.Status, r.Summary, r.Log = Fail, "the pattern under "+conf+": "+res[conf].Summary, res[conf].Log
			return r
		}
		for k, v := range res[conf].Figures {
			r.Figures[conf+" "+k] = v
		}
	}
	on, off := res["expandable_segments:True"].Figures, res["expandable_segments:False"].Figures
	if on["expandable"] != true || off["expandable"] != false {
		r.Status, r.Summary = Fail, "PYTORCH_CUDA_ALLOC_CONF did not switch expandable_segments"
		return r
	}
	r.Figures["pattern"] = fmt.Sprintf("a batch growing by one each iteration: iteration n = 1…%d holds %d tensors of (n+4) × 4 MiB, then frees them",
		growIterations, growTensors)
	rOn, rOff, peak := num(on["reserved"]), num(off["reserved"]), num(on["peak_allocated"])
	if rOn >= rOff {
		r.Status, r.Summary = Fail, fmt.Sprintf("a growing batch: reserved with expandable segments %.0f MiB, not below %.0f MiB without (peak allocated %.0f MiB)",
			rOn/mib, rOff/mib, peak/mib)
		return r
	}
	r.Status = Pass
	r.Summary = fmt.Sprintf("on by default; a batch growing each iteration (peak allocated %.0f MiB): reserved %.0f MiB with, %.0f MiB without (%.1f×)",
		peak/mib, rOn/mib, rOff/mib, rOff/rOn)
	return r
}

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	case int:
		return float64(x)
	}
	return math.NaN()
}

func ampCheck(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	r := Result{Figures: map[string]any{}}
	torch.ManualSeed(1)
	x := torch.Randn([]int64{1024, 512}, gpu)
	y := torch.Randn([]int64{1024, 1}, gpu)
	var rows []string
	peaks := map[amp.Precision]int64{}
	for _, p := range []amp.Precision{amp.FP32, amp.BF16, amp.FP16} {
		m := newMLP(4096, 6, gpu)
		var sc *amp.GradScaler
		if p == amp.FP16 {
			sc = amp.NewGradScaler(gpu, amp.ScalerOptions{})
		}
		for i := 0; i < 3; i++ {
			m.step(x, y, p, sc, false)
		}
		must(torch.Synchronize(gpu))
		must(torch.ResetPeakMemory(gpu))
		base := torch.MustMemoryStats(gpu).Allocated
		const n = 20
		start := time.Now()
		var loss float64
		for i := 0; i < n; i++ {
			loss, _ = m.step(x, y, p, sc, false)
		}
		must(torch.Synchronize(gpu))
		ms := float64(time.Since(start).Microseconds()) / 1000 / n
		peak := torch.MustMemoryStats(gpu).PeakAllocated - base
		peaks[p] = peak
		rows = append(rows, fmt.Sprintf("%-5s %8.2f ms/step  step peak above weights+state %8.1f MiB  loss %.4g", p, ms, float64(peak)/mib, loss))
		if p == amp.FP16 {
			// A forced inf: the step is skipped and the scale halves; the
			// fused unscale kernel is what ran.
			before := sc.ScaleValue()
			var stepped bool
			calls := torch.CountCalls(func() { _, stepped = m.step(x, y, p, sc, true) })
			after := sc.ScaleValue()
			fused := false
			for _, c := range calls {
				if strings.Contains(c.Name, "_amp_foreach_non_finite_check_and_unscale_") {
					fused = true
				}
			}
			r.Figures["forced inf: stepped, scale before, after"] = fmt.Sprintf("%v, %g, %g", stepped, before, after)
			r.Figures["fused _amp_foreach_non_finite_check_and_unscale_ called"] = fused
			if stepped || after != before/2 || !fused {
				m.free()
				r.Status = Fail
				r.Summary = fmt.Sprintf("forced inf: stepped %v, scale %g → %g, fused unscale %v (want false, halved, true)", stepped, before, after, fused)
				r.Figures["steps"] = strings.Join(rows, "\n")
				return r
			}
		}
		m.free()
	}
	r.Figures["steps (MLP 6×4096, batch 1024, AdamW)"] = strings.Join(rows, "\n")
	if !(peaks[amp.BF16] < peaks[amp.FP32] && peaks[amp.FP16] < peaks[amp.FP32]) {
		r.Status, r.Summary = Fail, fmt.Sprintf("mixed precision does not lower the step peak: fp32 %d, bf16 %d, fp16 %d B", peaks[amp.FP32], peaks[amp.BF16], peaks[amp.FP16])
		return r
	}
	r.Status = Pass
	r.Summary = fmt.Sprintf("step peak fp32 %.0f, bf16 %.0f, fp16 %.0f MiB; a forced inf skipped the step and halved the scale (fused unscale)",
		float64(peaks[amp.FP32])/mib, float64(peaks[amp.BF16])/mib, float64(peaks[amp.FP16])/mib)
	return r
}

func pinned(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	const n = 64 * mib // floats: 256 MiB
	host := torch.Randn([]int64{n})
	p, err := host.PinMemory()
	if err != nil {
		return failf("PinMemory: %v", err)
	}
	if !p.IsPinned() {
		return failf("PinMemory returned a tensor that is not pinned")
	}
	timeIt := func(src *torch.Tensor, async bool) float64 {
		var best = math.Inf(1)
		for i := 0; i < 6; i++ {
			start := time.Now()
			var d *torch.Tensor
			if async {
				d = src.ToAsync(gpu, torch.Float32)
			} else {
				d = src.To(gpu, torch.Float32)
			}
			must(torch.Synchronize(gpu))
			best = min(best, time.Since(start).Seconds())
			d.Free()
		}
		return float64(n*4) / best / 1e9
	}
	pageable := timeIt(host, false)
	pin := timeIt(p, true)
	r := Result{Figures: map[string]any{"pageable (GB/s)": pageable, "pinned (GB/s)": pin, "bytes": n * 4}}
	r.Status = Pass
	r.Summary = fmt.Sprintf("256 MiB host→device: pageable %.1f GB/s, pinned %.1f GB/s (%.2f×)", pageable, pin, pin/pageable)
	if pin < pageable {
		r.Status = Fail
	}
	return r
}

func ncclCheck(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	if !distributed.HasNCCL() {
		return failf("package distributed was built without NCCL")
	}
	dir, err := os.MkdirTemp(env.Work, "nccl")
	if err != nil {
		return failf("%v", err)
	}
	store, err := distributed.NewFileStore(filepath.Join(dir, "store"), 1, 30*time.Second)
	if err != nil {
		return failf("store: %v", err)
	}
	g, err := distributed.NewGroup(store, 0, 1, distributed.Options{Backend: distributed.NCCL, Timeout: 60 * time.Second})
	if err != nil {
		return failf("NCCL group: %v", err)
	}
	defer g.Close()
	x := torch.Arange(0, 8, 1, torch.Float32, gpu)
	if err := g.AllReduce(distributed.Sum, x); err != nil {
		return failf("all-reduce: %v", err)
	}
	got := torch.ToSlice[float32](x.To(torch.CPU, torch.Float32))
	for i, v := range got {
		if v != float32(i) {
			return failf("all-reduce of 0..7 over one rank gave %v", got)
		}
	}
	return Result{Status: Pass, Summary: "one-rank NCCL all-reduce of 0..7 returned 0..7", Figures: map[string]any{"result": fmt.Sprint(got)}}
}
