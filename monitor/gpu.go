package monitor

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU is one device's reading.
type GPU struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	MemUsed  uint64 `json:"mem_used"`  // bytes
	MemTotal uint64 `json:"mem_total"` // bytes
	// Util and MemUtil are NVML's utilisation rates (%, over its last
	// sample period): kernels running, and memory being read or written.
	Util    uint32  `json:"util"`
	MemUtil uint32  `json:"mem_util"`
	PowerW  float64 `json:"power_w"`
	TempC   uint32  `json:"temp_c"`
	// Processes are the compute processes on the device and their memory.
	Processes []Process `json:"processes,omitempty"`
}

// Process is a compute process on a GPU. In a container NVML reports the
// host's process ids, so a process may not find itself by its own PID.
type Process struct {
	PID     uint32 `json:"pid"`
	MemUsed uint64 `json:"mem_used"`
}

// GPUSource reads GPUs.
type GPUSource interface {
	Read() ([]GPU, error)
	Close() error
}

// ErrNoNVML is no NVML: no NVIDIA driver library (libnvidia-ml.so.1), or
// no device. The monitor then watches the host only.
var ErrNoNVML = errors.New("no NVIDIA GPU")

// DefaultNVMLLibrary is the library go-nvml opens (with dlopen, at run
// time: torchfit builds and runs without a driver).
const DefaultNVMLLibrary = "libnvidia-ml.so.1"

// nvmlSource reads every device through NVML.
type nvmlSource struct {
	lib     nvml.Interface
	devices []nvml.Device
	names   []string
}

// OpenNVML initialises NVML from the library at path (DefaultNVMLLibrary
// when empty). Without the library or a device it returns an error
// wrapping ErrNoNVML that says why.
func OpenNVML(path string) (GPUSource, error) {
	if path == "" {
		path = DefaultNVMLLibrary
	}
	return openLib(nvml.New(nvml.WithLibraryPath(path)), path)
}

// openLib opens every device of lib: the real NVML, or a fake in tests.
func openLib(lib nvml.Interface, path string) (GPUSource, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("%w: %s not found", ErrNoNVML, path)
		}
		return nil, fmt.Errorf("%w: NVML init: %v", ErrNoNVML, ret)
	}
	s := &nvmlSource{lib: lib}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		lib.Shutdown()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("%w: NVML device count: %v", ErrNoNVML, ret)
		}
		return nil, fmt.Errorf("%w: NVML finds no device", ErrNoNVML)
	}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			lib.Shutdown()
			return nil, fmt.Errorf("monitor: NVML device %d: %v", i, ret)
		}
		name, ret := d.GetName()
		if ret != nvml.SUCCESS {
			name = fmt.Sprintf("GPU %d", i)
		}
		s.devices = append(s.devices, d)
		s.names = append(s.names, name)
	}
	return s, nil
}

// Read returns every device's reading. A reading NVML does not support on
// a device (power on some boards) stays zero.
func (s *nvmlSource) Read() ([]GPU, error) {
	out := make([]GPU, 0, len(s.devices))
	for i, d := range s.devices {
		g := GPU{Index: i, Name: s.names[i]}
		// nvmlDeviceGetMemoryInfo_v2's Used leaves out the memory the
		// driver reserves, as nvidia-smi's memory.used does (v1's counts it:
		// 479 MiB more on an H100 with driver 580); older drivers have v1 only.
		if mem, ret := d.GetMemoryInfo_v2(); ret == nvml.SUCCESS {
			g.MemUsed, g.MemTotal = mem.Used, mem.Total
		} else {
			mem, ret := d.GetMemoryInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("monitor: GPU %d memory: %v", i, ret)
			}
			g.MemUsed, g.MemTotal = mem.Used, mem.Total
		}
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			g.Util, g.MemUtil = u.Gpu, u.Memory
		}
		if p, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
			g.PowerW = float64(p) / 1000
		}
		if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			g.TempC = t
		}
		if ps, ret := d.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
			for _, p := range ps {
				g.Processes = append(g.Processes, Process{PID: p.Pid, MemUsed: p.UsedGpuMemory})
			}
		}
		out = append(out, g)
	}
	return out, nil
}

func (s *nvmlSource) Close() error {
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("monitor: NVML shutdown: %v", ret)
	}
	return nil
}
