package ptfile_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// A torch.save file holding a tensor of a dtype torchfit does not have
// (complex; float8 and uint16, which PyTorch 2.x saves with
// _rebuild_tensor_v3) is refused as such (ErrDType, with ErrBadFile), not
// as a file holding something other than tensors, and leaves no tensor
// allocated.
func TestLoadRefusesOtherDTypes(t *testing.T) {
	var files map[string]*string // dtype → base64 file; nil where this PyTorch has no such dtype
	pyref.Run(t, `
import io, base64
out = {}
for name in ["complex64", "float8_e4m3fn", "uint16"]:
    dt = getattr(torch, name, None)
    if dt is None:
        out[name] = None
        continue
    buf = io.BytesIO()
    torch.save({"ok": torch.ones(2), "x": torch.zeros(3).to(dt)}, buf)
    out[name] = base64.b64encode(buf.getvalue()).decode()
emit(out)
`, nil, &files)
	require.Len(t, files, 3)
	torch.CollectGarbage()
	before := torch.LiveTensors()
	for name, b64 := range files {
		t.Run(name, func(t *testing.T) {
			if b64 == nil {
				t.Skipf("%s's torch has no %s", pyref.Python, name)
			}
			v, err := ptfile.LoadBytes(decodeB64(t, *b64))
			require.Error(t, err, "loaded %v", v)
			require.ErrorIs(t, err, ptfile.ErrBadFile)
			require.ErrorIs(t, err, ptfile.ErrDType)
		})
	}
	require.Equal(t, before, torch.LiveTensors(), "failed loads release what they created")
}
