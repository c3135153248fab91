package scan

import (
	"fmt"

	"github.com/torchfit/torchfit/scan/internal/kernel"
	"github.com/torchfit/torchfit/torch"
)

type fused struct {
	k    int64
	impl int
}

// Fused is the native kernel with chunks of k steps (0: DefaultChunk): see
// the package doc. On CUDA tensors it runs the CUDA kernel when the build
// has the cuda tag (float32 compute, at most 256 states), else the same
// chunked algorithm in ATen ops; FusedRuns says which.
func Fused(k int) Scan { return fused{chunkOr(k), kernel.Auto} }

// What runs Fused (FusedRuns' answers).
const (
	RunsCPU  = "cpu"  // the CPU kernel
	RunsCUDA = "cuda" // the CUDA kernel
	RunsATen = "aten" // the chunked algorithm in ATen ops
)

// CUDAKernelBuilt reports whether the CUDA kernel is compiled in (the cuda
// build tag, and make scan-kernel made its fat binary); whether it runs is
// FusedRuns' answer for a CUDA device.
func CUDAKernelBuilt() bool { return kernel.CUDABuilt && len(kernel.CUDAImage()) > 0 }

// FusedRuns reports what runs Fused for inputs of dtype dt on dev with n
// states per channel: RunsCPU, RunsCUDA or RunsATen. It asks the operator
// and needs no device.
func FusedRuns(dev torch.Device, dt torch.DType, n int64) (string, error) {
	uses, err := kernel.Implementation(dev, dt, n, kernel.Auto)
	if err != nil {
		return "", err
	}
	switch uses {
	case kernel.UsesCPU:
		return RunsCPU, nil
	case kernel.UsesCUDA:
		return RunsCUDA, nil
	case kernel.UsesATen:
		return RunsATen, nil
	}
	return "", fmt.Errorf("scan: the operator answers implementation %d", uses)
}

func (f fused) Name() string { return "fused" }

func (f fused) Apply(x, delta, A, B, C, D *torch.Tensor) (y, last *torch.Tensor) {
	if _, err := kernel.Check(); err != nil {
		panic(&torch.Error{Op: "scan.Fused", Msg: err.Error()})
	}
	check("scan.Fused", x, delta, A, B, C, D) // the same checks and messages as the others
	out := torch.CallOp(kernel.Op, "", x, delta, A, B, C, D, f.k, f.impl)
	return out[0].(*torch.Tensor), out[1].(*torch.Tensor)
}
