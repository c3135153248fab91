package torch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// ErrNoCUDA matches (errors.Is) the error for a CUDA device asked for where
// there is none: not a CUDA build of libtorch, torchfit built without the
// cuda tag, no driver, no device, or a device index past the last one. The
// *Error's message names what is missing.
var ErrNoCUDA = errors.New("CUDA not available")

// BuildInfo describes the libtorch torchfit was compiled against and the one
// loaded, and what CUDA offers. Build returns it.
type BuildInfo struct {
	// Version is the loaded library's version (from its configuration);
	// HeaderVersion the torch/version.h the shim was compiled against.
	Version, HeaderVersion string
	Library                string // the libtorch_cpu file loaded
	CXX11ABI               bool   // the shim's _GLIBCXX_USE_CXX11_ABI
	CUDATag                bool   // built with the cuda tag (libtorch_cuda linked)
	CUDABuild              bool   // the library was built with CUDA (USE_CUDA=ON)
	Config                 string // at::show_config(): torch.__config__.show()
	CUDA                   CUDAStatus
}

// CUDAStatus is what CUDA offers this process.
type CUDAStatus struct {
	Available bool
	// Reason says why CUDA is not available (empty when it is).
	Reason string
	// Versions compiled in (empty when absent): CUDA runtime, cuDNN, NCCL;
	// Driver is the installed driver's CUDA version (empty: no driver).
	Runtime, CuDNN, NCCL, Driver string
	// ExpandableSegments is the caching allocator's setting in force
	// (nil: unknown, as on libtorch 1.13 or without a device).
	ExpandableSegments *bool
	AllocatorSettings  string
	Devices            []CUDADevice
}

// CUDADevice is one device's properties.
type CUDADevice struct {
	Index                 int
	Name                  string
	Major, Minor          int // compute capability
	Multiprocessors       int
	TotalBytes, FreeBytes int64
}

// Capability prints the compute capability: "9.0".
func (d CUDADevice) Capability() string { return fmt.Sprintf("%d.%d", d.Major, d.Minor) }

// NativeBF16 reports whether the device computes bfloat16 natively
// (compute capability 8.0 and later).
func (d CUDADevice) NativeBF16() bool { return d.Major >= 8 }

var (
	buildOnce sync.Once
	buildInfo BuildInfo
	buildErr  error
)

var configVersion = regexp.MustCompile(`TORCH_VERSION=([0-9][^,\s]*)`)

// Build reports the libtorch and CUDA torchfit runs on (computed once; the
// devices' free memory is as of the first call).
func Build() (BuildInfo, error) {
	buildOnce.Do(func() { buildInfo, buildErr = readBuild() })
	return buildInfo, buildErr
}

func readBuild() (BuildInfo, error) {
	b, err := capi.BuildInfo()
	if err != nil {
		return BuildInfo{}, wrapErr("Build", err)
	}
	info := BuildInfo{
		HeaderVersion: fmt.Sprintf("%d.%d.%d", b.HeaderMajor, b.HeaderMinor, b.HeaderPatch),
		Library:       b.Library, CXX11ABI: b.CXX11ABI == 1, CUDATag: b.CUDATag, Config: b.Config,
		CUDABuild: strings.Contains(b.Config, "USE_CUDA=ON") || strings.Contains(b.Config, "USE_CUDA=1"),
	}
	info.Version = info.HeaderVersion
	if m := configVersion.FindStringSubmatch(b.Config); m != nil {
		info.Version = m[1]
	}
	c, err := capi.CUDAInfoGet()
	if err != nil {
		return info, wrapErr("Build", err)
	}
	st := CUDAStatus{AllocatorSettings: c.AllocatorSettings}
	if c.Hooks {
		st.Runtime = cudaVersion(c.CUDARTVersion)
		if c.CuDNNVersion > 0 {
			st.CuDNN = cudnnVersion(c.CuDNNVersion)
		}
		if c.NCCLVersion > 0 {
			st.NCCL = ncclVersion(c.NCCLVersion)
		}
		if c.DriverVersion > 0 {
			st.Driver = cudaVersion(int64(c.DriverVersion))
		}
		if c.ExpandableSegments >= 0 {
			on := c.ExpandableSegments == 1
			st.ExpandableSegments = &on
		}
	}
	for i := 0; i < c.DeviceCount; i++ {
		d, err := capi.CUDADeviceProps(i)
		if err != nil {
			return info, wrapErr("Build", err)
		}
		st.Devices = append(st.Devices, CUDADevice{
			Index: i, Name: d.Name, Major: d.Major, Minor: d.Minor, Multiprocessors: d.Multiprocessors,
			TotalBytes: d.Total, FreeBytes: d.Free,
		})
	}
	st.Available = len(st.Devices) > 0
	if !st.Available {
		st.Reason = noCUDAReason(info, c)
	}
	info.CUDA = st
	return info, nil
}

// noCUDAReason says what is missing, most basic first.
func noCUDAReason(info BuildInfo, c capi.CUDAInfo) string {
	switch {
	case !info.CUDABuild:
		return fmt.Sprintf("libtorch %s (%s) is a CPU-only build; point LIBTORCH at a CUDA build (the torch wheel from PyPI is one) and build with the cuda tag",
			info.Version, filepath.Dir(info.Library))
	case !info.CUDATag || !c.Hooks:
		hint := "build with -tags cuda (make adds it when LIBTORCH has lib/libtorch_cuda.so)"
		if _, err := os.Stat(filepath.Join(filepath.Dir(info.Library), "libtorch_cuda.so")); err != nil {
			hint = "libtorch_cuda.so is not beside " + filepath.Base(info.Library) + " in " + filepath.Dir(info.Library)
		}
		return "libtorch_cuda is not linked into this program (torchfit built without the cuda tag): " + hint
	case c.DriverVersion == 0 || c.CUDAError == 35 || c.CUDAError == 34: // cudaErrorInsufficientDriver, cudaErrorStubLibrary
		return "no usable NVIDIA driver (" + orNone(c.ErrorText, "cudaDriverGetVersion found none") + ")"
	case c.CUDAError == 100: // cudaErrorNoDevice
		return "no CUDA device (" + c.ErrorText + "; check CUDA_VISIBLE_DEVICES and nvidia-smi)"
	case c.CUDAError != 0:
		return "the CUDA runtime failed: " + c.ErrorText
	}
	return "no CUDA device"
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// cudaVersion prints CUDA's 1000·major + 10·minor encoding.
func cudaVersion(v int64) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// cudnnVersion prints cuDNN's encoding: 10000·major + 100·minor + patch
// from 9.0, 1000·major + 100·minor + patch before.
func cudnnVersion(v int64) string {
	if v >= 90000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

// ncclVersion prints NCCL's encoding: 10000·major + 100·minor + patch
// from 2.9, 1000·major + 100·minor + patch before.
func ncclVersion(v int64) string {
	if v >= 20900 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

// CheckDevice returns nil when d can hold tensors, else an *Error matching
// ErrNoCUDA that names what is missing (no CUDA build, no cuda tag, no
// driver, no device, an index past the last device).
func CheckDevice(d Device) error {
	if d.Type != DeviceCUDA {
		return nil
	}
	info, err := Build()
	if err != nil {
		return err
	}
	n := len(info.CUDA.Devices)
	switch {
	case n == 0:
		return &Error{Op: "CheckDevice", Msg: "CUDA not available: " + info.CUDA.Reason, NoCUDA: true}
	case d.Index >= n:
		return &Error{Op: "CheckDevice", NoCUDA: true,
			Msg: fmt.Sprintf("%s does not exist: CUDA sees %d device%s (cuda:0%s)", d, n, plural(n), lastDevice(n))}
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func lastDevice(n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" to cuda:%d", n-1)
}

// mustDevice panics with CheckDevice's error for op.
func mustDevice(op string, d Device) {
	if d.Type != DeviceCUDA {
		return
	}
	if err := CheckDevice(d); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Op = op
		}
		panic(err)
	}
}
