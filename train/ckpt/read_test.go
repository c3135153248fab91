package ckpt_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// A checkpoint that does not fit under the memory cap is out of memory
// (torch.ErrOutOfMemory), not a bad file (*ckpt.Error, the user's input):
// the command line exits 3, and its message does not blame the file.
func TestReadOutOfMemoryIsNotABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.pt")
	w := ckpt.NewWriter()
	m := nn.NewLinear(1024, 1024, false) // 4 MiB of weights
	defer nn.Free(m)
	w.Module("model", m)
	require.NoError(t, w.Save(path))

	require.NoError(t, torch.SetMemoryLimit(torch.CPU, torch.MustMemoryStats(torch.CPU).Allocated+(1<<20)))
	f, err := ckpt.Read(path)
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0))
	if err == nil {
		f.Free()
	}
	require.ErrorIs(t, err, torch.ErrOutOfMemory)
	var ce *ckpt.Error
	require.False(t, errors.As(err, &ce), "not the file's fault: %v", err)

	f, err = ckpt.Read(path) // without the cap
	require.NoError(t, err)
	f.Free()
}
