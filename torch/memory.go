package torch

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// MemStats are an allocator's counters for one device.
type MemStats struct {
	Device         Device
	Allocated      int64 // bytes held by live tensors
	PeakAllocated  int64 // high-water mark since start or ResetPeakMemory
	Reserved       int64 // bytes the allocator holds (CUDA cache included); CPU: = Allocated
	PeakReserved   int64
	Blocks         int64 // live allocations
	Allocations    int64 // allocations since start
	OOMs           int64 // allocations refused
	Limit          int64 // cap in bytes (0: none)
	DeviceTotal    int64 // CUDA: the device's memory
	DeviceFree     int64 // CUDA: free device memory (cudaMemGetInfo)
	lastOOMRequest int64
}

func devArgs(d Device) (int, int) {
	idx := d.Index
	if d.Type == DeviceCUDA && idx < 0 {
		idx = 0
	}
	return int(d.Type), idx
}

// MemoryStats returns the allocator counters of device d. On the CPU they
// come from torchfit's counting allocator, which sees every CPU tensor byte.
func MemoryStats(d Device) (MemStats, error) {
	typ, idx := devArgs(d)
	s, err := capi.MemoryStats(typ, idx)
	if err != nil {
		return MemStats{}, wrapErr("MemoryStats", err)
	}
	return MemStats{
		Device: d, Allocated: s.Allocated, PeakAllocated: s.PeakAllocated, Reserved: s.Reserved,
		PeakReserved: s.PeakReserved, Blocks: s.NumBlocks, Allocations: s.NumAllocs, OOMs: s.NumOOMs,
		Limit: s.Limit, DeviceTotal: s.DeviceTotal, DeviceFree: s.DeviceFree, lastOOMRequest: s.LastOOMRequest,
	}, nil
}

// MustMemoryStats is MemoryStats that panics with *Error.
func MustMemoryStats(d Device) MemStats {
	s, err := MemoryStats(d)
	if err != nil {
		panic(err)
	}
	return s
}

// ResetPeakMemory sets the peak counters of d to the current values.
func ResetPeakMemory(d Device) error {
	typ, idx := devArgs(d)
	if err := capi.ResetPeak(typ, idx); err != nil {
		return wrapErr("ResetPeakMemory", err)
	}
	return nil
}

// SetMemoryLimit caps the memory torchfit may allocate on d (0 removes the
// cap). An allocation past the cap fails with ErrOutOfMemory, as a real one
// would: on the CPU this simulates a smaller GPU. On CUDA it sets the caching
// allocator's per-process memory fraction.
func SetMemoryLimit(d Device, bytes int64) error {
	if bytes < 0 {
		return &Error{Op: "SetMemoryLimit", Msg: fmt.Sprintf("negative limit %d", bytes)}
	}
	typ, idx := devArgs(d)
	if d.Type == DeviceCUDA && bytes == 0 {
		return SetMemoryFraction(d, 1)
	}
	if err := capi.SetLimit(typ, idx, bytes, 0); err != nil {
		return wrapErr("SetMemoryLimit", err)
	}
	return nil
}

// SetMemoryFraction caps d at a fraction (0, 1] of its memory. On the CPU
// the fraction is of the machine's physical memory.
func SetMemoryFraction(d Device, f float64) error {
	if !(f > 0 && f <= 1) {
		return &Error{Op: "SetMemoryFraction", Msg: fmt.Sprintf("fraction %v outside (0, 1]", f)}
	}
	typ, idx := devArgs(d)
	if d.Type == DeviceCPU {
		total, err := physicalMemory()
		if err != nil {
			return &Error{Op: "SetMemoryFraction", Msg: err.Error(), wrapped: err}
		}
		return SetMemoryLimit(d, int64(f*float64(total)))
	}
	if err := capi.SetLimit(typ, idx, 0, f); err != nil {
		return wrapErr("SetMemoryFraction", err)
	}
	return nil
}

// ParseMemory reads "6GiB", "512MB", "1.5g", "1024" (bytes) or a fraction
// such as "0.9". It returns bytes, or a fraction when the text is one.
func ParseMemory(s string) (bytes int64, fraction float64, err error) {
	t := strings.TrimSpace(strings.ToLower(s))
	if f, e := strconv.ParseFloat(t, 64); e == nil && f > 0 && f <= 1 && strings.Contains(t, ".") {
		return 0, f, nil
	}
	units := []struct {
		suffix string
		mul    float64
	}{
		{"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
		{"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3},
		{"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}, {"b", 1},
	}
	mul := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mul = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mul
			break
		}
	}
	v, e := strconv.ParseFloat(t, 64)
	if e != nil || v < 0 {
		return 0, 0, fmt.Errorf("torch: bad memory size %q (want e.g. 6GiB, 512MB or a fraction like 0.9)", s)
	}
	return int64(v * mul), 0, nil
}

// EmptyCache returns the CUDA caching allocator's unused blocks to the
// driver. It lowers Reserved, never Allocated, and does not cure
// fragmentation by itself. On CPU builds it does nothing and says so.
func EmptyCache() (emptied bool, err error) {
	done, e := capi.EmptyCache()
	if e != nil {
		return false, wrapErr("EmptyCache", e)
	}
	return done, nil
}

var requestRE = regexp.MustCompile(`(?i)tried to allocate ([0-9.]+) ?(bytes|b|kib|mib|gib)`)

// fillOOM records the failed request and the allocator's stats.
func (e *Error) fillOOM() {
	dev := CPU
	if strings.Contains(e.Msg, "CUDA") {
		dev = CUDA(0)
	}
	if s, err := MemoryStats(dev); err == nil {
		e.Stats = &s
		if dev == CPU {
			e.Requested = s.lastOOMRequest
		}
	}
	if m := requestRE.FindStringSubmatch(e.Msg); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		mul := map[string]float64{"bytes": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}[strings.ToLower(m[2])]
		e.Requested = int64(min(v*mul, math.MaxInt64/2)) // no wrap to a negative size
	}
}

// FormatBytes prints a byte count with binary units.
func FormatBytes(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	var s string
	switch {
	case n >= 1<<30:
		s = fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		s = fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		s = fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	default:
		s = fmt.Sprintf("%d B", n)
	}
	if neg {
		return "-" + s
	}
	return s
}

// String is a one-line memory report: allocated, peak, reserved.
func (s MemStats) String() string {
	out := fmt.Sprintf("%v allocated %s, peak %s, reserved %s", s.Device, FormatBytes(s.Allocated),
		FormatBytes(s.PeakAllocated), FormatBytes(s.Reserved))
	if s.Limit > 0 {
		out += ", limit " + FormatBytes(s.Limit)
	}
	return out
}

// MemorySummary returns a readable table of d's allocator counters, in the
// spirit of torch.cuda.memory_summary.
func MemorySummary(d Device) (string, error) {
	s, err := MemoryStats(d)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	line := strings.Repeat("=", 60)
	fmt.Fprintf(&b, "%s\n  torchfit memory summary, device %v\n%s\n", line, d, line)
	fmt.Fprintf(&b, "  %-26s %15s %15s\n", "Metric", "Current", "Peak")
	fmt.Fprintf(&b, "  %s\n", strings.Repeat("-", 58))
	fmt.Fprintf(&b, "  %-26s %15s %15s\n", "Allocated memory", FormatBytes(s.Allocated), FormatBytes(s.PeakAllocated))
	fmt.Fprintf(&b, "  %-26s %15s %15s\n", "Reserved memory", FormatBytes(s.Reserved), FormatBytes(s.PeakReserved))
	fmt.Fprintf(&b, "  %-26s %15d %15s\n", "Live allocations", s.Blocks, "")
	fmt.Fprintf(&b, "  %-26s %15d %15s\n", "Allocations since start", s.Allocations, "")
	fmt.Fprintf(&b, "  %-26s %15d %15s\n", "Out-of-memory errors", s.OOMs, "")
	limit := "none"
	if s.Limit > 0 {
		limit = FormatBytes(s.Limit)
	}
	fmt.Fprintf(&b, "  %-26s %15s %15s\n", "Limit", limit, "")
	if s.DeviceTotal > 0 {
		fmt.Fprintf(&b, "  %-26s %15s %15s\n", "Device free / total", FormatBytes(s.DeviceFree), FormatBytes(s.DeviceTotal))
	}
	fmt.Fprintf(&b, "  %-26s %15d %15s\n", "Live tensor references", LiveTensors(), "")
	fmt.Fprintf(&b, "%s\n", line)
	return b.String(), nil
}
