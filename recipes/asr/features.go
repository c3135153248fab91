package asr

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/torchfit/torchfit/torch"
)

// LogFloor is added to mel energies before the natural log:
// logmel = ln(mel + LogFloor). (Not Whisper's clamp-and-log10; the
// per-utterance normalisation that follows makes the base irrelevant.)
const LogFloor = 1e-6

// NormEps is added to the per-utterance standard deviation.
const NormEps = 1e-5

// Featurizer turns 16 kHz samples into log-mel features with torch ops: a
// periodic Hann window, the power spectrum of torch.stft (center=True,
// reflect padding), an HTK mel filterbank (torchaudio's melscale_fbanks,
// norm=None), ln(mel + LogFloor), and, when Normalize is set, per-utterance
// mean/variance normalisation of each mel bin over time.
type Featurizer struct {
	SampleRate int
	NFFT       int
	Hop        int
	NMels      int
	Normalize  bool // per-utterance mean/variance normalisation (default true)

	window *torch.Tensor // (NFFT)
	fbank  *torch.Tensor // (NFFT/2+1, NMels)
}

// NewFeaturizer builds a featurizer, e.g. NewFeaturizer(16000, 400, 160, 80)
// for 25 ms windows every 10 ms and 80 mel bins from 0 Hz to Nyquist.
func NewFeaturizer(sampleRate, nFFT, hop, nMels int) (*Featurizer, error) {
	if sampleRate <= 0 || nFFT < 2 || hop <= 0 || nMels <= 0 {
		return nil, fmt.Errorf("featurizer: bad parameters rate=%d nFFT=%d hop=%d mels=%d", sampleRate, nFFT, hop, nMels)
	}
	nFreqs := nFFT/2 + 1
	fb := MelFilterbank(nFreqs, 0, float64(sampleRate)/2, nMels, sampleRate)
	f := &Featurizer{SampleRate: sampleRate, NFFT: nFFT, Hop: hop, NMels: nMels, Normalize: true}
	err := torch.Try(func() {
		f.window = torch.HannWindow(int64(nFFT), true).Keep()
		f.fbank = torch.FromSlice(fb, []int64{int64(nFreqs), int64(nMels)}).Keep()
	})
	if err != nil {
		return nil, fmt.Errorf("featurizer: %w", err)
	}
	return f, nil
}

// Close releases the featurizer's tensors.
func (f *Featurizer) Close() {
	f.window.Free()
	f.fbank.Free()
}

// Frames is the number of feature frames for n samples (center=True).
func (f *Featurizer) Frames(n int) int { return 1 + n/f.Hop }

// Filterbank returns a copy of the (NFFT/2+1, NMels) filterbank tensor.
func (f *Featurizer) Filterbank() *torch.Tensor { return f.fbank.Clone() }

// hzToMel and melToHz are the HTK mel scale.
func hzToMel(f float64) float64 { return 2595 * math.Log10(1+f/700) }
func melToHz(m float64) float64 { return 700 * (math.Pow(10, m/2595) - 1) }

// MelFilterbank returns the (nFreqs, nMels) triangular filterbank, row-major,
// computed as torchaudio.functional.melscale_fbanks(nFreqs, fMin, fMax,
// nMels, sampleRate, norm=None, mel_scale="htk") does (in float64, then
// rounded to float32).
func MelFilterbank(nFreqs int, fMin, fMax float64, nMels, sampleRate int) []float32 {
	allFreqs := make([]float64, nFreqs) // linspace(0, sampleRate//2, nFreqs)
	nyq := float64(sampleRate / 2)
	for i := range allFreqs {
		if nFreqs > 1 {
			allFreqs[i] = nyq * float64(i) / float64(nFreqs-1)
		}
	}
	mMin, mMax := hzToMel(fMin), hzToMel(fMax)
	fPts := make([]float64, nMels+2)
	for i := range fPts {
		fPts[i] = melToHz(mMin + (mMax-mMin)*float64(i)/float64(nMels+1))
	}
	out := make([]float32, nFreqs*nMels)
	for i, fr := range allFreqs {
		for m := 0; m < nMels; m++ {
			down := (fr - fPts[m]) / (fPts[m+1] - fPts[m])
			up := (fPts[m+2] - fr) / (fPts[m+2] - fPts[m+1])
			out[i*nMels+m] = float32(max(0, min(down, up)))
		}
	}
	return out
}

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
			x := torch.FromSlice(samples, []int64{int64(len(samples))})
			spec := torch.Stft(x, int64(f.NFFT), int64(f.Hop), int64(f.NFFT), f.window, 2) // (F, T)
			mel := spec.T().Matmul(f.fbank)                                                // (T, M)
			lm := mel.AddScalar(LogFloor).Log()
			if norm {
				mean := lm.MeanDim([]int64{0}, true)
				std := lm.Std([]int64{0}, 0, true).AddScalar(NormEps)
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

// FeaturesFile reads a WAV file (see ReadWAV: any format it decodes,
// resampled to 16 kHz mono) and returns its features.
func (f *Featurizer) FeaturesFile(path string) (*torch.Tensor, error) {
	s, err := ReadWAV(path)
	if err != nil {
		return nil, err
	}
	if f.SampleRate != SampleRate {
		return nil, fmt.Errorf("featurizer is for %d Hz, WAV files are read at %d Hz", f.SampleRate, SampleRate)
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
