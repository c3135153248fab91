package mamba

import (
	"fmt"
	"math"
	"time"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes"
	"github.com/torchfit/torchfit/torch"
)

// MinTemperature is the lowest sampling temperature above 0 (greedy): the
// logits divided by less overflow, and sampling from them fails.
const MinTemperature = 1e-3

// MaxNewTokens is the most tokens one generate run may ask for: a million
// is hours of sampling on a CPU and far past anything a model of these
// sizes continues coherently, while a typo of a few more zeros would
// otherwise run for days, or, sized by the flag, fail to allocate.
const MaxNewTokens = 1_000_000

// GenerateConfig is `torchfit mamba generate`.
type GenerateConfig struct {
	Checkpoint   string
	Prompt       string
	MaxNewTokens int
	// Temperature divides the logits (0: greedy, the most likely token).
	Temperature float64
	// TopK samples among the k most likely tokens (0: all).
	TopK   int
	Seed   uint64
	Device torch.Device
	// Stream, when set, receives each new piece of text as it is made.
	Stream func(string)
}

// GenerateResult is the text and how fast it came.
type GenerateResult struct {
	Text         string // the prompt and what followed
	PromptTokens int
	NewTokens    int
	Prefill      time.Duration // the prompt, one pass
	PerToken     time.Duration // mean time per new token
	// FirstHalf and SecondHalf are the mean times per token of the two
	// halves of the new tokens: with the recurrent state they are the same
	// (O(1) per token), where re-running the prefix would grow.
	FirstHalf, SecondHalf time.Duration
}

// Validate checks the sampling settings: each fault is a
// *recipes.ConfigError.
func (c GenerateConfig) Validate() error {
	switch {
	case c.MaxNewTokens < 0:
		return &recipes.ConfigError{Field: "max-new-tokens", Value: c.MaxNewTokens, Reason: "must not be negative"}
	case c.MaxNewTokens > MaxNewTokens:
		return &recipes.ConfigError{Field: "max-new-tokens", Value: c.MaxNewTokens, Reason: fmt.Sprintf("must be at most %d", MaxNewTokens)}
	case c.Temperature < 0 || math.IsNaN(c.Temperature) || math.IsInf(c.Temperature, 0):
		return &recipes.ConfigError{Field: "temperature", Value: c.Temperature, Reason: "must be a finite number ≥ 0"}
	case c.Temperature > 0 && c.Temperature < MinTemperature:
		return &recipes.ConfigError{Field: "temperature", Value: c.Temperature, Reason: fmt.Sprintf("must be 0 (greedy) or at least %g", MinTemperature)}
	case c.TopK < 0:
		return &recipes.ConfigError{Field: "top-k", Value: c.TopK, Reason: "must not be negative"}
	}
	return nil
}

// Generate continues a prompt: one pass over the prompt fills each layer's
// recurrent state (convolution inputs and scan state), then every new token
// costs one step of every layer from that state, whatever came before.
func Generate(cfg GenerateConfig) (res GenerateResult, err error) {
	if err := cfg.Validate(); err != nil {
		return res, &DataError{err}
	}
	torch.Main().Do(func() { err = torch.TidyErr(func() error { res, err = generate(cfg); return err }) })
	return res, err
}

func generate(cfg GenerateConfig) (res GenerateResult, err error) {
	tok, err := NewTokenizer()
	if err != nil {
		return res, err
	}
	m, _, err := LoadLM(cfg.Checkpoint, cfg.Device)
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	ids := tok.Encode(cfg.Prompt)
	if len(ids) == 0 {
		ids = []int{EOT} // an empty prompt starts from the end-of-text token
	}
	res.PromptTokens = len(ids)
	torch.ManualSeed(cfg.Seed)
	states := m.NewStates()
	defer func() {
		for _, s := range states {
			s.Free()
		}
	}()
	out := append([]int(nil), ids...)
	var logits *torch.Tensor
	torch.NoGrad(func() {
		t0 := time.Now()
		in := make([]int64, len(ids))
		for k, id := range ids {
			in[k] = int64(id)
		}
		x := torch.FromSlice(in, []int64{1, int64(len(in))}).ToDevice(cfg.Device)
		h := m.Hidden(x, states)
		last := h.Select(1, int64(len(in)-1))
		logits = torch.Linear(last, m.LMHead.Weight, nil).Keep()
		for _, s := range states {
			s.Conv.Keep()
			s.SSM.Keep()
		}
		res.Prefill = time.Since(t0)
		// Grown as tokens come, not sized by the flag up front: a run
		// stopped early has not paid for the tokens it never made.
		var times []time.Duration
		for range cfg.MaxNewTokens {
			next := sample(logits, cfg.Temperature, cfg.TopK)
			logits.Free()
			out = append(out, next)
			if cfg.Stream != nil {
				cfg.Stream(tok.Decode([]int{next}))
			}
			t := time.Now()
			logits = m.StepLogits(torch.FromSlice([]int64{int64(next)}, []int64{1}).ToDevice(cfg.Device), states).Keep()
			times = append(times, time.Since(t))
		}
		logits.Free()
		res.NewTokens = len(times)
		if n := len(times); n > 0 {
			var all, first, second time.Duration
			for k, d := range times {
				all += d
				if k < n/2 {
					first += d
				} else {
					second += d
				}
			}
			res.PerToken = all / time.Duration(n)
			if n >= 2 {
				res.FirstHalf, res.SecondHalf = first/time.Duration(n/2), second/time.Duration(n-n/2)
			}
		}
	})
	res.Text = tok.Decode(out)
	return res, nil
}

// sample draws the next token from logits (1, padded vocab), over the
// tokenizer's vocabulary only.
func sample(logits *torch.Tensor, temperature float64, topK int) int {
	var id int
	torch.Tidy(func() {
		l := logits.Reshape(-1).Narrow(0, 0, VocabSize).ToDType(torch.Float32)
		if temperature == 0 {
			id = int(l.Argmax(0, false).ItemInt())
			return
		}
		l = l.DivScalar(temperature)
		idx := (*torch.Tensor)(nil)
		if topK > 0 && topK < VocabSize {
			vals, ix := l.Topk(int64(topK), 0, true)
			l, idx = vals, ix
		}
		probs := l.Softmax(0)
		pick := torch.CallOp("aten::multinomial", "", probs, int64(1))[0].(*torch.Tensor)
		if idx != nil {
			pick = idx.IndexSelect(0, pick)
		}
		id = int(pick.ItemInt())
	})
	return id
}
