package asr

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// Long audio is transcribed in windows of transcribeWindow samples (30 s)
// that overlap by transcribeOverlap (2 s); see TranscribeWAV.
const (
	transcribeWindow  = 30 * SampleRate
	transcribeOverlap = 2 * SampleRate
)

// windows returns the window and overlap, in samples, for a model whose
// positional tables hold maxLen subsampled frames and features with the
// given hop: TranscribeWindow and TranscribeOverlap unless the window's
// subsampled frames would exceed 90% of maxLen, in which case the window
// shrinks (and the overlap to at most a quarter of it). Both are multiples
// of one CTC frame (4 hops), so the frames of successive windows fall on
// one grid. ok is false when maxLen is too small for two CTC frames of
// overlap (then only audio of at most one window can be transcribed).
func windows(maxLen int64, hop int) (win, ov int, ok bool) {
	grid := 4 * hop
	win = transcribeWindow / grid * grid
	limit := maxLen * 9 / 10
	for win > grid && SubsampledLength(int64(1+win/hop)) > limit {
		win -= grid
	}
	ov = min(transcribeOverlap/grid*grid, win/4/grid*grid)
	return win, ov, ov >= 2*grid
}

// minSamples is the shortest audio the featurizer and the model accept.
func minSamples(f *Featurizer) int {
	n := f.NFFT/2 + 1
	for SubsampledLength(int64(f.Frames(n))) < 1 {
		n++
	}
	return n
}

// TranscribeWAV transcribes a WAV file (any format audio.OpenWAV decodes) with
// greedy CTC, streaming it in windows so that memory does not grow with the
// file's length.
//
// Audio of at most TranscribeWindow samples (30 s) is one window: features
// of the whole file, normalised over it, exactly as before windowing
// existed. Longer audio is read in windows of 30 s that overlap by 2 s
// (window k starts at k·28 s); each window's features are computed and
// normalised on their own, and its CTC frames run through the encoder and
// CTC head separately. CTC frame j of a window is centred on sample
// (4j+3)·hop of it; window k keeps the frames centred at or after the
// middle of its overlap with window k−1 (1 s into it) and before the middle
// of its overlap with window k+1, so every 40 ms slot of the file is decoded
// by exactly one window, with at least 1 s of context either side of a
// seam. The kept best paths are joined and collapsed as one path (a token
// repeated across a seam is merged, as within a window).
//
// Memory: the reader's buffers and one window of samples (1.9 MB) in Go,
// plus the token ids found; tensor memory is that of one 30 s window
// (features and the encoder's activations for 749 subsampled frames),
// whatever the file's length (see recipes/asr/README.md for measured peaks). The model's
// MaxLen (5000 subsampled frames, 200 s, for the presets) is never reached.
func TranscribeWAV(m *Conformer, feat *Featurizer, path string, dev torch.Device) (string, error) {
	if m.Vocab == nil {
		return "", errors.New("asr: transcribe: model has no vocabulary")
	}
	if feat.SampleRate != SampleRate {
		return "", fmt.Errorf("asr: featurizer is for %d Hz, WAV files are read at %d Hz", feat.SampleRate, SampleRate)
	}
	r, err := audio.OpenWAV(path, SampleRate)
	if err != nil {
		return "", err
	}
	defer r.Close()
	total := r.Len()
	if need := minSamples(feat); total < need {
		return "", &audio.Error{Path: path, Err: fmt.Errorf("%.3f s of audio is too short to transcribe (at least %.3f s)",
			float64(total)/SampleRate, float64(need)/SampleRate)}
	}
	win, ov, ok := windows(m.Cfg.maxLen(), feat.Hop)
	if total > win && !ok {
		return "", fmt.Errorf("asr: the model's MaxLen %d is too small to transcribe audio longer than %.1f s in windows",
			m.Cfg.maxLen(), float64(win)/SampleRate)
	}
	read := func(dst []float32) (int, error) {
		n, err := r.Read(dst)
		if errors.Is(err, io.EOF) { // cannot happen: Len counts what Read yields
			err = &audio.Error{Path: path, Err: fmt.Errorf("audio ends %d samples early", len(dst)-n)}
		}
		return n, err
	}
	best := func(x []float32) ([]int64, error) { return m.bestPath(feat, x, dev) }
	ids, err := transcribeWindows(read, total, win, ov, feat.Hop, best)
	var ae *audio.Error
	if errors.As(err, &ae) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("asr: %s: %w", path, err)
	}
	return m.Vocab.Decode(ids), nil
}

// transcribeWindows runs best (the best CTC token per encoder frame) over
// total samples read from read in windows of win samples overlapping by ov,
// and returns the joined, collapsed token ids (see TranscribeWAV).
func transcribeWindows(read func([]float32) (int, error), total, win, ov, hop int, best func([]float32) ([]int64, error)) ([]int64, error) {
	buf := make([]float32, min(win, total))
	var ids []int64
	prev := int64(-1)
	for start, have := 0, 0; ; {
		n, err := read(buf[have:min(win, total-start)])
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("decoded %d of %d samples", start+have+n, total)
		}
		if err != nil {
			return nil, err
		}
		have += n
		last := start+have >= total
		lo, hi := 0, math.MaxInt // kept CTC frame centres, in window samples
		if start > 0 {
			lo = ov / 2
		}
		if !last {
			hi = win - ov/2
		}
		path, err := best(buf[:have])
		if err != nil {
			return nil, fmt.Errorf("at %.1f s: %w", float64(start)/SampleRate, err)
		}
		for j, id := range path {
			if c := (4*j + 3) * hop; c < lo || c >= hi {
				continue
			}
			if id != prev && id != BlankID {
				ids = append(ids, id)
			}
			prev = id
		}
		if last {
			return ids, nil
		}
		copy(buf, buf[win-ov:win])
		have, start = ov, start+win-ov
	}
}

// bestPath returns the best CTC token per encoder frame of samples (one
// window), under NoGrad in eval mode.
func (m *Conformer) bestPath(feat *Featurizer, samples []float32, dev torch.Device) ([]int64, error) {
	training := m.Training()
	nn.SetTraining(m, false)
	defer nn.SetTraining(m, training)
	var best []int64
	err := torch.TidyErr(func() error {
		f, err := feat.Features(samples)
		if err != nil {
			return err
		}
		x := f.Unsqueeze(0).ToDevice(dev)
		torch.NoGrad(func() {
			lp, lens := m.CTCLogProbs(x, []int64{x.Size(1)})
			best = lp.Argmax(-1, false).Int64s()[:lens[0]]
		})
		return nil
	})
	return best, err
}

// SaveModel writes a model's weights and the description LoadModel needs
// (preset, configuration, vocabulary) to path, without training state: a
// checkpoint for eval and transcribe.
func SaveModel(path string, m *Conformer, preset string) error {
	if m.Vocab == nil {
		return errors.New("asr: save model: no vocabulary")
	}
	return torch.TidyErr(func() error {
		sd := &ptfile.Dict{Ordered: true}
		for _, n := range nn.StateDict(m) {
			sd.Set(n.Name, n.T)
		}
		return ptfile.Save(path, ptfile.NewDict("model", sd, "meta", metaDict(preset, m.Cfg, m.Vocab)))
	})
}
