package plotpng_test

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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

func TestStacked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stacked.png")
	require.NoError(t, plotpng.Stacked(path, 8*vg.Inch, 7*vg.Inch, panel("top", 10), panel("bottom", 5)))
	w, h := decode(t, path)
	require.Equal(t, 8*96, w) // vgimg's 96 dpi
	require.Equal(t, 7*96, h)
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
	err := plotpng.Stacked(filepath.Join(dir, "no", "x.png"), 8*vg.Inch, 7*vg.Inch, panel("top", 3), panel("bottom", 3))
	require.ErrorIs(t, err, os.ErrNotExist)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
