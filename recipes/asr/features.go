package asr

import (
	"fmt"
	"math/rand/v2"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
)

// SampleRate is the rate the recipe's models hear: the corpus's.
const SampleRate = speech.SampleRate

// logFloor is added to mel energies before the natural log:
// logmel = ln(mel + logFloor). (Not Whisper's clamp-and-log10; the
// per-utterance normalisation that follows makes the base irrelevant.)
const logFloor = 1e-6

// normEps is added to the per-utterance standard deviation.
const normEps = 1e-5

// Featurizer turns 16 kHz samples into log-mel features with torch ops: a
// mel spectrogram (package audio: a periodic Hann window, the power
// spectrum of torch.stft with center=True and reflect padding, an HTK mel
// filterbank as torchaudio's melscale_fbanks with norm=None),
// ln(mel + LogFloor), and, when Normalize is set, per-utterance
// mean/variance normalisation of each mel bin over time.
type Featurizer struct {
	SampleRate int
	NFFT       int
	Hop        int
	NMels      int
	Normalize  bool // per-utterance mean/variance normalisation (default true)

	mel *audio.MelSpectrogram // (frames, NMels)
}

// NewFeaturizer builds a featurizer, e.g. NewFeaturizer(16000, 400, 160, 80)
// for 25 ms windows every 10 ms and 80 mel bins from 0 Hz to Nyquist.
func NewFeaturizer(sampleRate, nFFT, hop, nMels int) (*Featurizer, error) {
	if sampleRate <= 0 || nFFT < 2 || hop <= 0 || nMels <= 0 {
		return nil, fmt.Errorf("featurizer: bad parameters rate=%d nFFT=%d hop=%d mels=%d", sampleRate, nFFT, hop, nMels)
	}
	mel, err := audio.NewMelSpectrogram(audio.MelConfig{SampleRate: sampleRate, NFFT: nFFT, Hop: hop, Mels: nMels})
	if err != nil {
		return nil, fmt.Errorf("featurizer: %w", err)
	}
	return &Featurizer{SampleRate: sampleRate, NFFT: nFFT, Hop: hop, NMels: nMels, Normalize: true, mel: mel}, nil
}

// Close releases the featurizer's tensors.
func (f *Featurizer) Close() { f.mel.Close() }

// Frames is the number of feature frames for n samples (center=True).
func (f *Featurizer) Frames(n int) int { return f.mel.Frames(n) }

// LogMel returns ln(mel power + LogFloor), (T, NMels) float32, without
// normalisation.
func (f *Featurizer) LogMel(samples []float32) (*torch.Tensor, error) {
	return f.compute(samples, false)
}

// Features returns the model input for samples: LogMel, normalised per
// utterance when f.Normalize. The caller owns the (T, NMels) float32 tensor.
func (f *Featurizer) Features(samples []float32) (*torch.Tensor, error) {
	return f.compute(samples, f.Normalize)
}

func (f *Featurizer) compute(samples []float32, norm bool) (*torch.Tensor, error) {
	if len(samples) <= f.NFFT/2 {
		return nil, fmt.Errorf("featurizer: %d samples is too short (need more than %d for reflect padding)", len(samples), f.NFFT/2)
	}
	var out *torch.Tensor
	err := torch.Try(func() {
		out = torch.TidyTensor(func() *torch.Tensor {
			lm := audio.LogOffset(f.mel.Power(samples, 0), logFloor) // (T, M)
			if norm {
				mean := lm.MeanDim([]int64{0}, true)
				std := lm.Std([]int64{0}, 0, true).AddScalar(normEps)
				lm = lm.Sub(mean).Div(std)
			}
			return lm.Contiguous()
		})
	})
	if err != nil {
		return nil, fmt.Errorf("featurizer: %w", err)
	}
	return out, nil
}

// FeaturesFile reads a WAV file (see audio.ReadWAV: any format it decodes,
// resampled to 16 kHz mono) and returns its features.
func (f *Featurizer) FeaturesFile(path string) (*torch.Tensor, error) {
	if f.SampleRate != SampleRate {
		return nil, fmt.Errorf("featurizer is for %d Hz, WAV files are read at %d Hz", f.SampleRate, SampleRate)
	}
	s, err := audio.ReadWAV(path, SampleRate)
	if err != nil {
		return nil, err
	}
	feats, err := f.Features(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return feats, nil
}

// SpecAugment masks bands of mel bins and runs of frames (Park et al. 2019,
// without time warping). Masked values are set to 0, the mean of normalised
// features.
type SpecAugment struct {
	FreqMasks    int     // number of frequency masks
	MaxFreqWidth int     // each is 0..MaxFreqWidth mel bins wide
	TimeMasks    int     // number of time masks
	MaxTimeWidth int     // each is 0..MaxTimeWidth frames long ...
	MaxTimeFrac  float64 // ... and at most this fraction of the utterance (0: no cap)
}

// DefaultSpecAugment is two frequency masks of up to 15 bins and two time
// masks of up to 40 frames (at most 10% of the utterance each).
func DefaultSpecAugment() SpecAugment {
	return SpecAugment{FreqMasks: 2, MaxFreqWidth: 15, TimeMasks: 2, MaxTimeWidth: 40, MaxTimeFrac: 0.1}
}

// Masks draws the masks for a (frames, mels) input: 1 kept, 0 masked.
func (a SpecAugment) Masks(frames, mels int, r *rand.Rand) (time, freq []float32) {
	time, freq = ones(frames), ones(mels)
	mask := func(v []float32, n, width int) {
		for k := 0; k < n && len(v) > 0; k++ {
			w := r.IntN(max(0, min(width, len(v))) + 1)
			s := r.IntN(len(v) - w + 1)
			for i := s; i < s+w; i++ {
				v[i] = 0
			}
		}
	}
	mask(freq, a.FreqMasks, a.MaxFreqWidth)
	tw := a.MaxTimeWidth
	if a.MaxTimeFrac > 0 {
		tw = min(tw, int(a.MaxTimeFrac*float64(frames)))
	}
	mask(time, a.TimeMasks, tw)
	return time, freq
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// Apply returns a masked copy of feats (T, M), drawing masks from r.
func (a SpecAugment) Apply(feats *torch.Tensor, r *rand.Rand) *torch.Tensor {
	t, m := feats.Size(0), feats.Size(1)
	tm, fm := a.Masks(int(t), int(m), r)
	return torch.TidyTensor(func() *torch.Tensor {
		tt := torch.FromSlice(tm, []int64{t, 1})
		ft := torch.FromSlice(fm, []int64{1, m})
		return feats.Mul(tt).Mul(ft)
	})
}
