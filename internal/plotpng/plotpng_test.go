package plotpng_test

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/torchfit/torchfit/internal/plotpng"
)

func panel(title string, n int) plotpng.Panel {
	var a, b plotter.XYs
	for i := range n {
		a = append(a, plotter.XY{X: float64(i), Y: float64(i * i)})
		b = append(b, plotter.XY{X: float64(i), Y: float64(2 * i)})
	}
	return plotpng.Panel{Title: title, X: "step", Y: "value", Series: []plotpng.Series{{Name: "square", XYs: a}, {Name: "double", XYs: b}}}
}

// decode reads the PNG at path and returns its width and height.
func decode(t *testing.T, path string) (int, int) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	return img.Bounds().Dx(), img.Bounds().Dy()
}

func TestColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "column.png")
	faint := panel("loss", 60)
	faint.Series[0].Faint, faint.Series[1].Points, faint.Series[1].Colour = true, true, 1
	dashed := panel("memory", 30)
	dashed.Series[1].Dashed, dashed.FromZero = true, true
	require.NoError(t, plotpng.Column(path, 10*vg.Inch, 2.5*vg.Inch, faint, dashed, panel("lr", 0)))
	w, h := decode(t, path)
	require.Equal(t, 10*96, w)
	require.Equal(t, 720, h) // 3 × 2.5 in at 96 dpi
}

func TestSideBySide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "side.png")
	right := panel("right", 10)
	right.Points, right.LegendTopLeft = true, true
	require.NoError(t, plotpng.SideBySide(path, 11*vg.Inch, 4.5*vg.Inch, panel("left", 10), right))
	w, h := decode(t, path)
	require.Equal(t, 11*96, w)
	require.Equal(t, 432, h) // 4.5 in at 96 dpi
}

// TestWriteFailure: a path in a missing directory fails and leaves nothing.
func TestWriteFailure(t *testing.T) {
	dir := t.TempDir()
	err := plotpng.Column(filepath.Join(dir, "no", "x.png"), 8*vg.Inch, 3*vg.Inch, panel("top", 3), panel("bottom", 3))
	require.ErrorIs(t, err, os.ErrNotExist)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func series(ys ...float64) []plotpng.Series {
	var xys plotter.XYs
	for i, y := range ys {
		xys = append(xys, plotter.XY{X: float64(i), Y: y})
	}
	return []plotpng.Series{{Name: "s", XYs: xys}}
}

// TestYRange: percentages span 0–100 however flat the data; memory
// starts at zero; other axes hug the data out to round numbers.
func TestYRange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		panel  plotpng.Panel
		lo, hi float64
		ok     bool
	}{
		{"cpu percent", plotpng.Panel{Series: series(51.2, 52.4, 51.7), FromZero: true, Top: 100}, 0, 100, true},
		{"percent above 100", plotpng.Panel{Series: series(90, 130), FromZero: true, Top: 100}, 0, 150, true},
		{"the same data unpinned", plotpng.Panel{Series: series(51.2, 52.4, 51.7)}, 51.2, 52.4, true},
		{"memory from zero", plotpng.Panel{Series: series(31.2, 55.5), FromZero: true}, 0, 60, true},
		{"negative data from zero", plotpng.Panel{Series: series(-3, 7), FromZero: true}, -4, 8, true},
		{"fractions", plotpng.Panel{Series: series(0.61, 1), FromZero: true, Top: 1}, 0, 1, true},
		{"a CER above one", plotpng.Panel{Series: series(1.08, 0.9), FromZero: true, Top: 1}, 0, 1.2, true},
		{"loss", plotpng.Panel{Series: series(5.2, 1.5)}, 1, 6, true},
		{"flat", plotpng.Panel{Series: series(3, 3)}, 2.7, 3.3, true},
		{"NaN skipped", plotpng.Panel{Series: series(math.NaN(), 2, 4)}, 2, 4, true},
		{"no data", plotpng.Panel{}, 0, 0, false},
		{"no data, percent", plotpng.Panel{FromZero: true, Top: 100}, 0, 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi, ok := tc.panel.YRange()
			require.Equal(t, tc.ok, ok)
			require.InDelta(t, tc.lo, lo, 1e-9)
			require.InDelta(t, tc.hi, hi, 1e-9)
		})
	}
}

func labels(ticks []plot.Tick) []string {
	var out []string
	for _, t := range ticks {
		if t.Label != "" {
			out = append(out, t.Label)
		}
	}
	return out
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target int
		lo, hi float64
		want   []string
		minors int
	}{
		{"steps", 12, 0, 300, []string{"0", "25", "50", "75", "100", "125", "150", "175", "200", "225", "250", "275", "300"}, 48},
		{"few steps", 12, 0, 80, []string{"0", "10", "20", "30", "40", "50", "60", "70", "80"}, 32},
		{"percent", 6, 0, 100, []string{"0", "20", "40", "60", "80", "100"}, 15},
		{"loss", 6, 1, 6, []string{"1", "2", "3", "4", "5", "6"}, 20},
		{"fraction", 6, 0, 1.2, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2"}, 18},
		{"learning rate", 6, 0, 0.002, []string{"0", "0.0005", "0.001", "0.0015", "0.002"}, 16},
		{"tiny learning rate", 6, 0, 3e-5, []string{"0", "5e-06", "1e-05", "1.5e-05", "2e-05", "2.5e-05", "3e-05"}, 24},
		{"seconds", 12, 0, 2.4, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2", "1.4", "1.6", "1.8", "2.0", "2.2", "2.4"}, 36},
		{"start off the grid", 12, 1, 80, []string{"10", "20", "30", "40", "50", "60", "70", "80"}, 32},
		{"empty span", 6, 3, 3, []string{"3"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ticks := plotpng.Ticks{Target: tc.target}.Ticks(tc.lo, tc.hi)
			require.Equal(t, tc.want, labels(ticks))
			require.Len(t, ticks, len(tc.want)+tc.minors)
			for _, tk := range ticks {
				require.True(t, tk.Value >= tc.lo-1e-12 && tk.Value <= tc.hi+1e-12, "tick %v outside [%v, %v]", tk.Value, tc.lo, tc.hi)
			}
		})
	}
}

func TestExtend(t *testing.T) {
	for _, tc := range []struct{ lo, hi, wantLo, wantHi float64 }{
		{51.2, 52.4, 51.2, 52.4},
		{0, 101, 0, 120},
		{0, 55.5, 0, 60},
		{1.52, 5.21, 1, 6},
		{0, 0, 0, 1},
		{-2, -2, -2.2, -1.8},
	} {
		lo, hi := plotpng.Extend(tc.lo, tc.hi, 6)
		require.InDelta(t, tc.wantLo, lo, 1e-9, "Extend(%v, %v)", tc.lo, tc.hi)
		require.InDelta(t, tc.wantHi, hi, 1e-9, "Extend(%v, %v)", tc.lo, tc.hi)
		step := plotpng.Step(lo, hi, 6)
		require.InDelta(t, 0, math.Remainder(lo, step), 1e-9, "both ends on a tick")
		require.InDelta(t, 0, math.Remainder(hi, step), 1e-9, "both ends on a tick")
	}
}

// TestTicksExtreme: spans past float64's range (hi-lo is +Inf), spans
// too small for the step to count across, and subnormal ones make a
// bounded handful of ticks within [lo, hi], and Extend keeps such axes
// finite. Unbounded, the first case appended ~1e309 ticks.
func TestTicksExtreme(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lo, hi float64
	}{
		{"both ends near MaxFloat64", -1e308, 1e308},
		{"MaxFloat64 both ways", -math.MaxFloat64, math.MaxFloat64},
		{"MaxFloat64 one way", 0, math.MaxFloat64},
		{"a narrow span far out", 1e20, 1e20 + 1e5},
		{"one ulp", 1, math.Nextafter(1, 2)},
		{"subnormal", 0, 5e-324},
		{"subnormal span", 1e-320, 2e-320},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, target := range []int{0, 1, 6, 12} {
				ticks := plotpng.Ticks{Target: target}.Ticks(tc.lo, tc.hi)
				require.NotEmpty(t, ticks)
				require.LessOrEqual(t, len(ticks), 5*(max(target, 1)+2)+1)
				step := plotpng.Step(tc.lo, tc.hi, target)
				require.True(t, step > 0 && !math.IsInf(step, 0), "step %v", step)
				for _, tk := range ticks {
					require.False(t, math.IsInf(tk.Value, 0) || math.IsNaN(tk.Value), "tick %v", tk.Value)
					require.True(t, tk.Value >= tc.lo-step*1e-6 && tk.Value <= tc.hi+step*1e-6, "tick %v outside [%v, %v]", tk.Value, tc.lo, tc.hi)
				}
				lo, hi := plotpng.Extend(tc.lo, tc.hi, target)
				require.True(t, lo <= tc.lo && hi >= tc.hi && !math.IsInf(lo, 0) && !math.IsInf(hi, 0), "Extend = [%v, %v]", lo, hi)
			}
		})
	}
}

// TestColumnExtreme: a loss from -1e308 to 1e308 (and a step axis as
// wide) renders instead of exhausting memory.
func TestColumnExtreme(t *testing.T) {
	path := filepath.Join(t.TempDir(), "extreme.png")
	pn := plotpng.Panel{Title: "loss", Series: []plotpng.Series{{Name: "loss", XYs: plotter.XYs{
		{X: -math.MaxFloat64, Y: 1e308}, {X: 2, Y: -1e308}, {X: math.MaxFloat64, Y: math.Inf(1)}, {X: 3, Y: math.NaN()}}}}}
	require.NoError(t, plotpng.Column(path, 8*vg.Inch, 3*vg.Inch, pn))
	w, _ := decode(t, path)
	require.Equal(t, 8*96, w)
}

// TestExtendOnATick: a bound on a tick still widens to whole steps though lo/step rounds
// (0.3/0.1 = 2.9999999999999996) and a lands a hair above lo.
func TestExtendOnATick(t *testing.T) {
	lo, hi := plotpng.Extend(0.3, 0.75, 6)
	require.InDelta(t, 0.3, lo, 1e-12)
	require.InDelta(t, 0.8, hi, 1e-12)
}
