package ganvit

import (
	"fmt"
	"math"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/torch"
)

// SampleRate is the clips' rate: the seed's 22.05 kHz (librosa's default).
const SampleRate = 22050

// The seed's spectrogram parameters (librosa's defaults): 22.05 kHz, FFT
// 2048, hop 512, so 30 s are 1 + ⌊661500/512⌋ = 1292 frames.
const (
	NFFT = 2048
	Hop  = 512
	// topDB is the dynamic range kept below each clip's loudest bin.
	topDB = 80
)

// framesFor is the number of frames of a clip of seconds (center=True).
func framesFor(seconds float64) int64 { return 1 + int64(clipSamples(seconds))/Hop }

// secondsFor is the shortest clip length giving frames.
func secondsFor(frames int64) float64 { return float64((frames-1)*Hop) / SampleRate }

// Shape is a spectrogram's size: (1, Mels, Frames).
type Shape struct{ Mels, Frames int64 }

func (s Shape) String() string { return fmt.Sprintf("%d mels × %d frames", s.Mels, s.Frames) }

// Size is Mels × Frames.
func (s Shape) Size() int64 { return s.Mels * s.Frames }

// SampleBytes is what one sample of this shape takes as tensors: its
// spectrogram and CondDim conditions as float32, its label as int64.
func (s Shape) SampleBytes() int64 { return 4*s.Size() + 4*CondDim + 8 }

// Mel computes log-mel spectrograms as librosa's
// power_to_db(melspectrogram(y, sr=22050, n_fft=2048, hop_length=512,
// n_mels=M), ref=np.max, top_db=80) (Slaney mel scale and area
// normalisation; centred frames with reflect padding), scaled from
// [−80, 0] dB to [−1, 1], the generator's tanh range.
type Mel struct {
	Mels int64
	spec *audio.MelSpectrogram // (Mels, frames)
}

// NewMel builds the filterbank and window.
func NewMel(mels int64) (*Mel, error) {
	if mels < 8 || mels > 1024 {
		return nil, fmt.Errorf("mel: %d mel bins: want 8 to 1024", mels)
	}
	spec, err := audio.NewMelSpectrogram(audio.MelConfig{SampleRate: SampleRate, NFFT: NFFT, Hop: Hop, Mels: int(mels),
		Scale: audio.Slaney, Norm: audio.NormSlaney, MelsFirst: true})
	if err != nil {
		return nil, err
	}
	return &Mel{Mels: mels, spec: spec}, nil
}

// Close releases the tensors.
func (m *Mel) Close() { m.spec.Close() }

// Compute returns the scaled log-mel spectrogram of samples, the first
// frames frames of it (Mels × frames, row-major), and its Brightness. The
// clip must give at least frames frames.
func (m *Mel) Compute(samples []float32, frames int64) (spec []float32, brightness float64, err error) {
	if have := 1 + int64(len(samples))/Hop; have < frames {
		return nil, 0, fmt.Errorf("%d samples give %d frames, fewer than %d (%.2f s at %d Hz)", len(samples), have, frames, secondsFor(frames), SampleRate)
	}
	// Only the samples the frames need (plus the window's reach).
	n := min(int64(len(samples)), (frames-1)*Hop+NFFT/2+1)
	err = torch.Try(func() {
		torch.NoGrad(func() {
			torch.Tidy(func() {
				mel := m.spec.Power(samples[:n], int(frames)) // (M, frames)
				spec = audio.PowerToDB(mel, 1e-10, topDB).DivScalar(topDB / 2).AddScalar(1).Float32s()
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
