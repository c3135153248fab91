package amp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

// "auto" for both answers of the CPU probe, and every spelling.
func TestParsePrecision(t *testing.T) {
	native := CPU{NativeBF16: true, Source: "test"}
	emulated := CPU{NativeBF16: false, Source: "test"}
	for _, tc := range []struct {
		in   string
		dev  torch.Device
		cpu  CPU
		want Precision
		err  bool
	}{
		{"auto", torch.CPU, native, BF16, false},
		{"auto", torch.CPU, emulated, FP32, false},
		{"on", torch.CPU, native, BF16, false},
		{"auto", torch.CUDA(0), emulated, FP16, false},
		{"bf16", torch.CPU, emulated, BF16, false},
		{"bfloat16", torch.CPU, native, BF16, false},
		{"no", torch.CPU, native, FP32, false},
		{"", torch.CPU, native, FP32, false},
		{"FP32", torch.CPU, native, FP32, false},
		{"fp16", torch.CUDA(0), native, FP16, false},
		{"fp16", torch.CPU, native, "", true}, // libtorch 1.13: bf16 only on the CPU
		{"fp16", torch.CPU, CPU{NativeBF16: true, Source: "test", FP16Autocast: true}, FP16, false},
		{"half", torch.CPU, CPU{Source: "test", FP16Autocast: true}, FP16, false},
		{"int8", torch.CPU, native, "", true},
	} {
		c, err := ResolvePrecision(tc.in, tc.dev, tc.cpu)
		if tc.err {
			require.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, c.Precision, "%q on %v, native bf16 %v", tc.in, tc.dev, tc.cpu.NativeBF16)
		require.NotEmpty(t, c.Reason)
	}
	c, _ := ResolvePrecision("auto", torch.CPU, emulated)
	require.Contains(t, c.String(), "no native bfloat16")
	maj, min, _ := torch.LibtorchVersion()
	require.Equal(t, maj > 2 || (maj == 2 && min >= 4), HostCPU().FP16Autocast, "libtorch %d.%d", maj, min)
}

func TestHostCPU(t *testing.T) {
	t.Setenv(EnvNativeBF16, "1")
	require.True(t, HostCPU().NativeBF16)
	t.Setenv(EnvNativeBF16, "0")
	require.False(t, HostCPU().NativeBF16)
	for _, tc := range []struct {
		info string
		want bool
	}{
		{"processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512_vnni\n", true},
		{"flags\t\t: fpu amx_bf16 amx_tile\n", true},
		{"flags\t\t: fpu sse avx2 avx512f avx512_vnni\n", false},
		{"flags\t\t: fpu avx512_bf16x\n", false},
		{"model name: x\n", false},
	} {
		require.Equal(t, tc.want, cpuFromInfo(tc.info).NativeBF16, tc.info)
	}
}
