// Package monitor watches GPU memory, utilisation, power and temperature
// through NVIDIA's NVML (github.com/NVIDIA/go-nvml, which opens
// libnvidia-ml.so.1 at run time, so torchfit builds and runs without a
// driver), the host's CPU and memory (/proc), and the resident memory of a
// watched process: `torchfit monitor`, the seed's gpu_monitor.py.
//
// Run samples every Config.Interval until a duration, a signal or the end
// of the watched process; each sample goes to a log (JSON lines, or CSV)
// and, on a terminal, to a live line; the Summary gives peaks and means
// and reads the GPU's memory use against the seed's expectation (peak
// 60–80 %, mean 50–70 % of the device). Plot draws a log.
//
// Without libnvidia-ml.so.1 or a device, OpenNVML returns an error
// wrapping ErrNoNVML that says which; the command says so in one line and
// monitors the host. NVML reports processes by the host's process ids: in
// a container a process may not find its own GPU memory by its PID.
package monitor
