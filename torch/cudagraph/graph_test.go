package cudagraph

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

func TestCaptureArgs(t *testing.T) {
	step := func() error { return nil }
	noGPU := torch.CUDADeviceCount() == 0
	cases := []struct {
		name string
		dev  torch.Device
		step func() error
		o    Options
		want error
		// onlyNoGPU: the case needs a machine without a CUDA device (or a
		// binary without the cuda tag).
		onlyNoGPU bool
	}{
		{name: "nil step", dev: torch.CUDA(0), want: ErrArg},
		{name: "CPU device", dev: torch.CPU, step: step, want: ErrArg},
		{name: "negative warm-up", dev: torch.CUDA(0), step: step, o: Options{Warmup: -1}, want: ErrArg},
		{name: "no such device", dev: torch.CUDA(1 << 20), step: step, want: ErrNoCUDA},
		{name: "no CUDA here", dev: torch.CUDA(0), step: step, want: ErrNoCUDA, onlyNoGPU: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.onlyNoGPU && !noGPU && Built() {
				t.Skip("this machine has a CUDA device and the binary the cuda tag")
			}
			g, err := Capture(c.dev, c.step, c.o)
			require.ErrorIs(t, err, c.want)
			require.Nil(t, g)
		})
	}
}

func TestAvailable(t *testing.T) {
	require.False(t, Available(torch.CPU))
	require.Equal(t, Built() && torch.CUDADeviceCount() > 0, Available(torch.CUDA(0)))
}

func TestGraphNilAndFreed(t *testing.T) {
	var nilGraph *Graph
	require.ErrorIs(t, nilGraph.Replay(), ErrArg)
	require.NoError(t, nilGraph.Free())
	freed := &Graph{dev: torch.CUDA(0)} // what Free leaves: no native graph
	require.ErrorIs(t, freed.Replay(), ErrArg)
	require.NoError(t, freed.Free())
}

// The native entry points without a graph answer errors, not crashes.
func TestNativeWithoutGraph(t *testing.T) {
	require.NoError(t, nativeFree(nil))
	for name, fn := range map[string]func(handle) error{
		"enter": nativeEnter, "exit": nativeExit, "capture begin": nativeCaptureBegin,
		"capture end": nativeCaptureEnd, "replay": nativeReplay,
	} {
		err := fn(nil)
		require.Error(t, err, name)
		if !Built() {
			require.ErrorContains(t, err, "needs CUDA", name)
		} else {
			require.ErrorContains(t, err, "nil graph", name)
		}
	}
	if !Built() {
		h, err := nativeNew(0)
		require.ErrorContains(t, err, "needs CUDA")
		require.Nil(t, h)
	}
}

// A step's error, a libtorch error it panics with and any other panic all
// come back from run as errors (Capture then ends the capture).
func TestRunStep(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name string
		step func() error
		want error // nil: *torch.Error
	}{
		{"error", func() error { return boom }, boom},
		{"libtorch error", func() error {
			torch.Tidy(func() { torch.Zeros([]int64{2, 3}).Matmul(torch.Zeros([]int64{2, 3})) })
			return nil
		}, nil},
		{"other panic", func() error { panic("not a torch error") }, ErrPanic},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := run(c.step)
			require.Error(t, err)
			if c.want == nil {
				var te *torch.Error
				require.ErrorAs(t, err, &te)
				return
			}
			require.ErrorIs(t, err, c.want)
		})
	}
	require.NoError(t, run(func() error { return nil }))
}
