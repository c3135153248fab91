package torch

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

func TestBuildDescribesTheLoadedLibrary(t *testing.T) {
	b, err := Build()
	require.NoError(t, err)
	maj, min, _ := LibtorchVersion()
	require.True(t, strings.HasPrefix(b.Version, fmt.Sprintf("%d.%d.", maj, min)), "loaded %s, headers %d.%d", b.Version, maj, min)
	require.FileExists(t, b.Library)
	require.Contains(t, b.Config, "PyTorch built with")
	require.Equal(t, b.CUDA.Available, len(b.CUDA.Devices) > 0)
	require.Equal(t, b.CUDA.Available, CUDAAvailable())
	if !b.CUDA.Available {
		require.NotEmpty(t, b.CUDA.Reason)
	}
}

// Every reason CUDA can be missing, forced (this machine shows one).
func TestNoCUDAReasons(t *testing.T) {
	cpuOnly := BuildInfo{Version: "1.13.0", Library: "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so"}
	cudaLib := BuildInfo{Version: "2.11.0", Library: "/nowhere/lib/libtorch_cpu.so", CUDABuild: true}
	tagged := cudaLib
	tagged.CUDATag = true
	for _, tc := range []struct {
		name string
		info BuildInfo
		c    capi.CUDAInfo
		want string
	}{
		{"CPU-only libtorch", cpuOnly, capi.CUDAInfo{}, "is a CPU-only build"},
		{"libtorch_cuda not linked", cudaLib, capi.CUDAInfo{}, "libtorch_cuda is not linked"},
		{"hooks missing despite the tag", tagged, capi.CUDAInfo{}, "libtorch_cuda is not linked"},
		{"no driver", tagged, capi.CUDAInfo{Hooks: true, CUDAError: 35, ErrorText: "cudaErrorInsufficientDriver: CUDA driver version is insufficient"}, "no usable NVIDIA driver (cudaErrorInsufficientDriver"},
		{"driver without version", tagged, capi.CUDAInfo{Hooks: true, CUDAError: 999}, "no usable NVIDIA driver"},
		{"no device", tagged, capi.CUDAInfo{Hooks: true, DriverVersion: 13000, CUDAError: 100, ErrorText: "cudaErrorNoDevice: no CUDA-capable device is detected"}, "no CUDA device (cudaErrorNoDevice"},
		{"other runtime error", tagged, capi.CUDAInfo{Hooks: true, DriverVersion: 13000, CUDAError: 2, ErrorText: "cudaErrorMemoryAllocation: out of memory"}, "the CUDA runtime failed: cudaErrorMemoryAllocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, noCUDAReason(tc.info, tc.c), tc.want)
		})
	}
}

func TestVersionEncodings(t *testing.T) {
	require.Equal(t, "13.0", cudaVersion(13000))
	require.Equal(t, "12.8", cudaVersion(12080))
	require.Equal(t, "9.19.0", cudnnVersion(91900))
	require.Equal(t, "8.9.7", cudnnVersion(8907))
	require.Equal(t, "2.28.9", ncclVersion(22809))
	require.Equal(t, "2.7.8", ncclVersion(2708))
}

// A CUDA device asked for where there is none is a typed error naming what
// is missing, from CheckDevice, MemoryStats and the tensor ops, never a
// libtorch dispatcher table.
func TestMissingCUDADeviceIsATypedError(t *testing.T) {
	n := CUDADeviceCount()
	missing := CUDA(n) // one past the last device (cuda:0 without CUDA)
	err := CheckDevice(missing)
	require.ErrorIs(t, err, ErrNoCUDA)
	require.NotContains(t, err.Error(), "Could not run")
	require.NoError(t, CheckDevice(CPU))

	_, err = MemoryStats(missing)
	require.ErrorIs(t, err, ErrNoCUDA)
	require.ErrorIs(t, SetMemoryFraction(missing, 0.5), ErrNoCUDA)

	x := Ones([]int64{2}, Float32)
	defer x.Free()
	for name, fn := range map[string]func(){
		"To":    func() { x.To(missing, Float32) },
		"Zeros": func() { Zeros([]int64{2}, Float32, missing) },
	} {
		err := Try(fn)
		require.ErrorIs(t, err, ErrNoCUDA, name)
		require.False(t, errors.Is(err, ErrOutOfMemory), name)
		require.Less(t, strings.Count(err.Error(), "\n"), 1, "%s: one line: %v", name, err)
	}
}
