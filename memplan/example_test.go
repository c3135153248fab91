package memplan_test

import (
	"fmt"
	"os"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// A plan for an effective batch of 64 in 1 GiB. The Measure here is a
// formula so that the output is fixed; a real one runs a DryRun of the
// training step (see the DryRun example).
func ExamplePlan() {
	measure := func(c memplan.Candidate) (memplan.Measurement, error) {
		perSample, slow := int64(30<<20), 1.0 // activations per sample, recomputation
		if c.Checkpointing {
			perSample, slow = 8<<20, 1.3
		}
		micro := time.Duration(slow * float64(5*time.Millisecond+time.Duration(c.MicroBatch)*time.Millisecond))
		return memplan.Measurement{Held: 100 << 20, Peak: int64(c.MicroBatch) * perSample, Micro: micro, Update: 3 * time.Millisecond}, nil
	}
	res, err := memplan.Plan(memplan.PlanOptions{
		Budget: 1 << 30, EffectiveBatch: 64, Checkpointing: []bool{false, true},
		Precisions: memplan.Precisions(torch.CPU, amp.CPU{}), // fp32 only on a CPU without native bf16
	}, measure)
	if err != nil {
		fmt.Println(err)
		return
	}
	res.Table(os.Stdout)
	// Output:
	// memory plan: effective batch 64, budget 1.00 GiB, margin 10% → 921.60 MiB usable
	//      precision  checkpointing  micro-batch  accum        held        peak        need  fits  micro-batch time  update  per effective batch  runs
	//           fp32             no            1     64  100.00 MiB   30.00 MiB  130.00 MiB   yes            6.0 ms  3.0 ms             387.0 ms     1
	//           fp32             no            2     32  100.00 MiB   60.00 MiB  160.00 MiB   yes            7.0 ms  3.0 ms             227.0 ms     1
	//           fp32             no            4     16  100.00 MiB  120.00 MiB  220.00 MiB   yes            9.0 ms  3.0 ms             147.0 ms     1
	//           fp32             no            8      8  100.00 MiB  240.00 MiB  340.00 MiB   yes           13.0 ms  3.0 ms             107.0 ms     1
	//           fp32             no           16      4  100.00 MiB  480.00 MiB  580.00 MiB   yes           21.0 ms  3.0 ms              87.0 ms     3
	//   →       fp32             no           22      3  100.00 MiB  660.00 MiB  760.00 MiB   yes           27.0 ms  3.0 ms              84.0 ms     3
	//           fp32             no           24      3  100.00 MiB  720.00 MiB  820.00 MiB   yes           29.0 ms  3.0 ms              90.0 ms     1
	//           fp32             no           26      3  100.00 MiB  780.00 MiB  880.00 MiB   yes           31.0 ms  3.0 ms              96.0 ms     1
	//           fp32             no           27      3  100.00 MiB  810.00 MiB  910.00 MiB   yes           32.0 ms  3.0 ms              99.0 ms     1
	//           fp32             no           28      3  100.00 MiB  840.00 MiB  940.00 MiB  over           33.0 ms  3.0 ms             102.0 ms     1
	//           fp32             no           32      2  100.00 MiB  960.00 MiB    1.04 GiB  over           37.0 ms  3.0 ms              77.0 ms     1
	//           fp32            yes            1     64  100.00 MiB    8.00 MiB  108.00 MiB   yes            7.8 ms  3.0 ms             502.2 ms     1
	//           fp32            yes            2     32  100.00 MiB   16.00 MiB  116.00 MiB   yes            9.1 ms  3.0 ms             294.2 ms     1
	//           fp32            yes            4     16  100.00 MiB   32.00 MiB  132.00 MiB   yes           11.7 ms  3.0 ms             190.2 ms     1
	//           fp32            yes            8      8  100.00 MiB   64.00 MiB  164.00 MiB   yes           16.9 ms  3.0 ms             138.2 ms     1
	//           fp32            yes           16      4  100.00 MiB  128.00 MiB  228.00 MiB   yes           27.3 ms  3.0 ms             112.2 ms     1
	//           fp32            yes           32      2  100.00 MiB  256.00 MiB  356.00 MiB   yes           48.1 ms  3.0 ms              99.2 ms     3
	//           fp32            yes           64      1  100.00 MiB  512.00 MiB  612.00 MiB   yes           89.7 ms  3.0 ms              92.7 ms     3
	// chosen: micro-batch 22 × 3 accumulation steps, fp32, no checkpointing: 84.0 ms per effective batch, needs 760.00 MiB of 921.60 MiB usable (the fastest that fits)
}

// A dry run of one training step: two micro-batches of 8 (of an effective
// batch of 32, so four accumulation steps) and an AdamW update, measured
// and undone.
func ExampleDryRun() {
	torch.ManualSeed(1)
	m := nn.NewSequential(nn.NewLinear(16, 256, true), nn.NewReLU(), nn.NewLinear(256, 1, true))
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	micro := func() error {
		x, y := torch.Randn([]int64{8, 16}), torch.Randn([]int64{8, 1})
		torch.MSELoss(m.Forward(x), y, torch.ReduceMean).MulScalar(8.0 / 32).Backward()
		return nil
	}
	update := func() error { opt.Step(); opt.ZeroGrad(); return nil }
	meas, err := memplan.DryRun{Device: torch.CPU, Model: m, Optimizers: []nn.Optimizer{opt}}.Run(4, micro, update)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("a step needs more than is held between steps:", meas.Need() > meas.Held)
	fmt.Println("time per effective batch > 0:", 4*meas.Micro+meas.Update > 0)
	// Output:
	// a step needs more than is held between steps: true
	// time per effective batch > 0: true
}

// The weights, gradients and optimizer state of a model, and its
// activations fitted from dry runs at batches 2 and 4.
func ExampleEstimateMemory() {
	torch.ManualSeed(1)
	m := nn.NewSequential(nn.NewLinear(16, 256, true), nn.NewReLU(), nn.NewLinear(256, 1, true))
	defer nn.Free(m)
	est, err := memplan.EstimateMemory(m, memplan.EstimateOptions{
		Optimizer: memplan.AdamW, Batch: 64,
		Forward: func(n int) *torch.Tensor {
			return torch.MSELoss(m.Forward(torch.Randn([]int64{int64(n), 16})), torch.Randn([]int64{int64(n), 1}), torch.ReduceMean)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("parameters:", est.Params)
	fmt.Println("weights, bytes:", est.Weights)
	fmt.Println("gradients, bytes:", est.Gradients)
	fmt.Println("AdamW state, bytes:", est.OptimizerState)
	fmt.Println("activations grow with the batch:", est.ActivationPerSample > 0)
	// Output:
	// parameters: 4609
	// weights, bytes: 18436
	// gradients, bytes: 18436
	// AdamW state, bytes: 36888
	// activations grow with the batch: true
}

// The largest micro-batch that fits, by doubling then bisection; here a
// step of n samples runs out of memory past 37.
func ExampleFindBatchSize() {
	res, err := memplan.FindBatchSize(torch.CPU, 256, func(n int) error {
		if n > 37 {
			return &torch.Error{Op: "example", Msg: "out of memory", OOM: true}
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range res.Trials {
		fmt.Print(t.MicroBatch, " ")
	}
	fmt.Println("→", res.MicroBatch)
	// Output:
	// 1 2 4 8 16 32 64 48 40 36 38 37 → 37
}
