package audio

import (
	"fmt"
	"math"

	"github.com/torchfit/torchfit/torch"
)

// MelScale is a mapping between frequency in Hz and mels.
type MelScale int

const (
	// HTK is the scale of the HTK toolkit and torchaudio's default:
	// m = 2595·log10(1 + f/700).
	HTK MelScale = iota
	// Slaney is the scale of Slaney's Auditory Toolbox and librosa's
	// default: linear below 1 kHz (3 mels per 200 Hz), logarithmic above
	// (27 mels per factor 6.4).
	Slaney
)

// Slaney's scale: 3 mels per 200 Hz below 1 kHz, then 27 mels per factor
// 6.4.
const (
	slaneyFSP     = 200.0 / 3
	slaneyMinLog  = 1000.0
	slaneyLogStep = 0.06875177742094912 // ln(6.4) / 27
)

// HzToMel converts a frequency to mels (librosa.hz_to_mel, and
// torchaudio's _hz_to_mel).
func (s MelScale) HzToMel(f float64) float64 {
	if s == HTK {
		return 2595 * math.Log10(1+f/700)
	}
	if f < slaneyMinLog {
		return f / slaneyFSP
	}
	return slaneyMinLog/slaneyFSP + math.Log(f/slaneyMinLog)/slaneyLogStep
}

// MelToHz converts mels to a frequency, the inverse of HzToMel.
func (s MelScale) MelToHz(m float64) float64 {
	if s == HTK {
		return 700 * (math.Pow(10, m/2595) - 1)
	}
	if m < slaneyMinLog/slaneyFSP {
		return m * slaneyFSP
	}
	return slaneyMinLog * math.Exp(slaneyLogStep*(m-slaneyMinLog/slaneyFSP))
}

// MelNorm is how a mel filterbank's triangles are scaled.
type MelNorm int

const (
	// NormNone leaves every triangle with a peak of 1 (norm=None).
	NormNone MelNorm = iota
	// NormSlaney scales each triangle to unit area, 2/(f[m+2] − f[m])
	// (norm="slaney").
	NormSlaney
)

// MelConfig describes a mel spectrogram.
type MelConfig struct {
	SampleRate int // Hz
	NFFT       int // FFT size and window length
	Hop        int // samples from one frame to the next
	Mels       int // mel bins
	// FMin and FMax bound the filterbank in Hz; an FMax of 0 is the
	// Nyquist frequency, SampleRate/2.
	FMin, FMax float64
	Scale      MelScale
	Norm       MelNorm
	// MelsFirst makes spectrograms (Mels, frames), computed as filterbank
	// × power spectrum (librosa's order), instead of (frames, Mels),
	// power spectrumᵀ × filterbank (torchaudio's). The two differ in the
	// rounding of the product.
	MelsFirst bool
}

func (c MelConfig) fMax() float64 {
	if c.FMax == 0 {
		return float64(c.SampleRate) / 2
	}
	return c.FMax
}

// MelFilterbank returns c's triangular mel filterbank, computed in float64
// and rounded to float32, in the layout a MelSpectrogram multiplies with:
// (NFFT/2+1, Mels) row-major, or (Mels, NFFT/2+1) with c.MelsFirst. The
// NFFT/2+1 frequencies are spaced evenly from 0 Hz to SampleRate/2, the
// Mels+2 band edges evenly in mels from FMin to FMax, and filter m rises
// from edge m to edge m+1 and falls to edge m+2. With the HTK scale and
// NormNone it is torchaudio.functional.melscale_fbanks(..., norm=None,
// mel_scale="htk"); with the Slaney scale and NormSlaney, the transpose of
// librosa.filters.mel's defaults.
func MelFilterbank(c MelConfig) []float32 {
	nFreqs := c.NFFT/2 + 1
	nyq := float64(c.SampleRate) / 2
	lo, hi := c.Scale.HzToMel(c.FMin), c.Scale.HzToMel(c.fMax())
	edges := make([]float64, c.Mels+2)
	for i := range edges {
		edges[i] = c.Scale.MelToHz(lo + (hi-lo)*float64(i)/float64(c.Mels+1))
	}
	out := make([]float32, nFreqs*c.Mels)
	for k := range nFreqs {
		var f float64
		if nFreqs > 1 {
			f = nyq * float64(k) / float64(nFreqs-1)
		}
		for m := range c.Mels {
			down := (f - edges[m]) / (edges[m+1] - edges[m])
			up := (edges[m+2] - f) / (edges[m+2] - edges[m+1])
			w := max(0, min(down, up))
			if c.Norm == NormSlaney {
				w *= 2 / (edges[m+2] - edges[m])
			}
			if c.MelsFirst {
				out[m*nFreqs+k] = float32(w)
			} else {
				out[k*c.Mels+m] = float32(w)
			}
		}
	}
	return out
}

// A MelSpectrogram computes mel power spectrograms with torch ops: the
// power spectrum of torch.stft with a periodic Hann window of NFFT
// samples (center=True, reflect padding), times MelFilterbank. Its methods
// other than Close and Frames run tensor math and panic with *torch.Error;
// call them on libtorch's thread, inside torch.Try.
type MelSpectrogram struct {
	Config MelConfig

	window *torch.Tensor // (NFFT)
	fbank  *torch.Tensor // as MelFilterbank lays it out
}

// NewMelSpectrogram builds c's window and filterbank tensors.
func NewMelSpectrogram(c MelConfig) (*MelSpectrogram, error) {
	if c.SampleRate <= 0 || c.NFFT < 2 || c.Hop <= 0 || c.Mels <= 0 || c.FMin < 0 || c.fMax() <= c.FMin {
		return nil, fmt.Errorf("mel spectrogram: bad parameters rate=%d nFFT=%d hop=%d mels=%d fMin=%g fMax=%g",
			c.SampleRate, c.NFFT, c.Hop, c.Mels, c.FMin, c.FMax)
	}
	shape := []int64{int64(c.NFFT/2 + 1), int64(c.Mels)}
	if c.MelsFirst {
		shape[0], shape[1] = shape[1], shape[0]
	}
	fb := MelFilterbank(c)
	m := &MelSpectrogram{Config: c}
	err := torch.Try(func() {
		m.window = torch.HannWindow(int64(c.NFFT), true).Keep()
		m.fbank = torch.FromSlice(fb, shape).Keep()
	})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("mel spectrogram: %w", err)
	}
	return m, nil
}

// Close releases the tensors.
func (m *MelSpectrogram) Close() {
	m.window.Free()
	m.fbank.Free()
}

// Frames is the number of frames of n samples: 1 + n/Hop.
func (m *MelSpectrogram) Frames(n int) int { return 1 + n/m.Config.Hop }

// Window returns the analysis window, (NFFT). It belongs to m.
func (m *MelSpectrogram) Window() *torch.Tensor { return m.window }

// Filterbank returns the filterbank tensor, laid out as MelFilterbank
// does. It belongs to m.
func (m *MelSpectrogram) Filterbank() *torch.Tensor { return m.fbank }

// Power returns the mel power spectrogram of samples, which must be longer
// than NFFT/2 (reflect padding): (frames, Mels) float32, or (Mels, frames)
// with MelsFirst. frames > 0 keeps the first frames frames of the power
// spectrum before the product (at most Frames(len(samples))); 0 keeps
// them all.
func (m *MelSpectrogram) Power(samples []float32, frames int) *torch.Tensor {
	c := m.Config
	return torch.TidyTensor(func() *torch.Tensor {
		x := torch.FromSlice(samples, []int64{int64(len(samples))})
		spec := torch.Stft(x, int64(c.NFFT), int64(c.Hop), int64(c.NFFT), m.window, 2) // (F, T)
		if frames > 0 {
			spec = spec.Narrow(1, 0, int64(frames))
		}
		if c.MelsFirst {
			return m.fbank.Matmul(spec)
		}
		return spec.T().Matmul(m.fbank)
	})
}

// LogOffset returns ln(mel + offset).
func LogOffset(mel *torch.Tensor, offset float64) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor { return mel.AddScalar(offset).Log() })
}

// LogClamped returns ln(max(mel, floor)).
func LogClamped(mel *torch.Tensor, floor float64) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor { return mel.ClampMin(floor).Log() })
}

// PowerToDB returns librosa.power_to_db(mel, ref=np.max, amin=amin,
// top_db=topDB): 10·log10(max(mel, amin)) less its maximum, clipped at
// −topDB, so in [−topDB, 0].
func PowerToDB(mel *torch.Tensor, amin, topDB float64) *torch.Tensor {
	return torch.TidyTensor(func() *torch.Tensor {
		db := mel.ClampMin(amin).Log().MulScalar(10 / math.Ln10)
		return db.SubScalar(db.Max().Item()).ClampMin(-topDB)
	})
}
