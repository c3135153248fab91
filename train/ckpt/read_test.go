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

// TestReadParts: an inference load of a training checkpoint (its model
// and meta) holds the model's weights and nothing of the optimizer's
// moments — exactly the weights' bytes, no transient above them — so a
// checkpoint whose whole does not fit under a memory cap still loads its
// model under it.
func TestReadParts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.pt")
	m := nn.NewLinear(256, 256, true)
	defer nn.Free(m)
	opt := nn.NewAdamW(nn.Parameters(m), nn.AdamWDefaults(1e-3))
	defer opt.Free()
	torch.Tidy(func() {
		m.Forward(torch.Ones([]int64{4, 256})).Sum().Backward()
	})
	opt.Step()
	w := ckpt.NewWriter()
	w.Module("model", m)
	w.Optimizer("optimizer", opt)
	w.Int("step", 1)
	w.Meta(nil)
	require.NoError(t, w.Save(path))
	weights := int64(256*256+256) * 4

	torch.CollectGarbage()
	base := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	f, err := ckpt.ReadParts(path, "meta", "model")
	require.NoError(t, err)
	s := torch.MustMemoryStats(torch.CPU)
	require.Equal(t, weights, s.Allocated-base, "the weights alone")
	require.Equal(t, weights, s.PeakAllocated-base, "no transient")

	back := nn.NewLinear(256, 256, true)
	defer nn.Free(back)
	require.NoError(t, f.Module("model", back))
	for k, p := range nn.StateDict(back) {
		require.Equal(t, nn.StateDict(m)[k].T.Float32s(), p.T.Float32s(), p.Name)
	}
	require.NotNil(t, f.Meta())
	require.True(t, f.Has("model"))
	require.True(t, f.Has("optimizer"), "in the file, not read")
	require.Panics(t, func() { _, _ = f.Int("step") }, "a part not read")
	require.Panics(t, func() { _ = f.Optimizer("optimizer", opt) }, "a part not read")
	f.Free()

	// Under a cap of the weights and 64 KiB, the whole file (weights and
	// AdamW's two moments) is out of memory; its model part is not.
	torch.CollectGarbage()
	now := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.SetMemoryLimit(torch.CPU, now+weights+(64<<10)))
	defer func() { require.NoError(t, torch.SetMemoryLimit(torch.CPU, 0)) }()
	f, err = ckpt.Read(path)
	if err == nil {
		f.Free()
	}
	require.ErrorIs(t, err, torch.ErrOutOfMemory)
	f, err = ckpt.ReadParts(path, "meta", "model")
	require.NoError(t, err)
	f.Free()

	f, err = ckpt.ReadParts(path, "model", "missing")
	require.NoError(t, err)
	require.False(t, f.Has("missing"))
	f.Free()
}

// TestReader: one open file read in several calls. Describe allocates
// nothing and CheckModule works on it (a model of another shape is
// refused from the description alone); restoring from a description is
// an error, not a panic; a part read later is the file's; a part the file
// lacks is absent from any File, one it has but that was not read panics.
func TestReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.pt")
	m := nn.NewLinear(64, 32, true)
	defer nn.Free(m)
	w := ckpt.NewWriter()
	w.Module("model", m)
	w.Int("step", 3)
	require.NoError(t, w.Save(path))

	r, err := ckpt.Open(path)
	require.NoError(t, err)
	defer r.Close()
	torch.CollectGarbage()
	base := torch.MustMemoryStats(torch.CPU).Allocated
	require.NoError(t, torch.ResetPeakMemory(torch.CPU))
	desc, err := r.Describe("model")
	require.NoError(t, err)
	defer desc.Free()
	require.Zero(t, torch.MustMemoryStats(torch.CPU).PeakAllocated-base, "a description allocates nothing")
	require.Equal(t, []string{"model", "step"}, desc.Keys())

	require.NoError(t, desc.CheckModule("model", m))
	other := nn.NewLinear(64, 16, true)
	defer nn.Free(other)
	var ce *ckpt.Error
	require.ErrorAs(t, desc.CheckModule("model", other), &ce)
	require.ErrorAs(t, desc.Module("model", m), &ce, "a description cannot be loaded")
	require.Panics(t, func() { _, _ = desc.Int("step") }, "in the file, not read")
	_, err = desc.Int("epoch")
	require.ErrorAs(t, err, &ce, "not in the file: the file's error")

	f, err := r.Parts("model", "step")
	require.NoError(t, err)
	defer f.Free()
	back := nn.NewLinear(64, 32, true)
	defer nn.Free(back)
	require.NoError(t, f.Module("model", back))
	require.Equal(t, nn.Parameters(m)[0].T.Float32s(), nn.Parameters(back)[0].T.Float32s())
	step, err := f.Int("step")
	require.NoError(t, err)
	require.Equal(t, 3, step)

	_, err = ckpt.Open(filepath.Join(t.TempDir(), "none.pt"))
	require.ErrorAs(t, err, &ce)
}
