package ptfile_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// TestSaveZip64 writes a storage of 4 GiB + 1 bytes and one after it
// (past 4 GiB in the file), the records that need zip64 fields: Go loads
// the file back, and Python loads it (PyTorch 2.x checking the offsets it
// computes, then writing the same file byte for byte). It needs about
// 10 GB of memory and 9 GB of disk, so it runs only with
// TORCHFIT_PTFILE_ZIP64=1.
func TestSaveZip64(t *testing.T) {
	if os.Getenv("TORCHFIT_PTFILE_ZIP64") != "1" {
		t.Skip("set TORCHFIT_PTFILE_ZIP64=1 to write and read a 4 GiB file (needs ~10 GB of memory)")
	}
	const n = 1<<32 + 1
	dir := t.TempDir()
	goPath := filepath.Join(dir, "big.pt")
	pyPath := filepath.Join(dir, "py", "big.pt")
	require.NoError(t, os.MkdirAll(filepath.Dir(pyPath), 0o755))
	big := torch.Full([]int64{n}, 3, torch.Uint8)
	big.Narrow(0, 0, 8).CopyFrom(torch.FromSlice([]uint8("PK\x07\x08abcd"), nil))
	after := torch.FromSlice([]float32{1, 2, 3}, nil)
	require.NoError(t, ptfile.SaveTensors(goPath, torch.StateDict{{Name: "big", T: big}, {Name: "after", T: after}}))
	big.Free()

	sd, err := ptfile.LoadTensors(goPath)
	require.NoError(t, err)
	require.Equal(t, []string{"big", "after"}, sd.Names())
	m := sd.Map()
	require.Equal(t, []int64{n}, m["big"].Shape())
	require.Equal(t, []float64{'P', 'K', 7, 8, 'a', 'b', 'c', 'd', 3}, m["big"].Narrow(0, 0, 9).Float64s())
	require.Equal(t, []float32{1, 2, 3}, m["after"].Float32s())
	sd.Free()

	var got struct {
		Version [2]int
		Head    []float64
		MinMax  []float64
		After   []float64
	}
	pyref.Run(t, `
import os
os.environ["TORCH_SERIALIZATION_DEBUG"] = "1"
sd = torch.load(inp[0], weights_only=True)
big = sd["big"]
if torch.__version__.startswith("2"):
    torch.save(sd, inp[1])
emit({"Version": `+pyVersionExpr+`, "Head": big[:9].tolist(), "MinMax": [big[8:].min().item(), big[8:].max().item()],
      "After": sd["after"].tolist()})
`, []string{goPath, pyPath}, &got)
	require.Equal(t, []float64{'P', 'K', 7, 8, 'a', 'b', 'c', 'd', 3}, got.Head)
	require.Equal(t, []float64{3, 3}, got.MinMax)
	require.Equal(t, []float64{1, 2, 3}, got.After)
	if got.Version[0] >= 2 {
		requireSameLargeFile(t, pyPath, goPath)
	}
}

// requireSameLargeFile compares two files a chunk at a time.
func requireSameLargeFile(t *testing.T, a, b string) {
	fa, err := os.Open(a)
	require.NoError(t, err)
	defer fa.Close()
	fb, err := os.Open(b)
	require.NoError(t, err)
	defer fb.Close()
	ba, bb := make([]byte, 1<<24), make([]byte, 1<<24)
	for off := int64(0); ; {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		require.Equal(t, na, nb, "lengths differ near offset %d", off)
		if !bytes.Equal(ba[:na], bb[:nb]) {
			for k := range na {
				require.Equal(t, ba[k], bb[k], "byte %d", off+int64(k))
			}
		}
		off += int64(na)
		if ea != nil || eb != nil {
			return
		}
	}
}
