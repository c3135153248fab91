package asr

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
)

// testSignal is a chirp-like mix of tones and noise, deterministic.
func testSignal(n int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n)
	for i := range x {
		tt := float64(i) / SampleRate
		v := 0.3*math.Sin(2*math.Pi*(220+400*tt)*tt) + 0.2*math.Sin(2*math.Pi*1800*tt) + 0.02*r.NormFloat64()
		if i > n/2 {
			v *= 0.1 // a quiet half: exercises the log floor region less gently
		}
		x[i] = float32(v)
	}
	return x
}

// The Python reference: a hand-written HTK filterbank (float64) and
// torch.stft(center=True, reflect), in plain torch (no torchaudio). The
// filterbank itself is checked in package audio.
const pyLogMel = `
sr, n_fft, hop, n_mels = inp["sr"], inp["n_fft"], inp["hop"], inp["n_mels"]
x = torch.tensor(inp["x"], dtype=torch.float32)
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
win = torch.hann_window(n_fft)
spec = torch.stft(x, n_fft, hop, n_fft, win, center=True, pad_mode="reflect", return_complex=True).abs() ** 2
mel = spec.T @ fb.float()
lm = torch.log(mel + 1e-6)
norm = (lm - lm.mean(0, keepdim=True)) / (lm.std(0, unbiased=False, keepdim=True) + 1e-5)
emit({"logmel": t2l(lm), "norm": t2l(norm)})
`

func TestFeaturizerMatchesPyTorch(t *testing.T) {
	if !pyref.Available() {
		t.Fatal("Python PyTorch is missing at " + pyref.Python + ": run 'make deps'")
	}
	f, err := NewFeaturizer(16000, 400, 160, 80)
	require.NoError(t, err)
	defer f.Close()
	x := testSignal(16000*3/2 + 37)
	var ref struct {
		LogMel [][]float64 `json:"logmel"`
		Norm   [][]float64 `json:"norm"`
	}
	pyref.Run(t, pyLogMel, map[string]any{"sr": 16000, "n_fft": 400, "hop": 160, "n_mels": 80, "x": x}, &ref)

	check := func(name string, got *torch.Tensor, want [][]float64, tol float64) {
		defer got.Free()
		require.Equal(t, []int64{int64(len(want)), 80}, got.Shape())
		require.Equal(t, torch.Float32, got.DType())
		g := got.Float32s()
		var maxErr float64
		for i := range want {
			for m, w := range want[i] {
				maxErr = max(maxErr, math.Abs(float64(g[i*80+m])-w))
			}
		}
		t.Logf("%s: %d frames, max abs error vs PyTorch %.2g", name, len(want), maxErr)
		require.Less(t, maxErr, tol, name)
	}
	require.Equal(t, f.Frames(len(x)), len(ref.LogMel))
	lm, err := f.LogMel(x)
	require.NoError(t, err)
	check("log-mel", lm, ref.LogMel, 1e-4)
	nm, err := f.Features(x)
	require.NoError(t, err)
	check("normalised", nm, ref.Norm, 1e-4)
}

func TestFeaturizerNormalisedAndErrors(t *testing.T) {
	f, err := NewFeaturizer(16000, 400, 160, 80)
	require.NoError(t, err)
	defer f.Close()
	feats, err := f.Features(testSignal(8000))
	require.NoError(t, err)
	defer feats.Free()
	torch.Tidy(func() {
		require.Less(t, feats.MeanDim([]int64{0}, false).Abs().Max().Item(), 1e-4)
		require.InDelta(t, 1, feats.Std([]int64{0}, 0, false).Mean().Item(), 1e-3)
	})
	_, err = f.Features(make([]float32, 150))
	require.ErrorContains(t, err, "too short")
	_, err = NewFeaturizer(16000, 400, 0, 80)
	require.ErrorContains(t, err, "bad parameters")
}

func TestSpecAugment(t *testing.T) {
	a := SpecAugment{FreqMasks: 2, MaxFreqWidth: 10, TimeMasks: 2, MaxTimeWidth: 30, MaxTimeFrac: 0.2}
	tm1, fm1 := a.Masks(100, 80, rand.New(rand.NewPCG(5, 5)))
	tm2, fm2 := a.Masks(100, 80, rand.New(rand.NewPCG(5, 5)))
	require.Equal(t, tm1, tm2, "seeded")
	require.Equal(t, fm1, fm2, "seeded")
	zeros := func(v []float32) (n int) {
		for _, x := range v {
			if x == 0 {
				n++
			}
		}
		return n
	}
	require.LessOrEqual(t, zeros(fm1), 20)
	require.LessOrEqual(t, zeros(tm1), 40)
	maskedAny := false
	for s := uint64(0); s < 20; s++ {
		tm, fm := a.Masks(100, 80, rand.New(rand.NewPCG(s, 1)))
		maskedAny = maskedAny || (zeros(tm) > 0 && zeros(fm) > 0)
	}
	require.True(t, maskedAny)

	x := torch.Ones([]int64{100, 80})
	defer x.Free()
	y := a.Apply(x, rand.New(rand.NewPCG(5, 5)))
	defer y.Free()
	g := y.Float32s()
	for i := 0; i < 100; i++ {
		for m := 0; m < 80; m++ {
			require.Equal(t, tm1[i]*fm1[m], g[i*80+m])
		}
	}
	require.Equal(t, float32(1), x.Float32s()[0], "input untouched")
}
