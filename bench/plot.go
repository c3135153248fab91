package bench

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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
	left, right := plot.New(), plot.New()
	left.Title.Text, left.X.Label.Text, left.Y.Label.Text = "CPU time per step", xlabel, "ms"
	right.Title.Text, right.X.Label.Text, right.Y.Label.Text = "step peak above held", xlabel, "MiB"
	var lv, rv []any
	for _, k := range order {
		l := lines[k]
		n := k.twin + " " + k.prec
		lv = append(lv, n+" Go", l[0], n+" Python", l[1])
		rv = append(rv, n+" Go", l[2], n+" Python", l[3])
	}
	if err := plotutil.AddLinePoints(left, lv...); err != nil {
		return err
	}
	if err := plotutil.AddLinePoints(right, rv...); err != nil {
		return err
	}
	left.Legend.Top, right.Legend.Top = true, true
	left.Legend.Left, right.Legend.Left = true, true
	const w, h = 11 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{{left, right}}, tiles, dc)
	left.Draw(canvases[0][0])
	right.Draw(canvases[0][1])
	f, err := os.Create(png)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
