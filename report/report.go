package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// Tee sends each event to every sink (nil sinks are skipped).
func Tee(sinks ...train.Sink) train.Sink {
	var live []train.Sink
	for _, s := range sinks {
		if s != nil {
			live = append(live, s)
		}
	}
	return func(e train.Event) {
		for _, s := range live {
			s(e)
		}
	}
}

// Logger writes timestamped lines, "[  12.3s] text", the seconds counted
// from its creation. It is safe for concurrent use.
type Logger struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

// NewLogger returns a logger writing to w.
func NewLogger(w io.Writer) *Logger { return &Logger{w: w, start: time.Now()} }

// Printf writes one line.
func (l *Logger) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "[%6.1fs] %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
}

// Sink writes the log line of each event that has one (see Text).
func (l *Logger) Sink(e train.Event) {
	if text := Text(e); text != "" {
		l.Printf("%s", text)
	}
}

// Text is an event's log line: messages, out-of-memory adaptations,
// memory lines, skipped steps, evaluations. Steps, epochs and checkpoints
// are left to the progress bar and the metrics file: their text is "".
func Text(e train.Event) string {
	switch e := e.(type) {
	case train.Message:
		return e.Text
	case train.OOMEvent:
		return e.String()
	case train.MemoryEvent:
		return e.String()
	case train.SkipEvent:
		return e.String()
	case train.EvalEvent:
		if e.Text != "" {
			return e.Text
		}
		return fmt.Sprintf("epoch %d: %s", e.Epoch, FormatValues(e.Values))
	}
	return ""
}

// Lines returns a sink that appends each event's log line to *lines, for
// tests and programs that keep the log.
func Lines(lines *[]string) train.Sink {
	return func(e train.Event) {
		if text := Text(e); text != "" {
			*lines = append(*lines, text)
		}
	}
}

// Console returns a sink writing log lines to w (see Logger.Sink).
func Console(w io.Writer) train.Sink { return NewLogger(w).Sink }

// FormatValues prints evaluation values sorted by name: "a 0.1234, b 2.0000".
func FormatValues(vals map[string]float64) string {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.4f", k, vals[k])
	}
	return strings.Join(parts, ", ")
}

// Metrics appends one JSON line per optimizer step and per evaluation to a
// file (PlotMetrics draws it). Close it when training ends.
type Metrics struct {
	f   *os.File
	err error
}

// ErrNotMetrics is matched (errors.Is) by OpenMetrics' error for an
// existing file that holds something else than JSONL metrics.
var ErrNotMetrics = errors.New("holds something else than JSONL metrics (one JSON object a line)")

// OpenMetrics opens (appending) or creates a metrics file (and its
// directory). An existing file must be one: its first line a JSON object
// (a checkpoint or a config file given by mistake is refused with
// ErrNotMetrics, untouched). A last
// line without its newline is a record torn by a killed run; it is cut
// off, so that the next record starts a line of its own and the file
// stays readable (torchfit plot).
func OpenMetrics(path string) (*Metrics, error) {
	// Its directory is made, as the TensorBoard writer's and a checkpoint
	// directory are.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("report: metrics: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("report: metrics: %w", err)
	}
	if err := mendMetrics(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("report: metrics %s: %w", path, err)
	}
	return &Metrics{f: f}, nil
}

// mendMetrics checks that f, if not empty, holds JSONL records, and cuts a
// torn last record off.
func mendMetrics(f *os.File) error {
	info, err := f.Stat()
	if err != nil {
		return err
	}
	size := info.Size()
	if size == 0 {
		return nil
	}
	head := make([]byte, min(size, 1<<16))
	if _, err := f.ReadAt(head, 0); err != nil {
		return err
	}
	first, _, whole := strings.Cut(string(head), "\n")
	switch {
	case whole:
		var rec map[string]any
		if json.Unmarshal([]byte(first), &rec) != nil {
			return ErrNotMetrics
		}
	case int64(len(head)) < size || !strings.HasPrefix(first, "{\""):
		return ErrNotMetrics // no line within 64 KiB, or not a record's start
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, size-1); err != nil {
		return err
	}
	if last[0] == '\n' {
		return nil
	}
	// Find the last newline: the torn record starts after it.
	end := size - 1
	buf := make([]byte, 4096)
	for end > 0 {
		start := max(0, end-int64(len(buf)))
		n := end - start
		if _, err := f.ReadAt(buf[:n], start); err != nil {
			return err
		}
		if i := strings.LastIndexByte(string(buf[:n]), '\n'); i >= 0 {
			return f.Truncate(start + int64(i) + 1)
		}
		end = start
	}
	return f.Truncate(0)
}

// Sink records StepEvents and EvalEvents.
func (m *Metrics) Sink(e train.Event) {
	var v map[string]any
	switch e := e.(type) {
	case train.StepEvent:
		i := e.StepInfo
		v = map[string]any{
			"step": i.Step, "epoch": e.Epoch, "loss": finite(i.Loss), "lr": i.LR, "grad_norm": finite(i.GradNorm),
			"skipped": i.Skipped, "micro_batch": i.MicroBatch, "samples": i.Samples, "samples_per_sec": rate(i),
			"allocated": i.Memory.Allocated, "peak": i.Memory.PeakAllocated, "reserved": i.Memory.Reserved,
			"peak_reserved": i.Memory.PeakReserved,
			"oom_retries":   i.OOMRetries, "time": time.Now().Unix(),
		}
	case train.EvalEvent:
		v = map[string]any{"step": e.Step, "epoch": e.Epoch, "eval": e.Values}
	default:
		return
	}
	b, _ := json.Marshal(v)
	if _, err := m.f.Write(append(b, '\n')); err != nil && m.err == nil {
		m.err = err
	}
}

// Close closes the file and returns the first write error.
func (m *Metrics) Close() error {
	if m == nil {
		return nil
	}
	err := m.f.Close()
	if m.err != nil {
		return m.err
	}
	return err
}

func rate(i train.StepInfo) float64 {
	if i.Duration <= 0 {
		return 0
	}
	return float64(i.Samples) / i.Duration.Seconds()
}

func finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}

// Progress draws a progress bar per epoch on w when w is a terminal, and
// does nothing otherwise. Call Finish when training ends.
type Progress struct {
	w   *os.File
	bar *progressbar.ProgressBar
	ep  train.EpochEvent
}

// NewProgress returns a progress bar on w (nil when w is not a terminal;
// a nil *Progress's methods do nothing).
func NewProgress(w *os.File) *Progress {
	if !term.IsTerminal(int(w.Fd())) {
		return nil
	}
	return &Progress{w: w}
}

// Sink advances the bar on steps and starts a new one each epoch.
func (p *Progress) Sink(e train.Event) {
	if p == nil {
		return
	}
	switch e := e.(type) {
	case train.EpochEvent:
		p.Finish()
		p.ep = e
		p.bar = progressbar.NewOptions(e.Batches, progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(fmt.Sprintf("epoch %d/%d", e.Epoch, e.Epochs)),
			progressbar.OptionShowCount(), progressbar.OptionSetWidth(20), progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond))
	case train.StepEvent:
		if p.bar == nil {
			return
		}
		i := e.StepInfo
		p.bar.Describe(fmt.Sprintf("epoch %d/%d step %d loss %.4f lr %.2e %.0f samples/s mem %s", p.ep.Epoch, p.ep.Epochs,
			i.Step, i.Loss, i.LR, rate(i), torch.FormatBytes(i.Memory.Allocated)))
		p.bar.Add(1)
	}
}

// Finish closes the current bar.
func (p *Progress) Finish() {
	if p != nil && p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}

// SignalContext returns a context cancelled by SIGINT or SIGTERM (the
// first one; a second stops the process as usual), and the function that
// stops listening.
func SignalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}
