package asr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/torchfit/torchfit/audio"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/recipes/speech"
	"github.com/torchfit/torchfit/torch"
)

// scoreCorpus transcribes a corpus (greedy CTC) under NoGrad in eval mode
// and returns its error rates and, with withLoss, the mean loss. An
// out-of-memory error halves the evaluation batch and retries (validation
// can run out of memory too, the guide notes).
func scoreCorpus(m *Conformer, c *Corpus, dev torch.Device, batch int, withLoss bool) (er speech.ErrorRate, loss float64, err error) {
	training := m.Training()
	nn.SetTraining(m, false)
	defer nn.SetTraining(m, training)
	var lossSum float64
	ds := dataset(c)
	for start := 0; start < c.Len(); {
		end := min(start+batch, c.Len())
		var hyps []string
		var chunkLoss float64
		err = torch.TidyErr(func() error {
			b, err := recipes.CollateAt(ds, Collate, span(start, end))
			if err != nil {
				return err
			}
			mb := b.Slice(0, b.Size(), dev)
			torch.NoGrad(func() {
				if withLoss {
					total := m.BatchLoss(mb)
					chunkLoss = total.Item() * float64(end-start)
				}
				hyps = m.Transcribe(mb.Field("feats"), mb.Length("feats"))
			})
			return nil
		})
		if errors.Is(err, torch.ErrOutOfMemory) && batch > 1 {
			torch.EmptyCache()
			batch /= 2
			continue
		}
		if err != nil {
			return er, 0, err
		}
		for k, h := range hyps {
			er.Add(c.Utts[start+k].Text, h)
		}
		lossSum += chunkLoss
		start = end
	}
	if c.Len() == 0 {
		return er, 0, fmt.Errorf("asr: empty split")
	}
	return er, lossSum / float64(c.Len()), nil
}

// EvalResult is a checkpoint's score on a split.
type EvalResult struct {
	CER, WER float64
	N        int // utterances
	// NonFinite names the weights holding NaN or ±Inf: the scores of such
	// a checkpoint mean nothing (the CLI warns).
	NonFinite []string
}

// Evaluate scores a checkpoint on a split of a corpus: CER and WER, and
// the weights that are not finite.
func Evaluate(checkpoint, dir, split string, dev torch.Device) (res EvalResult, err error) {
	torch.Main().Do(func() { res, err = evaluate(checkpoint, dir, split, dev) })
	return res, err
}

func evaluate(checkpoint, dir, split string, dev torch.Device) (EvalResult, error) {
	m, err := LoadModel(checkpoint, dev)
	if err != nil {
		return EvalResult{}, err
	}
	defer nn.Free(m)
	if err := checkCorpusDir(dir); err != nil {
		return EvalResult{}, err
	}
	res := EvalResult{NonFinite: NonFiniteWeights(m)}
	feat, err := NewFeaturizer(16000, 400, 160, int(m.Cfg.NumMels))
	if err != nil {
		return res, err
	}
	defer feat.Close()
	c, err := LoadCorpus(filepath.Join(dir, split+".jsonl"), m.Vocab, feat)
	if err != nil {
		return res, err
	}
	er, _, err := scoreCorpus(m, c, dev, 16, false)
	if err != nil {
		return res, err
	}
	res.CER, res.WER, res.N = er.CER(), er.WER(), c.Len()
	return res, nil
}

// checkCorpusDir returns a *recipes.ConfigError for a --data that is not a
// directory (a file, say: opening its manifests would fail with "not a
// directory", an error the user did not see as theirs). The checkpoint
// is checked first.
func checkCorpusDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return &recipes.ConfigError{Field: "data", Value: dir, Reason: "no such corpus directory (create one with `torchfit asr data --out " + dir + "`)"}
	case !st.IsDir():
		return &recipes.ConfigError{Field: "data", Value: dir, Reason: "not a directory: give the corpus directory `torchfit asr data --out DIR` made"}
	}
	return nil
}

// EvaluateSplit scores a checkpoint on a split of a corpus: CER and WER
// (Evaluate also names non-finite weights).
func EvaluateSplit(checkpoint, dir, split string, dev torch.Device) (cer, wer float64, n int, err error) {
	r, err := Evaluate(checkpoint, dir, split, dev)
	return r.CER, r.WER, r.N, err
}

// TranscribeFiles transcribes WAV files with a checkpoint (greedy CTC; see
// TranscribeWAV for the formats, long files and memory). Every file's
// header is checked before the model is loaded; an error about a file is an
// *audio.Error.
func TranscribeFiles(checkpoint string, files []string, dev torch.Device) (texts []string, err error) {
	torch.Main().Do(func() { texts, err = transcribeFiles(checkpoint, files, dev) })
	return texts, err
}

func transcribeFiles(checkpoint string, files []string, dev torch.Device) ([]string, error) {
	for _, f := range files {
		r, err := audio.OpenWAV(f, SampleRate)
		if err != nil {
			return nil, err
		}
		r.Close()
	}
	m, err := LoadModel(checkpoint, dev)
	if err != nil {
		return nil, err
	}
	defer nn.Free(m)
	feat, err := NewFeaturizer(16000, 400, 160, int(m.Cfg.NumMels))
	if err != nil {
		return nil, err
	}
	defer feat.Close()
	out := make([]string, len(files))
	for k, f := range files {
		if out[k], err = TranscribeWAV(m, feat, f, dev); err != nil {
			return nil, err
		}
	}
	return out, nil
}
