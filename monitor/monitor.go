package monitor

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strconv"
	"strings"
	"time"
)

// Sample is one reading: the host's CPU and memory, the watched process's
// resident memory, and every GPU.
type Sample struct {
	Time         time.Time `json:"time"`
	Elapsed      float64   `json:"elapsed"`     // seconds since the start
	CPU          float64   `json:"cpu_percent"` // of all the host's CPUs, since the previous sample
	HostMemUsed  int64     `json:"host_mem_used"`
	HostMemTotal int64     `json:"host_mem_total"`
	PID          int       `json:"pid,omitempty"`
	RSS          int64     `json:"rss,omitempty"` // the watched process's resident set, bytes
	GPUs         []GPU     `json:"gpus,omitempty"`
}

// Config configures Run.
type Config struct {
	Interval time.Duration // between samples (default 1 s)
	Duration time.Duration // 0: until ctx ends or the watched process exits
	PID      int           // the process whose RSS (and GPU memory) is watched; 0: none
	// Exited, when set, is closed when the watched process ends (a
	// command run under watch): the monitor takes a last sample and stops.
	Exited <-chan struct{}
	Log    io.Writer // samples, one per line (nil: none)
	Format Format
	Live   io.Writer // a terminal: one line rewritten every sample (nil: none)
	GPU    GPUSource // nil: the host only

	procStat, procMeminfo string // /proc files (tests replace them)
}

// Format is a log's format.
type Format int

// Log formats: JSON lines (a Sample per line, then the Summary) or CSV
// (one row per GPU per sample; one row per sample without GPUs).
const (
	JSONL Format = iota
	CSV
)

// FormatOf picks the format from a file name: .csv is CSV, anything else
// JSON lines.
func FormatOf(path string) Format {
	if strings.HasSuffix(strings.ToLower(path), ".csv") {
		return CSV
	}
	return JSONL
}

// CSVHeader is the CSV log's header.
var CSVHeader = []string{"time", "elapsed_s", "cpu_percent", "host_mem_used", "host_mem_total", "pid", "rss",
	"gpu", "gpu_name", "gpu_mem_used", "gpu_mem_total", "gpu_util", "gpu_mem_util", "gpu_power_w", "gpu_temp_c", "gpu_proc_mem"}

// Stop says why Run ended.
type Stop int

// Reasons to stop.
const (
	StopDuration Stop = iota // the duration elapsed
	StopContext              // the context ended (SIGINT)
	StopExited               // the watched process ended
)

func (s Stop) String() string {
	return [...]string{"duration reached", "interrupted", "watched process ended"}[s]
}

// Run samples every Interval until Duration, ctx's end or the watched
// process's end, writing each sample to Log and Live, and returns the
// summary. An error reading the host, a GPU or the log stops it.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.procStat == "" {
		cfg.procStat, cfg.procMeminfo = "/proc/stat", "/proc/meminfo"
	}
	var csvw *csv.Writer
	if cfg.Log != nil && cfg.Format == CSV {
		csvw = csv.NewWriter(cfg.Log)
		if err := csvw.Write(CSVHeader); err != nil {
			return Summary{}, err
		}
	}
	sum := newSummary(cfg.PID)
	start := time.Now()
	prev, err := readCPU(cfg.procStat)
	if err != nil {
		return sum.Summary, fmt.Errorf("monitor: %w", err)
	}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	var deadline <-chan time.Time
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	exited := cfg.Exited
	last := start
	for {
		stop := Stop(-1)
		select {
		case <-tick.C:
		case <-deadline:
			stop = StopDuration
		case <-ctx.Done():
			stop = StopContext
		case <-exited:
			stop = StopExited
		}
		// At the end, a sample only if the last one is not that recent
		// (one spanning no time would read 0 % CPU).
		if stop < 0 || sum.Samples == 0 || time.Since(last) >= cfg.Interval/4 {
			s, cur, err := sample(cfg, prev, start)
			switch {
			case errors.Is(err, errGone):
				stop = StopExited
			case err != nil:
				return sum.Summary, err
			default:
				prev, last = cur, s.Time
				sum.add(*s)
				if err := writeSample(cfg, csvw, *s); err != nil {
					return sum.Summary, fmt.Errorf("monitor: log: %w", err)
				}
				if cfg.Live != nil {
					fmt.Fprintf(cfg.Live, "\r%s\x1b[K", LiveLine(*s))
				}
			}
		}
		if stop >= 0 {
			if cfg.Live != nil {
				fmt.Fprintln(cfg.Live)
			}
			sum.Stop = stop
			sum.finish()
			if cfg.Log != nil && cfg.Format == JSONL {
				b, _ := json.Marshal(map[string]any{"summary": sum.Summary})
				if _, err := cfg.Log.Write(append(b, '\n')); err != nil {
					return sum.Summary, fmt.Errorf("monitor: log: %w", err)
				}
			}
			return sum.Summary, nil
		}
	}
}

// errGone is the watched process gone.
var errGone = errors.New("process gone")

func sample(cfg Config, prev cpuTimes, start time.Time) (*Sample, cpuTimes, error) {
	now := time.Now()
	cur, err := readCPU(cfg.procStat)
	if err != nil {
		return nil, prev, fmt.Errorf("monitor: %w", err)
	}
	s := &Sample{Time: now, Elapsed: now.Sub(start).Seconds(), CPU: busyPercent(prev, cur), PID: cfg.PID}
	if s.HostMemTotal, s.HostMemUsed, err = readMemInfo(cfg.procMeminfo); err != nil {
		return nil, prev, fmt.Errorf("monitor: %w", err)
	}
	if cfg.PID > 0 {
		if s.RSS, err = readRSS(cfg.PID); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, prev, errGone
			}
			// a zombie between its exit and its wait: keep the last reading
			s.RSS = 0
		}
	}
	if cfg.GPU != nil {
		if s.GPUs, err = cfg.GPU.Read(); err != nil {
			return nil, prev, err
		}
	}
	return s, cur, nil
}

func writeSample(cfg Config, csvw *csv.Writer, s Sample) error {
	if cfg.Log == nil {
		return nil
	}
	if csvw == nil {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		_, err = cfg.Log.Write(append(b, '\n'))
		return err
	}
	host := []string{s.Time.UTC().Format(time.RFC3339Nano), strconv.FormatFloat(s.Elapsed, 'f', 3, 64), strconv.FormatFloat(s.CPU, 'f', 2, 64),
		strconv.FormatInt(s.HostMemUsed, 10), strconv.FormatInt(s.HostMemTotal, 10), strconv.Itoa(s.PID), strconv.FormatInt(s.RSS, 10)}
	if len(s.GPUs) == 0 {
		if err := csvw.Write(append(host, "", "", "", "", "", "", "", "", "")); err != nil {
			return err
		}
	}
	for _, g := range s.GPUs {
		row := append(append([]string{}, host...), strconv.Itoa(g.Index), g.Name, strconv.FormatUint(g.MemUsed, 10), strconv.FormatUint(g.MemTotal, 10),
			strconv.FormatUint(uint64(g.Util), 10), strconv.FormatUint(uint64(g.MemUtil), 10), strconv.FormatFloat(g.PowerW, 'f', 1, 64),
			strconv.FormatUint(uint64(g.TempC), 10), strconv.FormatUint(procMem(g, s.PID), 10))
		if err := csvw.Write(row); err != nil {
			return err
		}
	}
	csvw.Flush()
	return csvw.Error()
}

// procMem is pid's memory on g (0 when NVML does not list it).
func procMem(g GPU, pid int) uint64 {
	for _, p := range g.Processes {
		if int(p.PID) == pid {
			return p.MemUsed
		}
	}
	return 0
}

// LiveLine is a sample in one line.
func LiveLine(s Sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%6.0fs]", s.Elapsed)
	for _, g := range s.GPUs {
		fmt.Fprintf(&b, " GPU%d %s/%s (%.0f%%) util %d%% %.0f W %d°C |", g.Index, gib(g.MemUsed), gib(g.MemTotal), pct(g.MemUsed, g.MemTotal), g.Util, g.PowerW, g.TempC)
	}
	fmt.Fprintf(&b, " CPU %.0f%% | host %s/%s", s.CPU, gib(uint64(s.HostMemUsed)), gib(uint64(s.HostMemTotal)))
	if s.PID > 0 {
		fmt.Fprintf(&b, " | PID %d RSS %s", s.PID, gib(uint64(s.RSS)))
	}
	return b.String()
}

// gib formats bytes in GiB, or MiB below one GiB.
func gib(n uint64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// Summary is what a run saw.
type Summary struct {
	Samples     int          `json:"samples"`
	Seconds     float64      `json:"seconds"`
	Stop        Stop         `json:"-"`
	StopReason  string       `json:"stop"`
	CPUMean     float64      `json:"cpu_mean"`
	CPUPeak     float64      `json:"cpu_peak"`
	HostMemPeak int64        `json:"host_mem_peak"`
	PID         int          `json:"pid,omitempty"`
	RSSPeak     int64        `json:"rss_peak,omitempty"`
	RSSMean     int64        `json:"rss_mean,omitempty"`
	GPUs        []GPUSummary `json:"gpus,omitempty"`
}

// GPUSummary is one GPU's figures over the run.
type GPUSummary struct {
	Index       int     `json:"index"`
	Name        string  `json:"name"`
	MemTotal    uint64  `json:"mem_total"`
	MemPeak     uint64  `json:"mem_peak"`
	MemMean     uint64  `json:"mem_mean"`
	PeakPercent float64 `json:"peak_percent"`
	MeanPercent float64 `json:"mean_percent"`
	UtilMean    float64 `json:"util_mean"`
	UtilPeak    uint32  `json:"util_peak"`
	PowerPeak   float64 `json:"power_peak_w"`
	TempPeak    uint32  `json:"temp_peak_c"`
	// ProcPeak is the watched process's peak memory on the GPU.
	ProcPeak uint64 `json:"proc_peak,omitempty"`
}

type summer struct {
	Summary
	cpu, rss float64
	mem      []float64
	util     []float64
}

func newSummary(pid int) *summer { return &summer{Summary: Summary{PID: pid}} }

func (s *summer) add(x Sample) {
	s.Samples++
	s.Seconds = x.Elapsed
	s.cpu += x.CPU
	s.CPUPeak = math.Max(s.CPUPeak, x.CPU)
	s.HostMemPeak = max(s.HostMemPeak, x.HostMemUsed)
	s.rss += float64(x.RSS)
	s.RSSPeak = max(s.RSSPeak, x.RSS)
	for _, g := range x.GPUs {
		for len(s.GPUs) <= g.Index {
			s.GPUs = append(s.GPUs, GPUSummary{Index: len(s.GPUs)})
			s.mem = append(s.mem, 0)
			s.util = append(s.util, 0)
		}
		gs := &s.GPUs[g.Index]
		gs.Name, gs.MemTotal = g.Name, g.MemTotal
		gs.MemPeak = max(gs.MemPeak, g.MemUsed)
		gs.UtilPeak = max(gs.UtilPeak, g.Util)
		gs.PowerPeak = math.Max(gs.PowerPeak, g.PowerW)
		gs.TempPeak = max(gs.TempPeak, g.TempC)
		gs.ProcPeak = max(gs.ProcPeak, procMem(g, x.PID))
		s.mem[g.Index] += float64(g.MemUsed)
		s.util[g.Index] += float64(g.Util)
	}
}

func (s *summer) finish() {
	s.StopReason = s.Stop.String()
	if s.Samples == 0 {
		return
	}
	n := float64(s.Samples)
	s.CPUMean = s.cpu / n
	s.RSSMean = int64(s.rss / n)
	for i := range s.GPUs {
		g := &s.GPUs[i]
		g.MemMean = uint64(s.mem[i] / n)
		g.UtilMean = s.util[i] / n
		g.PeakPercent, g.MeanPercent = pct(g.MemPeak, g.MemTotal), pct(g.MemMean, g.MemTotal)
	}
}

// Reading compares a GPU's memory use with the seed's expectations: peak
// 60–80 % and mean 50–70 % of the device.
func (g GPUSummary) Reading() string {
	var peak string
	switch {
	case g.PeakPercent > 80:
		peak = "above the seed's expected 60–80 %: close to running out of memory; lower the micro-batch (torchfit's --auto-batch keeps a margin)"
	case g.PeakPercent >= 60:
		peak = "within the seed's expected 60–80 %"
	default:
		peak = "below the seed's expected 60–80 %: room for a larger micro-batch (--auto-batch finds it)"
	}
	mean := "within the seed's 50–70 %"
	if g.MeanPercent < 50 {
		mean = "below the seed's 50–70 %"
	} else if g.MeanPercent > 70 {
		mean = "above the seed's 50–70 %"
	}
	return fmt.Sprintf("peak %.1f %% %s; mean %.1f %% %s", g.PeakPercent, peak, g.MeanPercent, mean)
}

// Write prints the summary.
func (s Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "monitor: %d samples over %.1f s (%s)\n", s.Samples, s.Seconds, s.StopReason)
	fmt.Fprintf(w, "  host CPU: mean %.1f %%, peak %.1f %%; host memory peak %s\n", s.CPUMean, s.CPUPeak, gib(uint64(s.HostMemPeak)))
	if s.PID > 0 {
		fmt.Fprintf(w, "  process %d RSS: peak %s, mean %s\n", s.PID, gib(uint64(s.RSSPeak)), gib(uint64(s.RSSMean)))
	}
	if len(s.GPUs) == 0 {
		fmt.Fprintln(w, "  GPU: none monitored")
	}
	for _, g := range s.GPUs {
		fmt.Fprintf(w, "  GPU %d (%s): memory peak %s of %s, mean %s; utilisation mean %.0f %%, peak %d %%; power peak %.0f W; temperature peak %d °C",
			g.Index, g.Name, gib(g.MemPeak), gib(g.MemTotal), gib(g.MemMean), g.UtilMean, g.UtilPeak, g.PowerPeak, g.TempPeak)
		if s.PID > 0 {
			fmt.Fprintf(w, "; process %d peak %s", s.PID, gib(g.ProcPeak))
		}
		fmt.Fprintf(w, "\n    %s\n", g.Reading())
	}
}
