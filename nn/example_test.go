package nn_test

import (
	"fmt"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// A model with nn: layers registered under PyTorch's names, one training
// step with AdamW, everything released by the scope.
func Example() {
	torch.ManualSeed(0)
	m := nn.NewSequential(nn.NewLinear(4, 8, true), nn.NewReLU(), nn.NewLinear(8, 1, true))
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-2))
	defer opt.Free()
	for _, p := range nn.Parameters(m) {
		fmt.Println(p.Name, p.T.Shape())
	}
	fmt.Println("parameters:", nn.NumParams(m))
	torch.Tidy(func() {
		x, y := torch.Randn([]int64{16, 4}), torch.Randn([]int64{16, 1})
		loss := torch.MSELoss(m.Forward(x), y, torch.ReduceMean)
		loss.Backward()
		opt.Step()
		opt.ZeroGrad()
		fmt.Println("loss is a scalar:", loss.Dim() == 0)
	})
	// Output:
	// 0.weight [8 4]
	// 0.bias [8]
	// 2.weight [1 8]
	// 2.bias [1]
	// parameters: 49
	// loss is a scalar: true
}
