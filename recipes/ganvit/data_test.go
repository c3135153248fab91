package ganvit

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
)

// The log-mel spectrogram equals the same computation written in Python
// from librosa's definitions (filters.mel with htk=False, norm="slaney";
// power_to_db with ref=max, top_db=80) on torch.stft, within 1e-4 (the
// filterbank itself is checked in package audio); a sine peaks in the mel
// bin of its frequency, and a higher one is brighter.
func TestLogMelMatchesPython(t *testing.T) {
	const mels, frames = 64, 40
	n := (frames-1)*Hop + 100
	x := make([]float32, n)
	for i := range x {
		ti := float64(i) / SampleRate
		x[i] = float32(0.5*math.Sin(2*math.Pi*440*ti) + 0.2*math.Sin(2*math.Pi*3000*ti) + 0.05*math.Sin(float64(i)*0.37))
	}
	m, err := NewMel(mels)
	require.NoError(t, err)
	defer m.Close()
	spec, _, err := m.Compute(x, frames)
	require.NoError(t, err)
	require.Len(t, spec, mels*frames)
	var want struct{ Spec []float64 }
	pyref.Run(t, `
		import numpy as np
		sr, n_fft, hop, n_mels = 22050, 2048, 512, inp["mels"]
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
		fb = torch.tensor(weights, dtype=torch.float32)
		x = torch.tensor(inp["x"], dtype=torch.float32)
		S = torch.stft(x, n_fft, hop, window=torch.hann_window(n_fft), center=True, pad_mode="reflect", return_complex=True).abs() ** 2
		mel = fb @ S[:, :inp["frames"]]
		db = 10 * torch.log10(torch.clamp(mel, min=1e-10))
		db = torch.maximum(db - db.max(), torch.tensor(-80.0))
		emit({"Spec": (db / 40 + 1).flatten().tolist()})
	`, map[string]any{"x": x, "mels": mels, "frames": frames}, &want)
	var worst float64
	for i, w := range want.Spec {
		worst = math.Max(worst, math.Abs(float64(spec[i])-w))
	}
	t.Logf("log-mel (64 × 40) max |Go − Python| %.2e", worst)
	require.Less(t, worst, 1e-4)

	// A pure tone lands in its mel bin; a higher one is brighter.
	tone := func(f float64) ([]float32, float64) {
		y := make([]float32, n)
		for i := range y {
			y[i] = float32(math.Sin(2 * math.Pi * f * float64(i) / SampleRate))
		}
		s, b, err := m.Compute(y, frames)
		require.NoError(t, err)
		return s, b
	}
	s, lo := tone(1000)
	best, bestV := 0, float32(-2)
	for k := 0; k < mels; k++ {
		if v := s[k*frames+frames/2]; v > bestV {
			best, bestV = k, v
		}
	}
	centre := func(k int) float64 { // the filter's centre frequency
		return audio.Slaney.MelToHz(audio.Slaney.HzToMel(SampleRate/2) * float64(k+1) / float64(mels+1))
	}
	require.InDelta(t, 1000, centre(best), 120, "1 kHz lands in mel bin %d (centre %.0f Hz)", best, centre(best))
	_, hi := tone(6000)
	require.Greater(t, hi, lo+0.2)
	_, _, err = m.Compute(x[:1000], frames)
	require.Error(t, err, "too short for the frames")
}

// TestReadClipRejectsBadFiles: clips are read with audio.ReadWAV at 22.05
// kHz; a file it cannot decode is a user's *audio.Error wrapping
// audio.ErrFormat that names the file.
func TestReadClipRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.wav")
	samples := []int16{0, 16384, -32768, 32767, 100}
	require.NoError(t, os.WriteFile(good, audio.EncodeWAV(samples, SampleRate), 0o644))
	x, err := audio.ReadWAV(good, SampleRate)
	require.NoError(t, err)
	require.Equal(t, []float32{0, 0.5, -1, 32767.0 / 32768, 100.0 / 32768}, x)
	// Another rate is resampled to the clips' rate.
	other := filepath.Join(dir, "16k.wav")
	require.NoError(t, os.WriteFile(other, audio.EncodeWAV(samples, 16000), 0o644))
	x, err = audio.ReadWAV(other, SampleRate)
	require.NoError(t, err)
	require.Len(t, x, (5*SampleRate+16000-1)/16000)

	alaw := audio.EncodeWAV(samples, SampleRate)
	binary.LittleEndian.PutUint16(alaw[20:], 6)
	for _, c := range []struct {
		name, want string
		data       []byte
	}{
		{"empty", "not a RIFF/WAVE file", nil},
		{"text", "not a RIFF/WAVE file", []byte("this is not audio at all, no")},
		{"truncated", "truncated fmt chunk", audio.EncodeWAV(samples, SampleRate)[:30]},
		{"A-law", "format code 6 (A-law); torchfit decodes PCM and IEEE float (convert with: sox", alaw},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name+".wav")
			require.NoError(t, os.WriteFile(p, c.data, 0o644))
			_, err := audio.ReadWAV(p, SampleRate)
			var ae *audio.Error
			require.ErrorAs(t, err, &ae)
			require.ErrorIs(t, err, audio.ErrFormat)
			require.True(t, recipes.IsUserError(err))
			require.ErrorContains(t, err, c.want)
			require.Equal(t, p, ae.Path)
		})
	}
	_, err = audio.ReadWAV(filepath.Join(dir, "missing.wav"), SampleRate)
	require.True(t, recipes.IsUserError(err))
}

// Generation is deterministic and resumable; the manifest is balanced and
// split by position; every clip decodes at the planned length.
func TestGenerateDeterministicAndResumable(t *testing.T) {
	dir := testData(t)
	clips, err := ReadManifest(dir)
	require.NoError(t, err)
	require.Len(t, clips, 40)
	counts := map[string]map[string]int{}
	for _, c := range clips {
		if counts[c.Split] == nil {
			counts[c.Split] = map[string]int{}
		}
		counts[c.Split][c.Genre]++
		x, err := audio.ReadWAV(filepath.Join(dir, c.Path), SampleRate)
		require.NoError(t, err)
		require.Len(t, x, SampleRate)
		r := tempoRange[c.Genre]
		require.True(t, c.Tempo >= r[0] && c.Tempo <= r[1], "%s tempo %v", c.Genre, c.Tempo)
	}
	for _, g := range Genres {
		require.Equal(t, 8, counts[SplitTrain][g])
		require.Equal(t, 1, counts[SplitValid][g])
		require.Equal(t, 1, counts[SplitTest][g])
	}
	// Again into a copy: nothing to do; a deleted clip is made again,
	// byte for byte the same.
	cp := copyData(t)
	victim := filepath.Join(cp, clips[5].Path)
	before, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.NoError(t, os.Remove(victim))
	st, err := Generate(context.Background(), GenerateConfig{OutDir: cp, Clips: 40, Seconds: 1, Seed: 3})
	require.NoError(t, err)
	require.Equal(t, 1, st.Synthesised)
	require.Equal(t, 39, st.Skipped)
	after, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.True(t, bytes.Equal(before, after), "the same bytes")
	// Another seed names other files.
	other := planClips(GenerateConfig{Clips: 40, Seconds: 1, Seed: 4})
	require.NotEqual(t, clips[5].Path, other[5].Path)

	_, err = Generate(context.Background(), GenerateConfig{OutDir: t.TempDir(), Clips: 2, Seconds: 1})
	require.ErrorContains(t, err, "at least one per genre")
}

// Loading spectrograms: shapes, conditions, the host/device split; a
// corrupt clip is an *audio.Error naming it.
func TestLoadSpecs(t *testing.T) {
	dir := testData(t)
	s, err := LoadSpecs(context.Background(), dir, SplitTrain, Shape{16, 44}, 2)
	require.NoError(t, err)
	require.Equal(t, 32, s.Len())
	for i, d := range s.Data {
		require.Len(t, d, 16*44)
		require.True(t, s.Brightness[i] > 0 && s.Brightness[i] < 1)
		for _, v := range d {
			require.True(t, v >= -1 && v <= 1)
		}
	}
	n := NormOf(s)
	n.Apply(s)
	var m float64
	for _, c := range s.Cond {
		m += float64(c[0])
	}
	require.InDelta(t, 0, m/32, 1e-5, "normalised tempo has mean 0")

	// Host data set and device copy give the same batches.
	torch.CollectGarbage() // earlier tests' garbage is not freed mid-measurement
	before := torch.MustMemoryStats(torch.CPU).Allocated
	dd, err := s.OnDevice(torch.CPU)
	require.NoError(t, err)
	require.Equal(t, s.Bytes(), dd.Bytes)
	require.Equal(t, dd.Bytes, torch.MustMemoryStats(torch.CPU).Allocated-before, "the counter sees the whole set")
	host, err := Loader(s, nil, torch.CPU, 5, true, 9, 2)
	require.NoError(t, err)
	dev, err := Loader(s, dd, torch.CPU, 5, true, 9, 0)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		a, err := host.Next(context.Background())
		require.NoError(t, err)
		b, err := dev.Next(context.Background())
		require.NoError(t, err)
		for _, k := range []string{"spec", "cond", "label"} {
			require.True(t, a.Fields[k].Equal(b.Fields[k]), k)
		}
		a.Free()
		b.Free()
	}
	host.Close()
	dev.Close()
	dd.Free()
	require.Equal(t, before, torch.MustMemoryStats(torch.CPU).Allocated)

	// Too short for the shape (issue 24, item 11: the data set, not the
	// first clip read, and the --seconds to make it with), and a corrupt
	// clip.
	_, err = LoadSpecs(context.Background(), dir, SplitTest, Shape{16, 1292}, 2)
	var de *DataError
	require.ErrorAs(t, err, &de)
	require.ErrorIs(t, err, ErrClipsTooShort)
	require.ErrorContains(t, err, "--seconds 30")
	require.True(t, recipes.IsUserError(err))
	var ae *audio.Error
	cp := copyData(t)
	clips, err := ReadManifest(cp)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(cp, clips[3].Path), []byte("RIFF\x10\x00\x00\x00WAVEjunk"), 0o644))
	_, err = LoadSpecs(context.Background(), cp, "", Shape{16, 44}, 2)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, filepath.Join(cp, clips[3].Path), ae.Path)
	require.True(t, errors.Is(err, audio.ErrFormat))
	require.True(t, recipes.IsUserError(err))
	_, err = LoadSpecs(context.Background(), t.TempDir(), "", Shape{16, 44}, 2)
	require.ErrorContains(t, err, "torchfit ganvit data --out")
	require.True(t, recipes.IsUserError(err))
}
