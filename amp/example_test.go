package amp_test

import (
	"fmt"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// A mixed-precision step: the precision chosen for this machine, the
// forward under autocast (matmuls in the low precision, the loss in
// float32), and the GradScaler's unscale/step/update (float16 on CUDA; on
// the CPU the scaler is off and passes through).
func Example() {
	torch.ManualSeed(0)
	lin := nn.NewLinear(8, 4, true)
	defer nn.Free(lin)
	opt := nn.NewSGD(nn.Parameters(lin), nn.SGDConfig{LR: 0.1})
	defer opt.Free()
	scaler := amp.NewGradScaler(torch.CPU, amp.ScalerOptions{Disabled: true})
	torch.Tidy(func() {
		x := torch.Randn([]int64{2, 8})
		var out, loss *torch.Tensor
		amp.Autocast(torch.CPU, torch.BFloat16, func() {
			out = lin.Forward(x)
			loss = out.ToDType(torch.Float32).Square().Mean()
		})
		fmt.Println("linear under autocast:", out.DType())
		fmt.Println("loss:", loss.DType())
		scaler.Scale(loss).Backward()
		scaler.Unscale(opt)
		fmt.Println("stepped:", scaler.Step(opt))
		scaler.Update()
		amp.ClearCache() // the bf16 copies of the weights are stale now
	})
	c, _ := amp.ResolvePrecision("auto", torch.CPU, amp.CPU{NativeBF16: false, Source: "example"})
	fmt.Println(c)
	// Output:
	// linear under autocast: bfloat16
	// loss: float32
	// stepped: true
	// fp32 (auto: the CPU has no native bfloat16 (example), and emulated bf16 is many times slower)
}
