package audio

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

func TestMelScales(t *testing.T) {
	require.InDelta(t, 15, Slaney.HzToMel(1000), 1e-12)
	require.InDelta(t, 3, Slaney.HzToMel(200), 1e-12)
	require.InDelta(t, 1000, HTK.HzToMel(1000), 0.02) // about 1000 mels at 1 kHz, by design
	for _, s := range []MelScale{HTK, Slaney} {
		for _, f := range []float64{0, 50, 999, 1000, 4000, 11025} {
			require.InDelta(t, f, s.MelToHz(s.HzToMel(f)), 1e-9)
		}
	}
}

// pyFilterbanks computes both filterbanks from their definitions: the HTK
// one as torchaudio's melscale_fbanks (norm=None) does, written out by
// hand in float64, and the Slaney one as librosa.filters.mel's defaults
// (htk=False, norm="slaney") in numpy.
const pyFilterbanks = `
import numpy as np
def htk(sr, n_fft, n_mels):
    n_freqs = n_fft // 2 + 1
    hz2mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)
    mel2hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    m_max = hz2mel(sr / 2)
    f_pts = [mel2hz(m_max * i / (n_mels + 1)) for i in range(n_mels + 2)]
    fb = torch.zeros(n_freqs, n_mels, dtype=torch.float64)
    for i in range(n_freqs):
        f = (sr // 2) * i / (n_freqs - 1)
        for m in range(n_mels):
            lo, c, hi = f_pts[m], f_pts[m + 1], f_pts[m + 2]
            fb[i, m] = max(0.0, min((f - lo) / (c - lo), (hi - f) / (hi - c)))
    return fb.flatten().tolist()
def slaney(sr, n_fft, n_mels):
    def hz_to_mel(f):
        f = np.asanyarray(f, dtype=np.float64)
        mels = f / (200.0 / 3)
        log_t = f >= 1000.0
        return np.where(log_t, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mels)
    def mel_to_hz(m):
        m = np.asanyarray(m, dtype=np.float64)
        freqs = (200.0 / 3) * m
        log_t = m >= 15.0
        return np.where(log_t, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), freqs)
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, 1 + n_fft // 2))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.flatten().tolist()
emit({"HTK": htk(16000, 400, 80), "Slaney": slaney(22050, 2048, 64)})
`

// TestMelFilterbankMatchesPython: the HTK filterbank is torchaudio's
// (within 1e-6), the Slaney one librosa's (within 1e-7), in both layouts.
func TestMelFilterbankMatchesPython(t *testing.T) {
	if !pyref.Available() {
		t.Fatal("Python PyTorch is missing at " + pyref.Python + ": run 'make deps'")
	}
	var want struct{ HTK, Slaney []float64 }
	pyref.Run(t, pyFilterbanks, nil, &want)
	for _, tc := range []struct {
		name string
		c    MelConfig // MelsFirst as the reference lays it out
		want []float64
		tol  float64
	}{
		{"HTK", MelConfig{SampleRate: 16000, NFFT: 400, Mels: 80}, want.HTK, 1e-6},
		{"Slaney", MelConfig{SampleRate: 22050, NFFT: 2048, Mels: 64, Scale: Slaney, Norm: NormSlaney, MelsFirst: true}, want.Slaney, 1e-7},
	} {
		fb := MelFilterbank(tc.c)
		nf := tc.c.NFFT/2 + 1
		require.Len(t, fb, nf*tc.c.Mels, tc.name)
		require.Len(t, tc.want, len(fb), tc.name)
		var worst float64
		for i, w := range tc.want {
			worst = math.Max(worst, math.Abs(float64(fb[i])-w))
		}
		t.Logf("%s filterbank: max |Go − Python| %.2e", tc.name, worst)
		require.Less(t, worst, tc.tol, tc.name)
		// The other layout is the transpose.
		c := tc.c
		c.MelsFirst = !c.MelsFirst
		tr := MelFilterbank(c)
		for k := range nf {
			for m := range tc.c.Mels {
				a, b := fb[k*tc.c.Mels+m], tr[m*nf+k]
				if tc.c.MelsFirst {
					a, b = fb[m*nf+k], tr[k*tc.c.Mels+m]
				}
				require.Equal(t, a, b, "%s transposed, frequency %d mel %d", tc.name, k, m)
			}
		}
	}
}

// TestMelSpectrogram: both layouts give the same spectrogram up to the
// product's rounding, and so does keeping the first frames; the
// compressions.
func TestMelSpectrogram(t *testing.T) {
	x := make([]float32, 16000)
	for i := range x {
		x[i] = float32(0.5*math.Sin(2*math.Pi*440*float64(i)/16000) + 0.1*math.Sin(float64(i)*0.37))
	}
	c := MelConfig{SampleRate: 16000, NFFT: 400, Hop: 160, Mels: 40}
	a, err := NewMelSpectrogram(c)
	require.NoError(t, err)
	defer a.Close()
	c.MelsFirst = true
	b, err := NewMelSpectrogram(c)
	require.NoError(t, err)
	defer b.Close()
	require.Equal(t, 101, a.Frames(len(x)))
	require.Equal(t, []int64{400}, a.Window().Shape())
	require.Equal(t, []int64{201, 40}, a.Filterbank().Shape())
	require.Equal(t, []int64{40, 201}, b.Filterbank().Shape())
	torch.Tidy(func() {
		pa, pb := a.Power(x, 0), b.Power(x, 0)
		require.Equal(t, []int64{101, 40}, pa.Shape())
		require.Equal(t, []int64{40, 101}, pb.Shape())
		require.Less(t, pa.Sub(pb.T()).Abs().Max().Item(), 1e-5*pa.Abs().Max().Item())
		// The first frames, up to the product's rounding (the product over
		// fewer frames rounds differently).
		first := b.Power(x, 7)
		require.Equal(t, []int64{40, 7}, first.Shape())
		require.Less(t, first.Sub(pb.Narrow(1, 0, 7)).Abs().Max().Item(), 1e-5*first.Abs().Max().Item())

		mel := torch.FromSlice([]float32{0, 1e-12, 1, 100}, []int64{4})
		require.InDeltaSlice(t, []float64{math.Log(1e-6), math.Log(1e-6 + 1e-12), math.Log(1 + 1e-6), math.Log(100 + 1e-6)},
			float64s(LogOffset(mel, 1e-6)), 1e-6)
		require.InDeltaSlice(t, []float64{math.Log(1e-5), math.Log(1e-5), 0, math.Log(100)}, float64s(LogClamped(mel, 1e-5)), 1e-6)
		require.InDeltaSlice(t, []float64{-80, -80, -20, 0}, float64s(PowerToDB(mel, 1e-10, 80)), 1e-4)
	})
	_, err = NewMelSpectrogram(MelConfig{SampleRate: 16000, NFFT: 400, Hop: 0, Mels: 80})
	require.ErrorContains(t, err, "bad parameters")
}

func float64s(t *torch.Tensor) []float64 {
	v := t.Float32s()
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
