package bench

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
)

func TestConfigDev(t *testing.T) {
	cases := []struct {
		name string
		dev  torch.Device
		want torch.Device
	}{
		{"zero value", torch.Device{}, torch.CPU},
		{"cpu", torch.CPU, torch.CPU},
		{"cuda 0", torch.CUDA(0), torch.CUDA(0)},
		{"cuda 1", torch.CUDA(1), torch.CUDA(1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, Config{Device: c.dev}.Dev())
		})
	}
}

// A twin built for a CUDA device on a machine without one fails with
// torch's ErrNoCUDA from moving the model (no panic, nothing left behind).
func TestTwinOnMissingCUDA(t *testing.T) {
	if torch.CUDADeviceCount() > 0 {
		t.Skip("this machine has a CUDA device")
	}
	for _, name := range []string{"asr/tiny", "ganvit/gan-cpu"} {
		t.Run(name, func(t *testing.T) {
			tw, err := Lookup(name)
			require.NoError(t, err)
			inst, err := tw.Build(Config{Threads: 1, Precision: amp.FP32, Batch: 2, Length: 64, Seed: 1, Device: torch.CUDA(0)})
			require.ErrorIs(t, err, torch.ErrNoCUDA)
			require.Nil(t, inst)
		})
	}
}
