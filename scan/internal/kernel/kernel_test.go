package kernel

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// The operator's choice of implementation, asked without running a scan:
// the CPU kernel for CPU tensors in float32 and float64 (half inputs count
// as float32), the CUDA kernel for CUDA float32 with up to 256 states when
// the cuda tag compiled it in and its fat binary is embedded, the ATen-op
// path otherwise; impl=ATen always
// the ATen-op path; impl=Native an error where there is no native kernel.
func TestImplementation(t *testing.T) {
	ready := CUDABuilt && len(CUDAImage()) > 0
	cuda := UsesATen
	if ready {
		cuda = UsesCUDA
	}
	for _, tc := range []struct {
		dev   torch.Device
		dt    torch.DType
		state int64
		impl  int
		want  int
	}{
		{torch.CPU, torch.Float32, 16, Auto, UsesCPU},
		{torch.CPU, torch.Float64, 16, Auto, UsesCPU},
		{torch.CPU, torch.BFloat16, 16, Auto, UsesCPU},
		{torch.CPU, torch.Float32, 1000, Native, UsesCPU},
		{torch.CPU, torch.Float32, 16, ATen, UsesATen},
		{torch.CUDA(0), torch.Float32, 16, Auto, cuda},
		{torch.CUDA(0), torch.BFloat16, 16, Auto, cuda},
		{torch.CUDA(0), torch.Float16, 1, Auto, cuda},
		{torch.CUDA(0), torch.Float32, 256, Auto, cuda},
		{torch.CUDA(0), torch.Float32, 257, Auto, UsesATen},
		{torch.CUDA(0), torch.Float64, 16, Auto, UsesATen},
		{torch.CUDA(0), torch.Float32, 16, ATen, UsesATen},
	} {
		got, err := Implementation(tc.dev, tc.dt, tc.state, tc.impl)
		require.NoError(t, err, "%v %v %d states impl %d", tc.dev, tc.dt, tc.state, tc.impl)
		require.Equal(t, tc.want, got, "%v %v %d states impl %d", tc.dev, tc.dt, tc.state, tc.impl)
	}
	if ready {
		got, err := Implementation(torch.CUDA(0), torch.Float32, 16, Native)
		require.NoError(t, err)
		require.Equal(t, UsesCUDA, got)
	}
	for _, tc := range []struct {
		dev   torch.Device
		dt    torch.DType
		state int64
		want  string
	}{
		{torch.CUDA(0), torch.Float64, 16, "no native kernel for Double inputs with 16 states on cuda"},
		{torch.CUDA(0), torch.Float32, 300, "no native kernel for Float inputs with 300 states on cuda"},
	} {
		_, err := Implementation(tc.dev, tc.dt, tc.state, Native)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := Implementation(torch.CUDA(0), torch.Float32, 16, Native)
	switch {
	case !CUDABuilt:
		require.ErrorContains(t, err, "built without the cuda tag")
	case !ready:
		require.ErrorContains(t, err, "fat binary was not built: make scan-kernel")
	}
	_, err = Implementation(torch.CPU, torch.Float32, 16, 3)
	require.ErrorContains(t, err, "unknown impl 3")
	_, err = Implementation(torch.CPU, torch.Float32, 0, Auto)
	require.ErrorContains(t, err, "state must be at least 1")
}
