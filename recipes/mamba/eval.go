package mamba

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/scan"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// EvalResult is a held-out score.
type EvalResult struct {
	Loss        float64 // nats per token (the mean cross-entropy, no label smoothing)
	BitsPerChar float64 // Loss × tokens / (characters × ln 2)
	Perplexity  float64
	Tokens      int64
	Unigram     float64 // the unigram baseline, nats per token
}

// finish fills bits/char from the split's characters per token.
func (r *EvalResult) finish(m Meta, tokens int64) {
	r.Tokens = tokens
	r.Perplexity = math.Exp(r.Loss)
	r.Unigram = m.Unigram
	if m.ValidChars > 0 && m.ValidTokens > 0 {
		charsPerToken := float64(m.ValidChars) / float64(m.ValidTokens)
		r.BitsPerChar = r.Loss / charsPerToken / math.Ln2
	}
}

// evalWindows is the token-weighted mean cross-entropy of the model over
// the windows, in eval mode, without grad, at the training precision.
func evalWindows(m *LM, w windows, batch int, dev torch.Device, p amp.Precision) (EvalResult, error) {
	var r EvalResult
	wasTraining := m.Training()
	nn.SetTraining(m, false)
	defer nn.SetTraining(m, wasTraining)
	var sum, count float64
	err := torch.TidyErr(func() error {
		for i := 0; i < w.Len(); i += batch {
			j := min(i+batch, w.Len())
			torch.Tidy(func() {
				xs := make([]*torch.Tensor, 0, j-i)
				ys := make([]*torch.Tensor, 0, j-i)
				for k := i; k < j; k++ {
					s, _ := w.Get(k)
					xs = append(xs, s["x"])
					ys = append(ys, s["y"])
				}
				x, y := torch.Stack(xs, 0).ToDevice(dev), torch.Stack(ys, 0).ToDevice(dev)
				torch.NoGrad(func() {
					run := func() {
						loss := m.Loss(x, y, 0)
						n := float64(y.Numel())
						sum += loss.Item() * n
						count += n
					}
					if p == amp.FP32 {
						run()
					} else {
						amp.Autocast(dev, p.DType(), run)
					}
				})
			})
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	r.Loss = sum / count
	return r, nil
}

// LoadLM rebuilds the model of a checkpoint with its weights (eval mode).
func LoadLM(path string, dev torch.Device) (*LM, modelMeta, error) {
	f, err := ckpt.ReadParts(path, "meta", "model") // not the optimizer's state
	if err != nil {
		return nil, modelMeta{}, err
	}
	defer f.Free()
	mm, err := ReadModelMeta(f)
	if err != nil {
		return nil, mm, err
	}
	m, err := NewLM(mm.Model)
	if err != nil {
		return nil, mm, checkpointError(path, err)
	}
	if err := f.Module("model", m); err != nil {
		nn.Free(m)
		return nil, mm, err
	}
	if s, err := scan.Parse(mm.Scan, mm.ScanChunk); err == nil {
		m.Scan = s
	}
	if dev != torch.CPU {
		nn.To(m, dev, torch.Float32)
	}
	nn.SetTraining(m, false)
	return m, mm, nil
}

// EvalConfig is `torchfit mamba eval`.
type EvalConfig struct {
	Checkpoint string
	Data       string
	SeqLen     int // 0: the checkpoint's
	Batch      int
	MaxTokens  int // 0: all held-out tokens
	Scan       string
	Device     torch.Device
	Precision  amp.Precision
}

// Evaluate scores a checkpoint on a data directory's held-out split.
func Evaluate(cfg EvalConfig) (r EvalResult, err error) {
	// In a tensor scope: whatever loading and scoring leave behind
	// (initial weights replaced by the checkpoint's, intermediates) is
	// freed when it ends.
	torch.Main().Do(func() { err = torch.TidyErr(func() error { r, err = evaluate(cfg); return err }) })
	return r, err
}

func evaluate(cfg EvalConfig) (EvalResult, error) {
	var r EvalResult
	if _, err := os.Stat(cfg.Checkpoint); err != nil {
		return r, &DataError{fmt.Errorf("mamba: --checkpoint: %w", err)}
	}
	meta, err := ReadMeta(cfg.Data)
	if err != nil {
		return r, err
	}
	m, mm, err := LoadLM(cfg.Checkpoint, cfg.Device)
	if err != nil {
		return r, err
	}
	defer nn.Free(m)
	if cfg.Scan != "" {
		s, err := scan.Parse(cfg.Scan, mm.ScanChunk)
		if err != nil {
			return r, &DataError{err}
		}
		m.Scan = s
	}
	toks, err := OpenTokens(filepath.Join(cfg.Data, validFile), VocabSize)
	if err != nil {
		return r, err
	}
	defer toks.Close()
	seq := cfg.SeqLen
	if seq <= 0 {
		seq = mm.SeqLen
	}
	w := newWindows(toks, seq, cfg.MaxTokens)
	if w.Len() == 0 {
		return r, dataErrorf("mamba: the held-out split has %d tokens, fewer than one sequence of %d", toks.Len(), seq)
	}
	p := cfg.Precision
	if p == "" {
		p = amp.FP32
	}
	r, err = evalWindows(m, w, max(cfg.Batch, 1), cfg.Device, p)
	if err != nil {
		return r, err
	}
	r.finish(meta, int64(w.Len()*seq))
	return r, nil
}
