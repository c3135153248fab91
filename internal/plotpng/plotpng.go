package plotpng

import (
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/torchfit/torchfit/atomicfile"
)

// Series is one named line.
type Series struct {
	Name string
	XYs  plotter.XYs
	// Points marks each point as well as the line (for sparse series:
	// evaluations, a handful of measurements).
	Points bool
	// Faint draws the line thin and pale (raw values under their
	// smoothed curve).
	Faint bool
	// Dashed draws the line dashed, so that one lying on another shows.
	Dashed bool
	// Colour is 1 + the Palette index of the line's colour, so that two
	// series can share one (a raw curve and its smoothed one); 0: the
	// series' position in the panel picks it.
	Colour int
}

// Panel is one chart of a figure. Its series take Palette's colours in
// order (see Series.Colour); each is named in the legend.
type Panel struct {
	Title, X, Y   string // the title and the axes' labels
	Series        []Series
	Points        bool // mark each point of every series as well as the line
	LegendTopLeft bool // SideBySide: the legend in the top left corner (default: top right)
	// FromZero starts the y axis at zero (below it only for negative
	// data): for percentages, memory, learning rates.
	FromZero bool
	// Top, when above zero, is the least top of the y axis: 100 for
	// percentages, 1 for fractions; data above it still shows.
	Top float64
}

// Palette is the series' colours, distinct in print and for the common
// colour blindnesses (Tableau 10).
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

// Column writes panels one above the other into a w-wide PNG at path,
// each panelHeight tall, sharing one x axis: the union of their x ranges
// (from zero when it starts near zero), named on the bottom panel. The
// legends stand right of the plot areas, beside their panels, so they
// never cover a curve.
func Column(path string, w, panelHeight vg.Length, panels ...Panel) error {
	if len(panels) == 0 {
		return nil
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, pn := range panels {
		lo, hi, ok := pn.xRange()
		if ok {
			xmin, xmax = math.Min(xmin, lo), math.Max(xmax, hi)
		}
	}
	if xmin > 0 && xmin <= (xmax-xmin)/10 {
		xmin = 0 // steps from 1, seconds from the first sample
	}
	plots := make([][]*plot.Plot, len(panels))
	legends := make([]plot.Legend, len(panels))
	var legendW vg.Length
	for i, pn := range panels {
		p, lg := pn.plot()
		if !math.IsInf(xmin, 0) {
			p.X.Min, p.X.Max = xmin, xmax
		}
		if i < len(panels)-1 { // the shared x axis is named once, at the bottom
			p.X.Label.Text = ""
		}
		plots[i], legends[i] = []*plot.Plot{p}, lg
		legendW = max(legendW, lg.Rectangle(draw.Canvas{}).Size().X)
	}
	if legendW > 0 {
		legendW += vg.Millimeter * 6
	}
	h := panelHeight * vg.Length(len(panels))
	img := vgimg.New(w, h)
	dc := draw.New(img)
	area := draw.Crop(dc, 0, -legendW, 0, 0)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2, PadY: vg.Millimeter * 4}
	canvases := plot.Align(plots, tiles, area)
	for i, row := range plots {
		p := row[0]
		p.Draw(canvases[i][0])
		data := p.DataCanvas(canvases[i][0])
		lc := dc
		lc.Rectangle = vg.Rectangle{Min: vg.Point{X: data.Max.X + vg.Millimeter*4, Y: data.Min.Y}, Max: vg.Point{X: dc.Max.X, Y: data.Max.Y}}
		legends[i].Draw(lc)
	}
	return writePNG(path, img)
}

// SideBySide writes left beside right into a w × h PNG at path, each
// legend in a corner of its plot (Panel.LegendTopLeft).
func SideBySide(path string, w, h vg.Length, left, right Panel) error {
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	var row []*plot.Plot
	for _, pn := range []Panel{left, right} {
		p, lg := pn.plot()
		p.Legend = lg
		p.Legend.Top, p.Legend.Left = true, pn.LegendTopLeft
		p.Legend.XOffs = vg.Millimeter * 2
		if !pn.LegendTopLeft {
			p.Legend.XOffs = -vg.Millimeter * 2
		}
		p.Legend.YOffs = -vg.Millimeter * 2
		row = append(row, p)
	}
	img := vgimg.New(w, h)
	canvases := plot.Align([][]*plot.Plot{row}, tiles, draw.New(img))
	for j, p := range row {
		p.Draw(canvases[0][j])
	}
	return writePNG(path, img)
}

func writePNG(path string, img *vgimg.Canvas) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
		return err
	})
}

// YRange is the y axis a panel is drawn with: its data's range, widened
// to zero (FromZero) and to Top, then out to whole steps of its ticks.
// ok is false for a panel without points.
func (pn Panel) YRange() (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range pn.Series {
		for _, xy := range s.XYs {
			if finite(xy.Y) {
				lo, hi = math.Min(lo, xy.Y), math.Max(hi, xy.Y)
			}
		}
	}
	if math.IsInf(lo, 0) {
		if !pn.FromZero && pn.Top <= 0 {
			return 0, 0, false
		}
		lo, hi = 0, 0
	}
	if pn.FromZero {
		lo = math.Min(lo, 0)
	}
	if pn.Top > 0 {
		hi = math.Max(hi, pn.Top)
	}
	lo, hi = Extend(lo, hi, yTicks)
	return lo, hi, true
}

func (pn Panel) xRange() (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range pn.Series {
		for _, xy := range s.XYs {
			if finite(xy.X) {
				lo, hi = math.Min(lo, xy.X), math.Max(hi, xy.X)
			}
		}
	}
	return lo, hi, !math.IsInf(lo, 0)
}

// The number of labelled ticks the axes aim at.
const (
	xTicks = 12
	yTicks = 6
)

// plot builds the panel's plot and, apart, its legend (Column draws it
// beside the plot area; SideBySide puts it in a corner).
func (pn Panel) plot() (*plot.Plot, plot.Legend) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = pn.Title, pn.X, pn.Y
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Title.Padding = vg.Millimeter * 2
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(11)
		a.Tick.Label.Font.Size = vg.Points(10)
		a.Padding = vg.Points(2)
	}
	p.X.Tick.Marker = Ticks{Target: xTicks}
	p.Y.Tick.Marker = Ticks{Target: yTicks}
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = color.Gray{Y: 0xdd}, color.Gray{Y: 0xdd}
	grid.Vertical.Width, grid.Horizontal.Width = vg.Points(0.5), vg.Points(0.5)
	p.Add(grid)

	lg := plot.NewLegend()
	lg.TextStyle.Font = font.From(plot.DefaultFont, 10)
	lg.Top, lg.Left = true, true
	lg.Padding = vg.Points(3)
	lg.ThumbnailWidth = vg.Points(18)
	var faint, solid []plot.Plotter
	for i, s := range pn.Series {
		c := Palette[i%len(Palette)]
		if s.Colour > 0 {
			c = Palette[(s.Colour-1)%len(Palette)]
		}
		var xys plotter.XYs
		for _, xy := range s.XYs {
			if finite(xy.X) && finite(xy.Y) {
				xys = append(xys, xy)
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			continue
		}
		l.Color, l.Width = c, vg.Points(1.5)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		thumbs := []plot.Thumbnailer{l}
		if s.Faint {
			l.Color, l.Width = color.NRGBA{R: c.R, G: c.G, B: c.B, A: 0x70}, vg.Points(0.8)
			faint = append(faint, l)
		} else {
			solid = append(solid, l)
		}
		if s.Points || pn.Points {
			if sc, err := plotter.NewScatter(xys); err == nil {
				sc.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
				solid = append(solid, sc)
				thumbs = append(thumbs, sc)
			}
		}
		lg.Add(s.Name, thumbs...)
	}
	// Faint lines first, so the curves over them stay on top.
	p.Add(faint...)
	p.Add(solid...)
	if lo, hi, ok := pn.YRange(); ok {
		p.Y.Min, p.Y.Max = lo, hi
	}
	return p, lg
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
