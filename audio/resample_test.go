package audio

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
)

// pyResample reads a PCM WAV file with Python's wave module, averages its
// channels and resamples it to 16 kHz with the kernel of
// torchaudio.functional.resample(..., lowpass_filter_width=32,
// rolloff=0.945, resampling_method="sinc_interp_kaiser", beta=10), written
// out in torch (float64) as torchaudio 0.13 computes it.
const pyResample = `
import wave
import numpy as np
def resample(path):
    with wave.open(path) as f:
        ch, sw, rate, n = f.getnchannels(), f.getsampwidth(), f.getframerate(), f.getnframes()
        raw = f.readframes(n)
    assert sw == 2
    x = torch.from_numpy(np.frombuffer(raw, dtype="<i2").astype(np.float64).reshape(-1, ch) / 32768).mean(dim=1)
    orig, new, lpw, rolloff, beta = rate, 16000, 32, 0.945, 10.0
    g = math.gcd(orig, new); orig //= g; new //= g
    base = min(orig, new) * rolloff
    width = math.ceil(lpw * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    t = torch.arange(0, -new, -1, dtype=torch.float64)[:, None, None] / new + idx
    t *= base
    t = t.clamp(-lpw, lpw)
    b = torch.tensor(beta, dtype=torch.float64)
    window = torch.i0(b * torch.sqrt(1 - (t / lpw) ** 2)) / torch.i0(b)
    t *= math.pi
    kernel = torch.where(t == 0, torch.tensor(1.0, dtype=torch.float64), t.sin() / t) * window * (base / orig)
    length = x.shape[-1]
    y = torch.nn.functional.conv1d(torch.nn.functional.pad(x[None], (width, width + orig))[:, None], kernel, stride=orig)
    return y.transpose(1, 2).reshape(-1)[: math.ceil(new * length / orig)].tolist()
emit([resample(p) for p in inp["paths"]])
`

// TestResampleMatchesPython: 44.1 kHz stereo, 48 kHz, 22.05 kHz and 8 kHz
// files decode to what the torchaudio kernel computed in Python gives.
func TestResampleMatchesPython(t *testing.T) {
	if !pyref.Available() {
		t.Fatal("Python PyTorch is missing at " + pyref.Python + ": run 'make deps'")
	}
	dir := t.TempDir()
	cases := []struct{ rate, ch int }{{44100, 2}, {48000, 1}, {22050, 1}, {8000, 1}}
	var paths []string
	for _, tc := range cases {
		path := filepath.Join(dir, fmt.Sprintf("%d.wav", tc.rate))
		// Two channels of different tones and noise, so the mean matters.
		sox(t, "-n", "-r", fmt.Sprint(tc.rate), "-c", fmt.Sprint(tc.ch), "-b", "16", path,
			"synth", "0.6", "sine", "440", "sine", "3100", "synth", "0.6", "whitenoise", "mix", "vol", "0.4")
		paths = append(paths, path)
	}
	var want [][]float64
	pyref.Run(t, pyResample, map[string]any{"paths": paths}, &want)
	require.Len(t, want, len(cases))
	for k, tc := range cases {
		got, err := ReadWAV(paths[k], speechRate)
		require.NoError(t, err)
		require.Len(t, got, len(want[k]))
		var worst float64
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i])-want[k][i]))
		}
		t.Logf("%d Hz, %d channel(s) → 16 kHz, %d samples: max |Go − Python| %.2e", tc.rate, tc.ch, len(got), worst)
		require.Less(t, worst, 1e-6, "%d Hz", tc.rate)
	}
}

// TestResampleMatchesSox compares with `sox in.wav -r 16000` (sox's own
// linear-phase filter, so only close): interior samples of a two-tone
// signal within 2e-5.
func TestResampleMatchesSox(t *testing.T) {
	dir := t.TempDir()
	for _, rate := range []int{44100, 48000, 8000} {
		in := filepath.Join(dir, fmt.Sprintf("in%d.wav", rate))
		out := filepath.Join(dir, fmt.Sprintf("out%d.wav", rate))
		raw := filepath.Join(dir, "tone.f64")
		writeRaw(t, raw, testTone(rate, rate))
		sox(t, "-t", "f64", "-r", fmt.Sprint(rate), "-c", "1", raw, "-b", "24", in)
		sox(t, in, "-r", "16000", "-b", "32", "-e", "floating-point", out)
		got, err := ReadWAV(in, speechRate)
		require.NoError(t, err)
		ref, err := ReadWAV(out, speechRate) // 16 kHz float: decoded as is
		require.NoError(t, err)
		require.Len(t, got, len(ref))
		var worst float64
		for i := 400; i < len(got)-400; i++ {
			worst = max(worst, math.Abs(float64(got[i]-ref[i])))
		}
		t.Logf("%d Hz: max |Go − sox| %.2e", rate, worst)
		require.Less(t, worst, 2e-5)
	}
}

// level is the RMS of x (edges skipped) relative to a sine of amplitude a, in dB.
func level(x []float32, a float64) float64 {
	var s float64
	for _, v := range x[400 : len(x)-400] {
		s += float64(v) * float64(v)
	}
	return 20 * math.Log10(math.Sqrt(s/float64(len(x)-800))/(a/math.Sqrt2))
}

func sine(rate int, f float64, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(0.5 * math.Sin(2*math.Pi*f*float64(i)/float64(rate)))
	}
	return x
}

// TestResampleNoAliasing: tones above 8 kHz vanish instead of folding back
// below it; tones in the passband keep their level.
func TestResampleNoAliasing(t *testing.T) {
	for _, tc := range []struct {
		rate     int
		f        float64
		min, max float64 // dB
	}{
		{44100, 12000, -300, -90}, // would alias to 4 kHz
		{48000, 9000, -300, -90},  // to 7 kHz
		{48000, 8500, -300, -90},  // to 7.5 kHz
		{44100, 10000, -300, -90}, // to 6 kHz
		{48000, 7000, -0.1, 0.1},
		{44100, 1000, -0.01, 0.01},
		{8000, 3000, -0.1, 0.1},
	} {
		out, err := Resample(sine(tc.rate, tc.f, tc.rate), tc.rate, speechRate)
		require.NoError(t, err)
		db := level(out, 0.5)
		t.Logf("%g Hz tone at %d Hz → 16 kHz: %.1f dB", tc.f, tc.rate, db)
		require.True(t, db >= tc.min && db <= tc.max, "%g Hz at %d Hz: %.1f dB, want [%g, %g]", tc.f, tc.rate, db, tc.min, tc.max)
	}
}

// TestResamplerStreams: writing the input in pieces and draining into
// small buffers gives the whole-signal output exactly.
func TestResamplerStreams(t *testing.T) {
	x := make([]float32, 30_011)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.3)
	}
	for _, rate := range []int{44100, 8000, 22050, 11025} {
		whole, err := Resample(x, rate, speechRate)
		require.NoError(t, err)
		rs, err := NewResampler(rate, speechRate)
		require.NoError(t, err)
		var got []float32
		buf := make([]float32, 97)
		for p := 0; p < len(x); {
			n := min(len(x)-p, 1+r.IntN(3000))
			rs.Write(x[p : p+n])
			p += n
			for k := rs.Drain(buf); k > 0; k = rs.Drain(buf) {
				got = append(got, buf[:k]...)
			}
		}
		rs.Flush()
		for k := rs.Drain(buf); k > 0; k = rs.Drain(buf) {
			got = append(got, buf[:k]...)
		}
		require.Equal(t, whole, got, "%d Hz", rate)
		require.Len(t, got, rs.OutputLen(len(x)))
	}
}
