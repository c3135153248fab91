package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/torchfit/torchfit/internal/plotpng"
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
	return plotpng.Stacked(png, 8*vg.Inch, 7*vg.Inch,
		plotpng.Panel{Title: "training loss", X: "step", Y: "loss", Series: []plotpng.Series{{Name: "loss", XYs: loss}}},
		plotpng.Panel{Title: "memory", X: "step", Y: "MiB", Series: []plotpng.Series{{Name: "allocated", XYs: alloc}, {Name: "peak", XYs: peak}}})
}
