package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ErrNoSteps is PlotMetrics' error for a metrics file without step records.
var ErrNoSteps = errors.New("no step records")

// PlotMetrics renders the loss and memory curves of a metrics JSONL file
// (written by Metrics) into a PNG: loss per step on top, allocated and peak
// memory (MiB) per step below.
func PlotMetrics(jsonl, png string) error {
	f, err := os.Open(jsonl)
	if err != nil {
		return err
	}
	defer f.Close()
	var loss, alloc, peak plotter.XYs
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		var m struct {
			Step      *float64 `json:"step"`
			Loss      *float64 `json:"loss"`
			Allocated *float64 `json:"allocated"`
			Peak      *float64 `json:"peak"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("report: %s line %d: %w", jsonl, line, err)
		}
		if m.Step == nil {
			continue
		}
		if m.Loss != nil {
			loss = append(loss, plotter.XY{X: *m.Step, Y: *m.Loss})
		}
		if m.Allocated != nil {
			alloc = append(alloc, plotter.XY{X: *m.Step, Y: *m.Allocated / (1 << 20)})
		}
		if m.Peak != nil {
			peak = append(peak, plotter.XY{X: *m.Step, Y: *m.Peak / (1 << 20)})
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(loss) == 0 {
		return fmt.Errorf("report: %s: %w", jsonl, ErrNoSteps)
	}
	top := plot.New()
	top.Title.Text = "training loss"
	top.X.Label.Text = "step"
	top.Y.Label.Text = "loss"
	if err := plotutil.AddLines(top, "loss", loss); err != nil {
		return err
	}
	bottom := plot.New()
	bottom.Title.Text = "memory"
	bottom.X.Label.Text = "step"
	bottom.Y.Label.Text = "MiB"
	if err := plotutil.AddLines(bottom, "allocated", alloc, "peak", peak); err != nil {
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
