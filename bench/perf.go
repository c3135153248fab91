package bench

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// PerfControl switches a `perf record --control fifo:CTL,ACK -D -1` on
// around the timed steps and off after them, so that a system-wide
// profile holds the steps of both sides and nothing else: no start-up,
// no import of torch, no check or peak measurement, no warm-up.
// scripts/bench_split.sh uses it to split each side's CPU time between
// libtorch's kernels and what the binding (Python's interpreter, or Go
// and cgo) adds.
type PerfControl struct {
	ctl *os.File
	ack *bufio.Reader
	f   *os.File
}

// OpenPerfControl opens perf's control and acknowledgement FIFOs, given
// as "CTL,ACK". perf must already be running: opening a FIFO waits for
// its other end.
func OpenPerfControl(spec string) (*PerfControl, error) {
	ctl, ack, ok := strings.Cut(spec, ",")
	if !ok || ctl == "" || ack == "" {
		return nil, fmt.Errorf("bench: perf control %q: want CTL,ACK (two FIFOs)", spec)
	}
	c, err := os.OpenFile(ctl, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("bench: perf control: %w", err)
	}
	a, err := os.Open(ack)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("bench: perf control: %w", err)
	}
	return &PerfControl{ctl: c, ack: bufio.NewReader(a), f: a}, nil
}

// Enable starts recording; it returns once perf has acknowledged.
func (p *PerfControl) Enable() error { return p.send("enable") }

// Disable stops recording; it returns once perf has acknowledged.
func (p *PerfControl) Disable() error { return p.send("disable") }

func (p *PerfControl) send(cmd string) error {
	if _, err := fmt.Fprintln(p.ctl, cmd); err != nil {
		return fmt.Errorf("bench: perf %s: %w", cmd, err)
	}
	line, err := p.ack.ReadString('\n')
	if err != nil {
		return fmt.Errorf("bench: perf %s: no acknowledgement: %w", cmd, err)
	}
	// perf writes its answer with the C string's NUL after the newline,
	// so every answer but the first starts with one.
	if got := strings.Trim(line, "\x00 \t\r\n"); got != "ack" {
		return fmt.Errorf("bench: perf %s: answered %q", cmd, got)
	}
	return nil
}

// Close closes both FIFOs.
func (p *PerfControl) Close() error {
	err := p.ctl.Close()
	if e := p.f.Close(); err == nil {
		err = e
	}
	return err
}
