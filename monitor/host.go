package monitor

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuTimes are the host's CPU jiffies from /proc/stat's first line.
type cpuTimes struct{ idle, total uint64 }

// readCPU reads /proc/stat (the file is a parameter for tests).
func readCPU(path string) (cpuTimes, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuTimes{}, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("monitor: %s: no cpu line", path)
	}
	var t cpuTimes
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("monitor: %s: %w", path, err)
		}
		if i < 8 { // user nice system idle iowait irq softirq steal (guest is in user)
			t.total += v
		}
		if i == 3 || i == 4 {
			t.idle += v
		}
	}
	return t, nil
}

// busyPercent is the share of CPU time not idle between two readings, in
// percent of all the host's CPUs.
func busyPercent(a, b cpuTimes) float64 {
	dt := float64(b.total - a.total)
	if b.total <= a.total {
		return 0
	}
	return 100 * (dt - float64(b.idle-a.idle)) / dt
}

// readRSS returns a process's resident set size in bytes (VmRSS of
// /proc/PID/status).
func readRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("monitor: VmRSS %q", rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb * 1024, err
	}
	return 0, fmt.Errorf("monitor: process %d has no VmRSS (a zombie?)", pid)
}

// readMemInfo returns the host's total and used memory in bytes (used =
// MemTotal − MemAvailable).
func readMemInfo(path string) (total, used int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	var avail int64 = -1
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = v * 1024
		case "MemAvailable:":
			avail = v * 1024
		}
	}
	if total == 0 || avail < 0 {
		return 0, 0, fmt.Errorf("monitor: %s: no MemTotal/MemAvailable", path)
	}
	return total, total - avail, nil
}
