package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
)

func TestPlotGrowth(t *testing.T) {
	var rs []Result
	for _, b := range []int{2, 4, 8} {
		s := float64(b) / 100
		rs = append(rs, Result{Twin: "asr/tiny", Config: Config{Precision: amp.FP32, Batch: b},
			GoCPU: [][]float64{{s}}, PyCPU: [][]float64{{s * 1.1}}, GoPeak: int64(b) << 20, PyPeak: int64(b) << 20})
	}
	png := filepath.Join(t.TempDir(), "g.png")
	require.NoError(t, PlotGrowth(rs, "batch", png))
	b, err := os.ReadFile(png)
	require.NoError(t, err)
	require.Greater(t, len(b), 1000)
	require.Equal(t, "\x89PNG", string(b[:4]))
	require.Error(t, PlotGrowth(nil, "batch", png))
}
