package torch_test

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
)

// Tensors made inside a scope are released when it ends, except those
// kept; memory is counted exactly, on the CPU too.
func ExampleTidy() {
	before := torch.MustMemoryStats(torch.CPU).Allocated
	var kept *torch.Tensor
	torch.Tidy(func() {
		a := torch.Ones([]int64{1000, 1000}) // 4,000,000 bytes
		b := a.MulScalar(2)                  // 4,000,000 more
		kept = b.Sum().Keep()
	})
	fmt.Println(kept.Item())
	fmt.Println("bytes held after the scope:", torch.MustMemoryStats(torch.CPU).Allocated-before)
	kept.Free()
	// Output:
	// 2e+06
	// bytes held after the scope: 4
}
