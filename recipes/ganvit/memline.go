package ganvit

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
)

// Monitor writes the seed's memory monitoring lines — "Allocated",
// "Reserved", "Max allocated" (its "Diagnosing Memory Issues") — and reads
// them, correcting the seed where it is wrong:
//
//   - allocated ≫ reserved cannot happen: reserved memory includes every
//     allocated byte (the seed lists it as a sign of a leak);
//   - reserved ≫ allocated is memory the CUDA caching allocator keeps
//     after tensors are freed, for reuse (or fragmented): not a leak;
//     emptying the cache gives it back to the driver;
//   - a leak shows as allocated growing from one line to the next at the
//     same point of the loop: tensors kept across steps.
//
// On the CPU the counter has no cache: reserved equals allocated.
type Monitor struct {
	Device torch.Device
	last   map[string]*torch.MemStats
}

// Lines returns the monitoring line for the moment named by at (e.g. "GAN
// step 10"), and a reading when there is something to read; point names
// the place in the loop ("GAN", "classifier"): growth is read between
// lines of the same point.
func (m *Monitor) Lines(point, at string) []string {
	s, err := torch.MemoryStats(m.Device)
	if err != nil {
		return []string{fmt.Sprintf("%s | memory stats: %v", at, err)}
	}
	out := []string{fmt.Sprintf("%s | %s memory: Allocated: %s | Reserved: %s | Max allocated: %s", at, m.Device,
		torch.FormatBytes(s.Allocated), torch.FormatBytes(s.Reserved), torch.FormatBytes(s.PeakAllocated))}
	if r := Reading(s, m.last[point]); r != "" {
		out = append(out, "  reading: "+r)
	}
	if m.last == nil {
		m.last = map[string]*torch.MemStats{}
	}
	m.last[point] = &s
	return out
}

// Reading interprets stats (and the previous line's, when given).
func Reading(s torch.MemStats, prev *torch.MemStats) string {
	const mib = 1 << 20
	switch {
	case s.Allocated > s.Reserved:
		return fmt.Sprintf("allocated %s > reserved %s cannot happen (reserved includes every allocated byte): the allocator's counters are wrong",
			torch.FormatBytes(s.Allocated), torch.FormatBytes(s.Reserved))
	case s.Reserved-s.Allocated > max(s.Reserved/4, 64*mib):
		return fmt.Sprintf("reserved ≫ allocated: %s is held by the caching allocator, not by tensors (freed blocks kept for reuse, or fragmented); not a leak — emptying the cache (--empty-cache-every) returns it to the driver",
			torch.FormatBytes(s.Reserved-s.Allocated))
	case prev != nil && s.Allocated-prev.Allocated > max(prev.Allocated/100, mib):
		return fmt.Sprintf("allocated grew by %s since the last line at the same point of the loop: tensors kept across steps (a leak, if it keeps growing)",
			torch.FormatBytes(s.Allocated-prev.Allocated))
	}
	return ""
}
