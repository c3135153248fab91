package monitor

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/torchfit/torchfit/internal/plotpng"
)

// IsLog reports whether path is a monitor log (JSON lines whose first
// record is a Sample, or CSV with CSVHeader).
func IsLog(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadBytes('\n')
	if bytes.HasPrefix(line, []byte("time,elapsed_s,cpu_percent,")) {
		return true
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) != nil {
		return false
	}
	_, ok := probe["cpu_percent"]
	return ok
}

// ReadLog reads a monitor log (either format) back into samples.
func ReadLog(path string) ([]Sample, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(b, []byte("time,")) {
		return readCSV(bytes.NewReader(b))
	}
	var out []Sample
	for n, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, fmt.Errorf("monitor: %s line %d: %w", path, n+1, err)
		}
		if _, ok := probe["summary"]; ok {
			continue
		}
		var s Sample
		if err := json.Unmarshal(line, &s); err != nil {
			return nil, fmt.Errorf("monitor: %s line %d: %w", path, n+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func readCSV(r io.Reader) ([]Sample, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("monitor: CSV log: %w", err)
	}
	var out []Sample
	for n, row := range rows[1:] {
		if len(row) != len(CSVHeader) {
			return nil, fmt.Errorf("monitor: CSV log row %d has %d fields, want %d", n+2, len(row), len(CSVHeader))
		}
		num := func(i int) float64 { v, _ := strconv.ParseFloat(row[i], 64); return v }
		elapsed := num(1)
		if len(out) == 0 || out[len(out)-1].Elapsed != elapsed {
			out = append(out, Sample{Elapsed: elapsed, CPU: num(2), HostMemUsed: int64(num(3)), HostMemTotal: int64(num(4)), PID: int(num(5)), RSS: int64(num(6))})
		}
		if row[7] != "" {
			s := &out[len(out)-1]
			s.GPUs = append(s.GPUs, GPU{Index: int(num(7)), Name: row[8], MemUsed: uint64(num(9)), MemTotal: uint64(num(10)), Util: uint32(num(11)),
				MemUtil: uint32(num(12)), PowerW: num(13), TempC: uint32(num(14))})
		}
	}
	return out, nil
}

// Plot draws a monitor log into a PNG (see panels): memory on top,
// utilisation below, against seconds.
func Plot(log, png string) error {
	samples, err := ReadLog(log)
	if err != nil {
		return err
	}
	if len(samples) == 0 {
		return fmt.Errorf("monitor: %s has no samples", log)
	}
	return plotpng.Column(png, 10*vg.Inch, 3.2*vg.Inch, panels(samples)...)
}

// panels are Plot's two panels: memory (GiB from zero: GPU used per
// device, the watched process's RSS, host used) and utilisation (percent
// of GPU and host CPU, on a 0–100 % axis, so a CPU between 51 % and 52 %
// reads as the flat line it is).
func panels(samples []Sample) []plotpng.Panel {
	mem := plotpng.Panel{Title: "memory", Y: "GiB", FromZero: true}
	use := plotpng.Panel{Title: "utilisation", X: "seconds", Y: "%", FromZero: true, Top: 100}
	gpus := 0
	for _, s := range samples {
		gpus = max(gpus, len(s.GPUs))
	}
	for i := range gpus {
		var used, util plotter.XYs
		for _, s := range samples {
			if i < len(s.GPUs) {
				used = append(used, plotter.XY{X: s.Elapsed, Y: float64(s.GPUs[i].MemUsed) / (1 << 30)})
				util = append(util, plotter.XY{X: s.Elapsed, Y: float64(s.GPUs[i].Util)})
			}
		}
		mem.Series = append(mem.Series, plotpng.Series{Name: fmt.Sprintf("GPU %d used", i), XYs: used})
		use.Series = append(use.Series, plotpng.Series{Name: fmt.Sprintf("GPU %d utilisation", i), XYs: util})
	}
	var rss, host, cpu plotter.XYs
	for _, s := range samples {
		if s.PID > 0 {
			rss = append(rss, plotter.XY{X: s.Elapsed, Y: float64(s.RSS) / (1 << 30)})
		}
		host = append(host, plotter.XY{X: s.Elapsed, Y: float64(s.HostMemUsed) / (1 << 30)})
		cpu = append(cpu, plotter.XY{X: s.Elapsed, Y: s.CPU})
	}
	if len(rss) > 0 {
		mem.Series = append(mem.Series, plotpng.Series{Name: fmt.Sprintf("PID %d RSS", samples[0].PID), XYs: rss})
	}
	mem.Series = append(mem.Series, plotpng.Series{Name: "host used", XYs: host})
	use.Series = append(use.Series, plotpng.Series{Name: "host CPU", XYs: cpu})
	return []plotpng.Panel{mem, use}
}
