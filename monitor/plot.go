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

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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

// Plot draws a monitor log into a PNG: memory (GPU used per device, the
// watched process's RSS, host used) on top, utilisation (GPU, host CPU)
// below, against seconds.
func Plot(log, png string) error {
	samples, err := ReadLog(log)
	if err != nil {
		return err
	}
	if len(samples) == 0 {
		return fmt.Errorf("monitor: %s has no samples", log)
	}
	var memLines, useLines []any
	gpus := 0
	for _, s := range samples {
		gpus = max(gpus, len(s.GPUs))
	}
	for i := range gpus {
		var mem, util plotter.XYs
		for _, s := range samples {
			if i < len(s.GPUs) {
				mem = append(mem, plotter.XY{X: s.Elapsed, Y: float64(s.GPUs[i].MemUsed) / (1 << 30)})
				util = append(util, plotter.XY{X: s.Elapsed, Y: float64(s.GPUs[i].Util)})
			}
		}
		memLines = append(memLines, fmt.Sprintf("GPU %d used", i), mem)
		useLines = append(useLines, fmt.Sprintf("GPU %d utilisation", i), util)
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
		memLines = append(memLines, fmt.Sprintf("PID %d RSS", samples[0].PID), rss)
	}
	memLines = append(memLines, "host used", host)
	useLines = append(useLines, "host CPU", cpu)
	top := plot.New()
	top.Title.Text = "memory"
	top.X.Label.Text = "seconds"
	top.Y.Label.Text = "GiB"
	if err := plotutil.AddLines(top, memLines...); err != nil {
		return err
	}
	bottom := plot.New()
	bottom.Title.Text = "utilisation"
	bottom.X.Label.Text = "seconds"
	bottom.Y.Label.Text = "%"
	if err := plotutil.AddLines(bottom, useLines...); err != nil {
		return err
	}
	const w, h = 8 * vg.Inch, 7 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	out, err := os.Create(png)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
