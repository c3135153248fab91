package plotpng

import (
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/torchfit/torchfit/atomicfile"
)

// Series is one named line.
type Series struct {
	Name string
	XYs  plotter.XYs
}

// Panel is one chart of a figure. Its series take plotutil's colours and
// dashes in order; each is named in the legend.
type Panel struct {
	Title, X, Y   string // the title and the axes' labels
	Series        []Series
	Points        bool // mark each point as well as the line
	LegendTopLeft bool // the legend in the top left corner (default: top right)
}

// Stacked writes top above bottom into a w × h PNG at path.
func Stacked(path string, w, h vg.Length, top, bottom Panel) error {
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(8)}
	return write(path, w, h, tiles, [][]Panel{{top}, {bottom}})
}

// SideBySide writes left beside right into a w × h PNG at path.
func SideBySide(path string, w, h vg.Length, left, right Panel) error {
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	return write(path, w, h, tiles, [][]Panel{{left, right}})
}

func write(path string, w, h vg.Length, tiles draw.Tiles, panels [][]Panel) error {
	plots := make([][]*plot.Plot, len(panels))
	for i, row := range panels {
		for _, pn := range row {
			p, err := pn.plot()
			if err != nil {
				return err
			}
			plots[i] = append(plots[i], p)
		}
	}
	img := vgimg.New(w, h)
	canvases := plot.Align(plots, tiles, draw.New(img))
	for i, row := range plots {
		for j, p := range row {
			p.Draw(canvases[i][j])
		}
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
		return err
	})
}

func (pn Panel) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = pn.Title, pn.X, pn.Y
	var vs []any
	for _, s := range pn.Series {
		vs = append(vs, s.Name, s.XYs)
	}
	add := plotutil.AddLines
	if pn.Points {
		add = plotutil.AddLinePoints
	}
	if err := add(p, vs...); err != nil {
		return nil, err
	}
	if pn.LegendTopLeft {
		p.Legend.Top, p.Legend.Left = true, true
	}
	return p, nil
}
