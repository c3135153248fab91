package safetensors_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
)

// needSafetensors skips where Python has no safetensors package (Debian's
// python3 on the 1.13 leg; the PyTorch 2.11 leg's .venv has it).
func needSafetensors(t *testing.T) {
	if !pyref.HasModule("safetensors.torch") {
		t.Skipf("%s cannot import safetensors (the PyTorch 2.11 leg's .venv has it: make test-torch2)", pyref.Python)
	}
}

// pyTensor is a tensor as Python describes it: its element bytes exactly.
type pyTensor struct {
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Bytes string  `json:"bytes"`
}

const pyBytes = `
import base64
def describe(ts):
    return {k: {"dtype": str(v.dtype)[6:], "shape": list(v.shape),
                "bytes": base64.b64encode(v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).decode()}
            for k, v in ts.items()}
`

// TestPythonWritesGoReads: safetensors.torch.save_file writes every dtype
// with special values; Go reads the same bytes, and writes the same file.
func TestPythonWritesGoReads(t *testing.T) {
	needSafetensors(t)
	path := filepath.Join(t.TempDir(), "py.safetensors")
	var want map[string]pyTensor
	pyref.Run(t, pyBytes+`
import safetensors.torch as st
g = torch.Generator().manual_seed(0)
f32 = torch.randn(3, 4, generator=g)
f32[0, :4] = torch.tensor([float("nan"), float("inf"), -0.0, 1e-45])
ts = {
    "f32": f32,
    "f16": torch.randn(5, generator=g).half(),
    "bf16": torch.randn(2, 3, generator=g).bfloat16(),
    "f64": torch.randn(4, 1, generator=g, dtype=torch.float64),
    "i64": torch.randint(-2**62, 2**62, (3,), generator=g),
    "i32": torch.randint(-2**31, 2**31 - 1, (2, 2), generator=g, dtype=torch.int32),
    "i16": torch.randint(-2**15, 2**15 - 1, (3,), generator=g, dtype=torch.int16),
    "i8": torch.randint(-128, 127, (4,), generator=g, dtype=torch.int8),
    "u8": torch.randint(0, 255, (2, 3), generator=g, dtype=torch.uint8),
    "bool": torch.rand(7, generator=g) > 0.5,
    "scalar": torch.tensor(3.5),
    "empty": torch.zeros(0, 3),
    "encoder.layers.0.attn.weight": torch.randn(2, 2, 2, generator=g),
}
st.save_file(ts, inp["path"], metadata={"format": "pt"})
emit(describe(ts))
`, map[string]any{"path": path}, &want)

	f, err := safetensors.Load(path)
	require.NoError(t, err)
	defer f.Free()
	require.Equal(t, map[string]string{"format": "pt"}, f.Metadata)
	got := f.Map()
	require.Len(t, got, len(want))
	for name, w := range want {
		g := got[name]
		require.NotNil(t, g, name)
		require.Equal(t, w.DType, g.DType().String(), name)
		require.Equal(t, w.Shape, shapeOf(g), name)
		wb, err := base64.StdEncoding.DecodeString(w.Bytes)
		require.NoError(t, err)
		require.Equal(t, wb, raw(t, g), name)
	}
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	again, err := safetensors.SaveBytes(f.Tensors, f.Metadata)
	require.NoError(t, err)
	require.Equal(t, file, again, "Go writes the file Python wrote")
}

// TestGoWritesPythonReads: Go writes every dtype (views and a parameter
// too); safetensors.torch.load_file reads the same bytes, and
// safetensors.torch.save writes the same file.
func TestGoWritesPythonReads(t *testing.T) {
	needSafetensors(t)
	for _, tc := range []struct {
		name string
		meta map[string]string
	}{
		{"no metadata", nil},
		{"metadata", map[string]string{"format": "pt"}},
		{"two keys", map[string]string{"format": "pt", "note": "a \"quoted\"\nline\x01 é\u2028"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := sample()
			defer ptfile.FreeAll(ts)
			ts = append(ts, torch.Named{Name: "odd \"name\"\\\n\u2028é", T: ts[0].T})
			path := filepath.Join(t.TempDir(), "go.safetensors")
			require.NoError(t, safetensors.Save(path, ts, tc.meta))
			var res struct {
				Tensors  map[string]pyTensor `json:"tensors"`
				Metadata map[string]string   `json:"metadata"`
				Again    string              `json:"again"`
			}
			pyref.Run(t, pyBytes+`
import safetensors.torch as st
from safetensors import safe_open
ts = st.load_file(inp["path"])
with safe_open(inp["path"], "pt") as f:
    md = f.metadata()
emit({"tensors": describe(ts), "metadata": md,
      "again": base64.b64encode(st.save(ts, metadata=md)).decode()})
`, map[string]any{"path": path}, &res)
			require.Equal(t, tc.meta, res.Metadata)
			require.Len(t, res.Tensors, len(ts))
			for _, nt := range ts {
				w := res.Tensors[nt.Name]
				require.Equal(t, nt.T.DType().String(), w.DType, nt.Name)
				require.Equal(t, shapeOf(nt.T), w.Shape, nt.Name)
				wb, err := base64.StdEncoding.DecodeString(w.Bytes)
				require.NoError(t, err)
				require.Equal(t, raw(t, nt.T), wb, nt.Name)
			}
			if len(tc.meta) <= 1 { // the Rust library writes two or more keys in hash order
				file, err := os.ReadFile(path)
				require.NoError(t, err)
				again, err := base64.StdEncoding.DecodeString(res.Again)
				require.NoError(t, err)
				require.Equal(t, again, file, "Python writes the file Go wrote")
			}
		})
	}
}
