package tts

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

// chirp is a 0.5 s sweep from 200 Hz to 3 kHz with a 440 Hz tone.
func chirp() []float32 {
	n := SampleRate / 2
	x := make([]float32, n)
	for i := range x {
		t := float64(i) / SampleRate
		x[i] = float32(0.3*math.Sin(2*math.Pi*(200*t+2800*t*t)) + 0.2*math.Sin(2*math.Pi*440*t))
	}
	return x
}

// TestAudioMatchesPython: log-mels, the mel inversion and Griffin-Lim
// (torchaudio's algorithm with momentum 0.99, from the same phases) equal
// PyTorch's torch.stft/istft/pinverse computation.
func TestAudioMatchesPython(t *testing.T) {
	// One thread, as pyref's Python: the 2.11 wheel's MKL pinverse differs
	// in its last bits with the thread count (1 vs 2: 1.4e-7), which the 32
	// multiplicative mel-inversion steps raise to 3e-4 of the magnitude. At
	// one thread the magnitude differs by 4e-7 (2.11) and 1.2e-4 (1.13,
	// whose Go side runs OpenBLAS's SkylakeX kernels and Python its own
	// Prescott ones on an AVX-512 CPU): the bound below is 2e-4.
	defer torch.SetNumThreads(torch.NumThreads())
	torch.SetNumThreads(1)
	m, err := NewMel()
	require.NoError(t, err)
	defer m.Close()
	x := chirp()
	const iters = 8
	var lm, mag, wav []float32
	var frames int64
	var initPh []float32
	torch.Tidy(func() {
		l, err := m.LogMel(x)
		require.NoError(t, err)
		frames = l.Size(0)
		require.Equal(t, int64(Frames(len(x))), frames)
		lm = l.Float32s()
		mg := m.Magnitude(l)
		mag = mg.Float32s()
		init := randomPhases(NFFT/2+1, frames, 5)
		initPh = init.Float32s()
		wav = m.GriffinLim(mg, iters, int64(len(x)), init, 0).Float32s()
	})
	var want struct {
		LogMel, Mag, Wav []float32
	}
	pyref.Run(t, `
x = torch.tensor(inp['x'])
fb = torch.tensor(inp['fbank']).reshape(513, 80)
win = torch.hann_window(1024, periodic=True)
spec = torch.stft(x, 1024, 256, 1024, win, center=True, pad_mode='reflect', return_complex=True).abs() ** 2
logmel = torch.log(torch.clamp(spec.T @ fb, min=1e-5))
mel = torch.exp(logmel)
p = (mel @ torch.pinverse(fb)).clamp_min(1e-8)
for _ in range(32):
    p = p * (mel @ fb.T) / (p @ (fb @ fb.T) + 1e-12)
mag = p.sqrt().T
F, T_ = mag.shape
angles = torch.view_as_complex(torch.tensor(inp['init']).reshape(F, T_, 2))
tprev = torch.tensor(0.0)
m = 0.99
L = x.numel()
for i in range(inp['iters']):
    inverse = torch.istft(mag * angles, 1024, 256, 1024, win, length=L)
    rebuilt = torch.stft(inverse, 1024, 256, 1024, win, center=True, pad_mode='reflect', return_complex=True)
    angles = rebuilt - tprev * (m / (1 + m))
    angles = angles / (angles.abs() + 1e-16)
    tprev = rebuilt
wav = torch.istft(mag * angles, 1024, 256, 1024, win, length=L)
emit({'LogMel': logmel.flatten().tolist(), 'Mag': mag.flatten().tolist(), 'Wav': wav.tolist()})
`, map[string]any{"x": x, "fbank": audio.MelFilterbank(melConfig), "init": initPh, "iters": iters}, &want)
	closeTo := func(name string, got, want []float32, tol float64) {
		require.Len(t, got, len(want), name)
		var worst, scale float64
		for i := range got {
			worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
			scale = math.Max(scale, math.Abs(float64(want[i])))
		}
		t.Logf("%s: largest difference %.3g (largest value %.3g)", name, worst, scale)
		require.LessOrEqual(t, worst, tol*scale, name)
	}
	closeTo("log-mel", lm, want.LogMel, 1e-5)
	closeTo("magnitude", mag, want.Mag, 2e-4)
	closeTo("Griffin-Lim waveform", wav, want.Wav, 1e-3)
}

// TestGriffinLimRecovers: 32 iterations from random phases give back a
// waveform whose spectrogram is close to the original's (the
// reconstruction improves with iterations).
func TestGriffinLimRecovers(t *testing.T) {
	m, err := NewMel()
	require.NoError(t, err)
	defer m.Close()
	x := chirp()
	errAfter := func(iters int) float64 {
		var e float64
		torch.Tidy(func() {
			l, err := m.LogMel(x)
			require.NoError(t, err)
			w := m.GriffinLim(m.Magnitude(l), iters, int64(len(x)), nil, 1)
			back, err := m.LogMel(w.Float32s())
			require.NoError(t, err)
			e = back.Sub(l).Abs().Mean().Item()
		})
		return e
	}
	e1, e32 := errAfter(1), errAfter(32)
	t.Logf("log-mel L1 after Griffin-Lim: 1 iteration %.3f, 32 iterations %.3f", e1, e32)
	require.Less(t, e32, e1)
	require.Less(t, e32, 0.8)
}

// TestVocodeShortMels: a mel of fewer frames than the STFT's reflection
// padding needs (a sequence the GPT stopped at once decodes to 2) is
// vocoded to its own length, (frames − 1) × Hop samples; from 4 frames
// on, as before.
func TestVocodeShortMels(t *testing.T) {
	m, err := NewMel()
	require.NoError(t, err)
	defer m.Close()
	for _, frames := range []int64{1, 2, 3, 4, 8} {
		mel := torch.Full([]int64{frames, NMels}, -2)
		w, err := m.Vocode(mel, 2, 1)
		mel.Free()
		require.NoError(t, err, "%d frames", frames)
		require.Len(t, w, int((frames-1)*Hop), "%d frames", frames)
	}
}

func TestDTWL1(t *testing.T) {
	a := make([]float32, 10*NMels)
	for i := range a {
		a[i] = float32(i % 7)
	}
	// b repeats every frame of a twice: the warping path absorbs it.
	b := make([]float32, 0, 20*NMels)
	for f := range 10 {
		b = append(b, a[f*NMels:(f+1)*NMels]...)
		b = append(b, a[f*NMels:(f+1)*NMels]...)
	}
	require.Equal(t, 0.0, dtwL1(a, a))
	require.Equal(t, 0.0, dtwL1(a, b))
	c := append([]float32(nil), a...)
	for i := range c {
		c[i]++
	}
	require.InDelta(t, 1.0, dtwL1(a, c), 1e-9)
	require.True(t, math.IsNaN(dtwL1(nil, a)))
}
