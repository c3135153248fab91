package ganvit

import (
	"fmt"
	"math"

	"github.com/torchfit/torchfit/torch"
)

// The seed's spectrogram parameters (librosa's defaults): 22.05 kHz, FFT
// 2048, hop 512, so 30 s are 1 + ⌊661500/512⌋ = 1292 frames.
const (
	NFFT = 2048
	Hop  = 512
	// TopDB is the dynamic range kept below each clip's loudest bin.
	TopDB = 80
)

// FramesFor is the number of frames of a clip of seconds (center=True).
func FramesFor(seconds float64) int64 { return 1 + int64(clipSamples(seconds))/Hop }

// SecondsFor is the shortest clip length giving frames.
func SecondsFor(frames int64) float64 { return float64((frames-1)*Hop) / SampleRate }

// Shape is a spectrogram's size: (1, Mels, Frames).
type Shape struct{ Mels, Frames int64 }

func (s Shape) String() string { return fmt.Sprintf("%d mels × %d frames", s.Mels, s.Frames) }

// Size is Mels × Frames.
func (s Shape) Size() int64 { return s.Mels * s.Frames }

// Mel computes log-mel spectrograms as librosa's
// power_to_db(melspectrogram(y, sr=22050, n_fft=2048, hop_length=512,
// n_mels=M), ref=np.max, top_db=80) (Slaney mel scale and area
// normalisation; centred frames with reflect padding), scaled from
// [−80, 0] dB to [−1, 1], the generator's tanh range.
type Mel struct {
	Mels   int64
	window *torch.Tensor
	fbank  *torch.Tensor // (Mels, NFFT/2+1)
}

// NewMel builds the filterbank and window.
func NewMel(mels int64) (*Mel, error) {
	if mels < 8 || mels > 1024 {
		return nil, fmt.Errorf("mel: %d mel bins: want 8 to 1024", mels)
	}
	fb := SlaneyFilterbank(SampleRate, NFFT, int(mels), 0, SampleRate/2)
	m := &Mel{Mels: mels}
	err := torch.Try(func() {
		m.window = torch.HannWindow(NFFT, true).Keep()
		m.fbank = torch.FromSlice(fb, []int64{mels, NFFT/2 + 1}).Keep()
	})
	return m, err
}

// Close releases the tensors.
func (m *Mel) Close() {
	m.window.Free()
	m.fbank.Free()
}

// Compute returns the scaled log-mel spectrogram of samples, the first
// frames frames of it (Mels × frames, row-major), and its Brightness. The
// clip must give at least frames frames.
func (m *Mel) Compute(samples []float32, frames int64) (spec []float32, brightness float64, err error) {
	if have := 1 + int64(len(samples))/Hop; have < frames {
		return nil, 0, fmt.Errorf("%d samples give %d frames, fewer than %d (%.2f s at %d Hz)", len(samples), have, frames, SecondsFor(frames), SampleRate)
	}
	// Only the samples the frames need (plus the window's reach).
	n := min(int64(len(samples)), (frames-1)*Hop+NFFT/2+1)
	err = torch.Try(func() {
		torch.NoGrad(func() {
			torch.Tidy(func() {
				x := torch.FromSlice(samples[:n], []int64{1, n})
				p := torch.Stft(x, NFFT, Hop, NFFT, m.window, 2).Squeeze()           // (F, T)
				mel := m.fbank.Matmul(p.Narrow(1, 0, frames).ToDType(torch.Float32)) // (M, frames)
				db := mel.ClampMin(1e-10).Log().MulScalar(10 / math.Ln10)
				db = db.SubScalar(db.Max().Item()).ClampMin(-TopDB)
				spec = db.DivScalar(TopDB / 2).AddScalar(1).Float32s()
			})
		})
	})
	if err != nil {
		return nil, 0, err
	}
	return spec, Brightness(spec, Shape{m.Mels, frames}), nil
}

// Brightness is a spectrogram's spectral centroid on the mel axis as a
// fraction of the mel range, Σ m·P(m) / Σ P(m) / (Mels − 1), where P is
// the time-averaged mel power recovered from the scaled log-mel values
// (P = 10^(dB/10), dB = 40·(v − 1)). It is computed the same way for real
// and generated spectrograms.
func Brightness(spec []float32, s Shape) float64 {
	var num, den float64
	t := int(s.Frames)
	for m := 0; m < int(s.Mels); m++ {
		var p float64
		for _, v := range spec[m*t : (m+1)*t] {
			p += math.Pow(10, 4*(float64(v)-1))
		}
		num += float64(m) * p
		den += p
	}
	if den == 0 || s.Mels < 2 {
		return 0
	}
	return num / den / float64(s.Mels-1)
}

// SlaneyFilterbank is librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax)
// with its defaults (htk=False: linear below 1 kHz, logarithmic above;
// norm="slaney": each triangle scaled to unit area), (nMels, nFFT/2+1)
// row-major, computed in float64 and rounded to float32.
func SlaneyFilterbank(sr, nFFT, nMels int, fMin, fMax float64) []float32 {
	nFreqs := nFFT/2 + 1
	melPts := make([]float64, nMels+2)
	lo, hi := HzToMel(fMin), HzToMel(fMax)
	for i := range melPts {
		melPts[i] = MelToHz(lo + (hi-lo)*float64(i)/float64(nMels+1))
	}
	out := make([]float32, nMels*nFreqs)
	for i := 0; i < nMels; i++ {
		enorm := 2 / (melPts[i+2] - melPts[i])
		for k := 0; k < nFreqs; k++ {
			f := float64(sr) / 2 * float64(k) / float64(nFreqs-1)
			lower := (f - melPts[i]) / (melPts[i+1] - melPts[i])
			upper := (melPts[i+2] - f) / (melPts[i+2] - melPts[i+1])
			out[i*nFreqs+k] = float32(math.Max(0, math.Min(lower, upper)) * enorm)
		}
	}
	return out
}

// Slaney's mel scale (librosa's default): 3 mels per 200 Hz below 1 kHz,
// then 27 mels per factor 6.4.
const (
	melFSP     = 200.0 / 3
	melMinLog  = 1000.0
	melLogStep = 0.06875177742094912 // ln(6.4) / 27
)

// HzToMel is librosa.hz_to_mel (htk=False).
func HzToMel(f float64) float64 {
	if f < melMinLog {
		return f / melFSP
	}
	return melMinLog/melFSP + math.Log(f/melMinLog)/melLogStep
}

// MelToHz is librosa.mel_to_hz (htk=False).
func MelToHz(m float64) float64 {
	if m < melMinLog/melFSP {
		return m * melFSP
	}
	return melMinLog * math.Exp(melLogStep*(m-melMinLog/melFSP))
}
