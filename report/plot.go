package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/torchfit/torchfit/internal/plotpng"
)

// ErrNoSteps is PlotMetrics' error for a metrics file without step records.
var ErrNoSteps = errors.New("no step records")

// PlotMetrics renders a metrics JSONL file (written by Metrics) into a
// PNG of panels over one step axis (see metricsPanels): the loss, the
// evaluations, the learning rate and memory.
func PlotMetrics(jsonl, png string) error {
	panels, err := metricsPanels(jsonl)
	if err != nil {
		return err
	}
	return plotpng.Column(png, 10*vg.Inch, 2.6*vg.Inch, panels...)
}

// Smoothing: a loss curve of at least smoothFrom steps is drawn faint
// under its running mean over about a twentieth of the run (at least
// smoothMin steps), centred on each step.
const (
	smoothFrom = 50
	smoothMin  = 5
)

// metricsRecord is one line of a metrics file: a step or an evaluation.
type metricsRecord struct {
	Step      *float64           `json:"step"`
	Loss      *float64           `json:"loss"`
	LR        *float64           `json:"lr"`
	Allocated *float64           `json:"allocated"`
	Peak      *float64           `json:"peak"`
	Reserved  *float64           `json:"reserved"`
	Eval      map[string]float64 `json:"eval"`
}

// metricsPanels reads a metrics file into the panels PlotMetrics draws,
// top to bottom, all against the step:
//
//   - "loss": the training loss per step (faint, under its running mean
//     for runs of 50 steps and more) and every evaluation value whose
//     name holds "loss" (val_loss), marked at each evaluation;
//   - "validation": the evaluation values that are fractions (all within
//     0–1: CER, accuracy, recall), on a 0–1 axis;
//   - one panel for each other evaluation value (perplexity, bits per
//     character), timings (names ending _minutes or _seconds) left out;
//   - "learning rate", from zero, when the file records one above zero;
//   - "memory": allocated, peak and reserved (MiB, or GiB from 2 GiB on),
//     from zero, when any is above zero.
//
// A file without step records is ErrNoSteps.
func metricsPanels(jsonl string) ([]plotpng.Panel, error) {
	f, err := os.Open(jsonl)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var loss, lr, alloc, peak, reserved plotter.XYs
	evals := map[string]plotter.XYs{}
	steps := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		var m metricsRecord
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("report: %s line %d: %w", jsonl, line, err)
		}
		if m.Step == nil {
			continue
		}
		x := *m.Step
		if m.Eval != nil {
			for k, v := range m.Eval {
				evals[k] = append(evals[k], plotter.XY{X: x, Y: v})
			}
			continue
		}
		steps++
		for _, c := range []struct {
			v   *float64
			xys *plotter.XYs
		}{{m.Loss, &loss}, {m.LR, &lr}, {m.Allocated, &alloc}, {m.Peak, &peak}, {m.Reserved, &reserved}} {
			if c.v != nil {
				*c.xys = append(*c.xys, plotter.XY{X: x, Y: *c.v})
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if steps == 0 || len(loss) == 0 {
		return nil, fmt.Errorf("report: %s: %w", jsonl, ErrNoSteps)
	}

	lossPanel := plotpng.Panel{Title: "loss", Y: "loss"}
	if w := max(smoothMin, len(loss)/20) / 2; len(loss) >= smoothFrom {
		lossPanel.Series = append(lossPanel.Series,
			plotpng.Series{Name: "training loss", XYs: loss, Faint: true, Colour: 1},
			plotpng.Series{Name: fmt.Sprintf("training loss, mean of %d steps", 2*w+1), XYs: runningMean(loss, w), Colour: 1})
	} else {
		lossPanel.Series = append(lossPanel.Series, plotpng.Series{Name: "training loss", XYs: loss})
	}
	names := make([]string, 0, len(evals))
	for k := range evals {
		names = append(names, k)
	}
	sort.Strings(names)
	fractions := plotpng.Panel{Title: "validation", Y: "fraction", FromZero: true, Top: 1}
	var others []plotpng.Panel
	for _, k := range names {
		s := plotpng.Series{Name: k, XYs: evals[k], Points: true}
		switch {
		case strings.Contains(k, "loss"):
			s.Colour = len(lossPanel.Series) + 1
			if len(loss) >= smoothFrom {
				s.Colour-- // the raw and smoothed loss share the first colour
			}
			lossPanel.Series = append(lossPanel.Series, s)
		case strings.HasSuffix(k, "_minutes") || strings.HasSuffix(k, "_seconds"):
		case isFraction(evals[k]):
			fractions.Series = append(fractions.Series, s)
		default:
			others = append(others, plotpng.Panel{Title: k, Y: k, Series: []plotpng.Series{s}})
		}
	}
	panels := []plotpng.Panel{lossPanel}
	if len(fractions.Series) > 0 {
		panels = append(panels, fractions)
	}
	panels = append(panels, others...)
	if anyAbove(lr) {
		panels = append(panels, plotpng.Panel{Title: "learning rate", Y: "lr", FromZero: true,
			Series: []plotpng.Series{{Name: "lr", XYs: lr}}})
	}
	if anyAbove(alloc) || anyAbove(peak) || anyAbove(reserved) {
		unit, div := "MiB", float64(1<<20)
		if maxY(alloc, peak, reserved) >= 2<<30 {
			unit, div = "GiB", 1<<30
		}
		mem := plotpng.Panel{Title: "memory", Y: unit, FromZero: true}
		for _, s := range []struct {
			name   string
			xys    plotter.XYs
			dashed bool
		}{{"allocated", alloc, false}, {"peak", peak, false}, {"reserved", reserved, true}} {
			if len(s.xys) > 0 { // reserved dashed: on CPU it is the allocated memory
				mem.Series = append(mem.Series, plotpng.Series{Name: s.name, XYs: scale(s.xys, 1/div), Dashed: s.dashed})
			}
		}
		panels = append(panels, mem)
	}
	panels[len(panels)-1].X = "step"
	return panels, nil
}

// runningMean is the mean of each point's values from w before it to w
// after it (fewer at the ends): a curve that does not lag the data.
func runningMean(xys plotter.XYs, w int) plotter.XYs {
	sums := make([]float64, len(xys)+1) // sums[i]: the first i values' sum
	for i, xy := range xys {
		sums[i+1] = sums[i] + xy.Y
	}
	out := make(plotter.XYs, len(xys))
	for i, xy := range xys {
		lo, hi := max(0, i-w), min(len(xys), i+w+1)
		out[i] = plotter.XY{X: xy.X, Y: (sums[hi] - sums[lo]) / float64(hi-lo)}
	}
	return out
}

func isFraction(xys plotter.XYs) bool {
	for _, xy := range xys {
		if !(xy.Y >= 0 && xy.Y <= 1) {
			return false
		}
	}
	return len(xys) > 0
}

func anyAbove(xys plotter.XYs) bool {
	for _, xy := range xys {
		if xy.Y > 0 {
			return true
		}
	}
	return false
}

func maxY(all ...plotter.XYs) float64 {
	m := math.Inf(-1)
	for _, xys := range all {
		for _, xy := range xys {
			m = math.Max(m, xy.Y)
		}
	}
	return m
}

func scale(xys plotter.XYs, k float64) plotter.XYs {
	out := make(plotter.XYs, len(xys))
	for i, xy := range xys {
		out[i] = plotter.XY{X: xy.X, Y: xy.Y * k}
	}
	return out
}
