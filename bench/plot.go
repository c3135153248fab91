package bench

import (
	"fmt"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/torchfit/torchfit/internal/plotpng"
)

// PlotGrowth draws how a twin's step cost grows with axis ("batch" or
// "length"): median CPU time per step on both sides on the left, each
// side's step peak (above what is held between steps) on the right, one
// line per twin and precision and side. rs are Measure's results with
// that axis varied.
func PlotGrowth(rs []Result, axis, png string) error {
	type key struct{ twin, prec string }
	var order []key
	lines := map[key][4]plotter.XYs{} // Go CPU, Python CPU, Go peak, Python peak
	for _, r := range rs {
		k := key{r.Twin, string(r.Config.Precision)}
		if _, ok := lines[k]; !ok {
			order = append(order, k)
		}
		x := float64(r.Config.Batch)
		if axis == "length" {
			x = float64(r.Config.Length)
		}
		l := lines[k]
		l[0] = append(l[0], plotter.XY{X: x, Y: median(flat(r.GoCPU)) * 1e3})
		l[1] = append(l[1], plotter.XY{X: x, Y: median(flat(r.PyCPU)) * 1e3})
		l[2] = append(l[2], plotter.XY{X: x, Y: float64(r.GoPeak) / (1 << 20)})
		l[3] = append(l[3], plotter.XY{X: x, Y: float64(r.PyPeak) / (1 << 20)})
		lines[k] = l
	}
	if len(order) == 0 {
		return fmt.Errorf("bench: nothing to plot")
	}
	xlabel := "batch (utterances)"
	if axis == "length" {
		xlabel = "longest utterance (frames)"
	}
	left := plotpng.Panel{Title: "CPU time per step", X: xlabel, Y: "ms", Points: true, LegendTopLeft: true}
	right := plotpng.Panel{Title: "step peak above held", X: xlabel, Y: "MiB", Points: true, LegendTopLeft: true}
	for _, k := range order {
		l := lines[k]
		n := k.twin + " " + k.prec
		left.Series = append(left.Series, plotpng.Series{Name: n + " Go", XYs: l[0]}, plotpng.Series{Name: n + " Python", XYs: l[1]})
		right.Series = append(right.Series, plotpng.Series{Name: n + " Go", XYs: l[2]}, plotpng.Series{Name: n + " Python", XYs: l[3]})
	}
	return plotpng.SideBySide(png, 11*vg.Inch, 4.5*vg.Inch, left, right)
}
