package torch

import (
	"errors"
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
	if err := CheckDevice(d); err != nil {
		return MemStats{}, err
	}
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
	if err := CheckDevice(d); err != nil {
		return err
	}
	typ, idx := devArgs(d)
	if err := capi.ResetPeak(typ, idx); err != nil {
		return wrapErr("ResetPeakMemory", err)
	}
	return nil
}

// TraceMemory runs f and returns what torchfit's CPU counting allocator
// did meanwhile, in order, from every thread: +n for an allocation of n
// bytes, −n for a free — what torch.profiler's memory events are to a
// Python user (profile_memory=True), so the two sides of the same step can
// be compared event by event. Only one trace runs at a time; a second one
// started meanwhile fails. A panic in f stops the trace and goes on.
func TraceMemory(f func()) (events []int64, err error) {
	if err := capi.StartMemTrace(); err != nil {
		return nil, wrapErr("TraceMemory", err)
	}
	defer func() {
		ev, stopErr := capi.StopMemTrace()
		events = ev
		if stopErr != nil && err == nil {
			err = wrapErr("TraceMemory", stopErr)
		}
	}()
	f()
	return nil, nil
}

// TracePeak is the highest running sum of a trace's events: the peak
// above what was allocated when the trace started.
func TracePeak(events []int64) int64 {
	var now, peak int64
	for _, n := range events {
		now += n
		peak = max(peak, now)
	}
	return peak
}

// SetMemoryLimit caps the memory torchfit may allocate on d (0 removes the
// cap). An allocation past the cap fails with ErrOutOfMemory, as a real one
// would: on the CPU this simulates a smaller GPU. On CUDA it sets the caching
// allocator's per-process memory fraction.
func SetMemoryLimit(d Device, bytes int64) error {
	if bytes < 0 {
		return &Error{Op: "SetMemoryLimit", Msg: fmt.Sprintf("negative limit %d", bytes)}
	}
	if err := CheckDevice(d); err != nil {
		return err
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
	if err := CheckDevice(d); err != nil {
		return err
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

// Memory-size bounds of ParseMemory.
const (
	// minMemoryBytes is the smallest cap ParseMemory takes: less holds
	// no model, and a smaller bare number is almost always a size whose
	// unit was forgotten ("6" for 6GiB).
	minMemoryBytes = 1 << 20
	// maxMemoryBytes is the largest size ParseMemory accepts (4 EiB).
	maxMemoryBytes = 1 << 62
)

var memoryNumber = regexp.MustCompile(`^([0-9]+\.?[0-9]*|\.[0-9]+)(e[+-]?[0-9]+)?$`)

// ParseMemory reads a memory cap. It returns bytes, or a fraction of the
// device's memory when the text is one:
//
//   - a size with a unit: "6GiB", "512MB", "1.5g", "800 MiB" (B; KB, MB, GB,
//     TB are powers of 1000; KiB, MiB, GiB, TiB and k, m, g, t powers of
//     1024);
//   - a byte count without a unit: "1073741824", "2e9";
//   - a fraction in (0, 1]: a bare number with a '.' ("0.9", "1.0") or one
//     in (0, 1] ("1").
//
// Sizes are at least 1 MiB and at most 2^62 bytes. Anything else — NaN, infinities,
// negative or zero values, a fraction above 1 such as "1.5", unknown units
// — is an error that says what to write instead.
func ParseMemory(s string) (bytes int64, fraction float64, err error) {
	bad := func(format string, args ...any) (int64, float64, error) {
		return 0, 0, fmt.Errorf("torch: bad memory size %q: %s", s, fmt.Sprintf(format, args...))
	}
	t := strings.TrimSpace(strings.ToLower(s))
	if t == "" {
		return bad("empty (want e.g. 6GiB, 512MB or a fraction like 0.9)")
	}
	num, unit := t, ""
	if i := strings.LastIndexFunc(t, func(r rune) bool { return !(r >= 'a' && r <= 'z') }); i < len(t)-1 {
		num, unit = strings.TrimSpace(t[:i+1]), t[i+1:]
		switch unit {
		case "nan", "inf", "infinity": // a number, not a unit
			num, unit = t, ""
		}
	}
	v, e := strconv.ParseFloat(num, 64)
	shown := strconv.FormatFloat(v, 'g', -1, 64)
	switch {
	case errors.Is(e, strconv.ErrRange) && math.IsInf(v, 1):
		return bad("too large (more than 4 EiB)")
	case e != nil && !errors.Is(e, strconv.ErrRange):
		return bad("not a number with an optional unit (want e.g. 6GiB, 512MB or a fraction like 0.9)")
	case math.IsNaN(v) || math.IsInf(v, 0):
		return bad("not a finite number")
	case v < 0:
		return bad("negative")
	case v == 0:
		return bad("zero (leave the limit out for none)")
	case !memoryNumber.MatchString(num):
		return bad("write the number in decimal, e.g. 6GiB, 512MB or 0.9")
	}
	mul := 1.0
	if unit != "" {
		m, ok := memoryUnits[unit]
		if !ok {
			return bad("unknown unit %q (want B, KB, MB, GB, TB, KiB, MiB, GiB, TiB or k, m, g, t)", unit)
		}
		mul = m
	} else if strings.Contains(num, ".") || v <= 1 {
		if v > 1 {
			return bad("a fraction must be in (0, 1]; for %s GiB write %sGiB", shown, shown)
		}
		return 0, v, nil
	}
	b := v * mul
	switch {
	case b > maxMemoryBytes:
		return bad("too large (more than 4 EiB)")
	case unit == "" && b < minMemoryBytes:
		return bad("too small: %s bytes without a unit (at least %d; for %s GiB write %sGiB)", shown, minMemoryBytes, shown, shown)
	case b < minMemoryBytes:
		return bad("too small: %s is less than 1 MiB", strings.TrimSpace(s))
	}
	return int64(b), 0, nil
}

// memoryUnits are ParseMemory's units, in lower case.
var memoryUnits = map[string]float64{
	"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
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

// ClearBlasWorkspaces frees the workspaces cuBLAS and cuBLASLt keep from
// their first matrix product on for each handle and stream — one per thread
// that ran one, the autograd engine's backward thread included (32 MiB each
// on an H100 with 2.11), taken from the caching allocator and counted in
// Allocated — as Python's torch._C._cuda_clearCublasWorkspaces. They are
// made again on next use. Memory checks call it so that the libraries'
// workspaces are not counted as a leak. On CPU builds, without a GPU, or on
// libtorch before 2.0 it does nothing and says so.
func ClearBlasWorkspaces() (cleared bool, err error) {
	done, e := capi.ClearWorkspaces()
	if e != nil {
		return false, wrapErr("ClearBlasWorkspaces", e)
	}
	return done, nil
}

var requestRE = regexp.MustCompile(`(?i)tried to allocate ([0-9.]+) ?(bytes|b|kib|mib|gib)`)

// oomGPU finds the device in CUDA's out-of-memory message: "CUDA out of
// memory. Tried to allocate 20.00 MiB (GPU 1; 79.15 GiB total capacity; ...".
var oomGPU = regexp.MustCompile(`\(GPU (\d+);`)

// oomDevice is the device an out-of-memory message is about: the CPU, or
// the CUDA device it names (device 0 when it names none).
func oomDevice(msg string) Device {
	if !strings.Contains(msg, "CUDA") {
		return CPU
	}
	if m := oomGPU.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return CUDA(n)
	}
	return CUDA(0)
}

// fillOOM records the failed request and the stats of the allocator of the
// device that ran out.
func (e *Error) fillOOM() {
	dev := oomDevice(e.Msg)
	e.Device = dev
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
