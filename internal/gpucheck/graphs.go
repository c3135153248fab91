package gpucheck

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/cudagraph"
)

func init() {
	register(&Check{Name: "cuda-graph", Doc: "a small model's whole training step (forward, backward, fused capturable AdamW) captured as a CUDA graph: " +
		"replay follows eager's losses; ms/step eager Go, graph Go, eager Python, torch.compile reduce-overhead",
		Timeout: 3 * time.Minute, Run: cudaGraphCheck})
}

// graphModel is the cuda-graph check's model and step, the same on both
// sides (scripts/gpucheck/graph_step.py): Blocks × [LayerNorm(Width),
// Linear(Width, Hidden), GELU, Linear(Hidden, Width)], a Linear(Width,
// Width) head, MSE against a random target, bf16 autocast, AdamW (fused,
// lr 1e-3, weight decay 0.01). Small enough that a step is launch-bound.
type graphModel struct {
	Width  int64 `json:"width"`
	Hidden int64 `json:"hidden"`
	Blocks int   `json:"blocks"`
	Batch  int64 `json:"batch"`
	// Timing: Reps repetitions of Steps steps after Warmup steps; the
	// median of the repetitions' per-step times.
	Steps  int `json:"steps"`
	Reps   int `json:"reps"`
	Warmup int `json:"warmup"`
}

var graphSpec = graphModel{Width: 256, Hidden: 1024, Blocks: 4, Batch: 64, Steps: 50, Reps: 5, Warmup: 5}

// graphTraj is the number of steps whose losses replay and eager compare.
const graphTraj = 20

// graphLossTol is the largest relative difference of a step's loss, graph
// replay against eager: the same kernels on the same data, but cuBLAS may
// pick other algorithms inside a capture (bf16 autocast).
const graphLossTol = 1e-2

type graphNet struct {
	seq  *nn.Sequential
	opt  *cudagraph.AdamW
	x, y *torch.Tensor // static input and target
	loss *torch.Tensor // the last step's loss
}

func newGraphNet(c graphModel, dev torch.Device) (*graphNet, error) {
	torch.ManualSeed(0)
	var layers []nn.Layer
	for i := 0; i < c.Blocks; i++ {
		layers = append(layers, nn.NewLayerNorm(c.Width), nn.NewLinear(c.Width, c.Hidden, true), nn.NewGELU("none"),
			nn.NewLinear(c.Hidden, c.Width, true))
	}
	layers = append(layers, nn.NewLinear(c.Width, c.Width, true))
	seq := nn.NewSequential(layers...)
	nn.To(seq, dev, torch.Float32)
	opt, err := cudagraph.NewAdamW([]nn.ParamGroup{{Params: nn.Parameters(seq)}}, nn.AdamWDefaults(1e-3))
	if err != nil {
		nn.Free(seq)
		return nil, err
	}
	return &graphNet{seq: seq, opt: opt, x: torch.Zeros([]int64{c.Batch, c.Width}, torch.Float32, dev).Keep(),
		y: torch.Zeros([]int64{c.Batch, c.Width}, torch.Float32, dev).Keep()}, nil
}

// step is one training step on the static tensors, with nothing that waits
// for the device: the step eager runs and the graph captures.
func (n *graphNet) step() error {
	dev := n.x.Device()
	n.opt.ZeroGrad()
	var l *torch.Tensor
	torch.Tidy(func() {
		amp.Autocast(dev, torch.BFloat16, func() {
			out := n.seq.Forward(n.x)
			amp.Float32(dev, func() { l = torch.MSELoss(out.ToDType(torch.Float32), n.y, torch.ReduceMean) })
		})
		amp.ClearCache()
		l.Backward()
		l.Keep()
	})
	if n.loss != nil {
		n.loss.Free()
	}
	n.loss = l
	return n.opt.Step()
}

func (n *graphNet) free() {
	n.opt.Free()
	nn.Free(n.seq)
	for _, t := range []*torch.Tensor{n.x, n.y, n.loss} {
		if t != nil {
			t.Free()
		}
	}
}

// timeSteps runs warm-up steps, then reps × steps calls of one, and
// returns the median per-step milliseconds (the device synchronised at
// the end of each repetition).
func timeSteps(c graphModel, dev torch.Device, one func() error) (float64, error) {
	for i := 0; i < c.Warmup; i++ {
		if err := one(); err != nil {
			return 0, err
		}
	}
	if err := torch.Synchronize(dev); err != nil {
		return 0, err
	}
	var per []float64
	for r := 0; r < c.Reps; r++ {
		start := time.Now()
		for i := 0; i < c.Steps; i++ {
			if err := one(); err != nil {
				return 0, err
			}
		}
		if err := torch.Synchronize(dev); err != nil {
			return 0, err
		}
		per = append(per, float64(time.Since(start).Microseconds())/1000/float64(c.Steps))
	}
	sort.Float64s(per)
	return per[len(per)/2], nil
}

// pyGraphResult is scripts/gpucheck/graph_step.py's answer.
type pyGraphResult struct {
	Torch          string  `json:"torch"`
	EagerMS        float64 `json:"eager_ms"`
	CompiledMS     float64 `json:"compiled_ms"`
	CompileSeconds float64 `json:"compile_seconds"`
	CompiledNA     string  `json:"compiled_na"`
}

func pyGraphStep(env Env, c graphModel) (pyGraphResult, error) {
	var out pyGraphResult
	spec, _ := json.Marshal(c)
	err := runPy(env.Python, filepath.Join("scripts", "gpucheck", "graph_step.py"), []string{string(spec)}, nil, &out)
	return out, err
}

func cudaGraphCheck(env Env) Result {
	if r, ok := needGPU(); !ok {
		return r
	}
	if !cudagraph.Available(gpu) {
		return failf("cudagraph.Available(%v) is false with a GPU: the binary lacks the cuda tag", gpu)
	}
	r := Result{Figures: map[string]any{}}
	c := graphSpec
	r.Figures["model"] = fmt.Sprintf("%d × [LayerNorm, Linear %d→%d, GELU, Linear %d→%d] + Linear head, batch %d, bf16 autocast, fused AdamW; %d reps × %d steps after %d",
		c.Blocks, c.Width, c.Hidden, c.Hidden, c.Width, c.Batch, c.Reps, c.Steps, c.Warmup)

	// The batches of the trajectory, on the device: targets a fixed
	// function of the inputs, tanh(x·A), so that the losses fall.
	torch.ManualSeed(1)
	xs := make([]*torch.Tensor, graphTraj+1)
	ys := make([]*torch.Tensor, graphTraj+1)
	torch.Tidy(func() {
		a := torch.Randn([]int64{c.Width, c.Width}, gpu).MulScalar(1 / math.Sqrt(float64(c.Width)))
		for i := range xs {
			xs[i] = torch.Randn([]int64{c.Batch, c.Width}, gpu).Keep()
			ys[i] = xs[i].Matmul(a).Tanh().Keep()
		}
	})
	defer func() {
		for i := range xs {
			xs[i].Free()
			ys[i].Free()
		}
	}()
	feed := func(n *graphNet, i int) {
		n.x.CopyFrom(xs[i])
		n.y.CopyFrom(ys[i])
	}

	// Eager: as many steps on batch 0 as the capture's warm-up, then one
	// step per batch.
	eager, err := newGraphNet(c, gpu)
	if err != nil {
		return failf("eager model: %v", err)
	}
	defer eager.free()
	feed(eager, 0)
	var eagerLoss, graphLoss []float64
	err = torch.Main().DoErr(func() error {
		for i := 0; i < cudagraph.DefaultWarmup; i++ {
			if err := eager.step(); err != nil {
				return err
			}
		}
		for i := 1; i <= graphTraj; i++ {
			feed(eager, i)
			if err := eager.step(); err != nil {
				return err
			}
			eagerLoss = append(eagerLoss, eager.loss.Item())
		}
		return nil
	})
	if err != nil {
		return failf("eager steps: %v", err)
	}

	graphed, err := newGraphNet(c, gpu)
	if err != nil {
		return failf("graph model: %v", err)
	}
	defer graphed.free()
	feed(graphed, 0)
	start := time.Now()
	g, err := cudagraph.Capture(gpu, graphed.step, cudagraph.Options{Warmup: cudagraph.DefaultWarmup})
	if err != nil {
		return failf("capture: %v", err)
	}
	defer g.Free()
	r.Figures["capture seconds (warm-up included)"] = round3(time.Since(start).Seconds())
	err = torch.Main().DoErr(func() error {
		for i := 1; i <= graphTraj; i++ {
			feed(graphed, i)
			if err := g.Replay(); err != nil {
				return err
			}
			graphLoss = append(graphLoss, graphed.loss.Item())
		}
		return nil
	})
	if err != nil {
		return failf("replay: %v", err)
	}
	worst := 0.0
	for i := range eagerLoss {
		worst = math.Max(worst, math.Abs(eagerLoss[i]-graphLoss[i])/math.Max(math.Abs(eagerLoss[i]), 1e-12))
	}
	r.Figures["losses eager (first, last)"] = fmt.Sprintf("%.6f, %.6f", eagerLoss[0], eagerLoss[len(eagerLoss)-1])
	r.Figures["losses graph replay (first, last)"] = fmt.Sprintf("%.6f, %.6f", graphLoss[0], graphLoss[len(graphLoss)-1])
	r.Figures["loss trajectory: worst relative Δ, graph vs eager"] = fmt.Sprintf("%.2e over %d steps (tolerance %.0e)", worst, graphTraj, graphLossTol)
	// A replay that did nothing would leave the loss tensor as the
	// capture made it, not eager's trajectory.
	if !(worst <= graphLossTol) {
		r.Status = Fail
		r.Summary = fmt.Sprintf("graph replay's losses differ from eager's by %.2e (tolerance %.0e): eager %v, replay %v",
			worst, graphLossTol, eagerLoss, graphLoss)
		return r
	}

	// Timing: eager Go and graph replay (inputs copied in before each).
	var eagerMS, graphMS float64
	err = torch.Main().DoErr(func() error {
		var err error
		if eagerMS, err = timeSteps(c, gpu, eager.step); err != nil {
			return fmt.Errorf("eager: %w", err)
		}
		k := 0
		if graphMS, err = timeSteps(c, gpu, func() error {
			k = k%graphTraj + 1
			feed(graphed, k)
			return g.Replay()
		}); err != nil {
			return fmt.Errorf("graph: %w", err)
		}
		return nil
	})
	if err != nil {
		return failf("timing: %v", err)
	}
	py, err := pyGraphStep(env, c)
	if err != nil {
		return failf("python: %v", err)
	}
	r.Figures["python torch"] = py.Torch
	rows := []string{
		fmt.Sprintf("eager Go (torchfit)           %8.3f ms/step  %s", eagerMS, ratioVs(eagerMS, py.EagerMS)),
		fmt.Sprintf("graph replay Go (cudagraph)   %8.3f ms/step  %s", graphMS, ratioVs(graphMS, py.EagerMS)),
		fmt.Sprintf("eager Python                  %8.3f ms/step  1.00", py.EagerMS),
	}
	if py.CompiledNA != "" {
		rows = append(rows, "torch.compile reduce-overhead  n/a: "+py.CompiledNA)
	} else {
		rows = append(rows, fmt.Sprintf("torch.compile reduce-overhead %8.3f ms/step  %s (compiled in %.1f s)", py.CompiledMS,
			ratioVs(py.CompiledMS, py.EagerMS), py.CompileSeconds))
		r.Figures["compiled Python ms/step"] = round3(py.CompiledMS)
	}
	r.Figures["ms/step, over eager Python"] = strings.Join(rows, "\n")
	r.Figures["eager Go ms/step"] = round3(eagerMS)
	r.Figures["graph Go ms/step"] = round3(graphMS)
	r.Figures["eager Python ms/step"] = round3(py.EagerMS)
	eagerGoal, graphGoal := eagerMS <= 0.7*py.EagerMS, graphMS <= 0.5*py.EagerMS
	r.Figures["goal eager Go ≤ 0.7× eager Python met"] = eagerGoal
	r.Figures["goal graph replay ≤ 0.5× eager Python met"] = graphGoal
	r.Status = Pass
	r.Summary = fmt.Sprintf("replay follows eager (worst loss Δ %.1e over %d steps); ms/step eager Go %.3f, graph %.3f, eager Python %.3f (Go %.2f×, graph %.2f×)",
		worst, graphTraj, eagerMS, graphMS, py.EagerMS, eagerMS/py.EagerMS, graphMS/py.EagerMS)
	if py.CompiledNA == "" {
		r.Summary += fmt.Sprintf(", compiled %.3f (%.2f×)", py.CompiledMS, py.CompiledMS/py.EagerMS)
	} else {
		r.Summary += "; compiled: " + py.CompiledNA
	}
	return r
}

func ratioVs(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
