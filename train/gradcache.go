package train

import (
	"fmt"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// EmbedFunc computes a micro-batch's embeddings: one tensor per tower
// (CLIP: image and text), each [micro-batch, dim]. It runs under autocast,
// without grad on the first pass and with grad on the second.
type EmbedFunc func(mb *data.Batch) []*torch.Tensor

// BatchLoss computes the loss of a whole window from its embeddings, each
// the concatenation over the window's micro-batches in order (CLIP's
// 128-way contrastive loss over all 128 samples). Parameters it uses (a
// learnable temperature) get their gradient once per window.
type BatchLoss func(embs []*torch.Tensor) *torch.Tensor

// CachePass is one grad-cache pass over a window.
type CachePass struct {
	Embed  EmbedFunc
	Loss   BatchLoss
	Scaler *amp.GradScaler // scales the loss (nil: none)
	Reset  func()          // drops the window's gradients after an out-of-memory error
	Step   int             // the optimizer step, in events
	// DeviceLoss leaves the window's loss on the device
	// (Window.LossTensor), as Pass.DeviceLoss does.
	DeviceLoss bool
	// NoRNG takes no snapshots of the random generators: the caller's
	// promise that Embed draws no random numbers (no dropout, as CLIP's
	// towers), so that both passes compute the same embeddings without
	// them. A CUDA graph cannot capture a generator's state being read or
	// set; with draws, the second pass's masks would differ from the
	// first's and the gradient would not be the window's.
	NoRNG bool
}

// GradCache accumulates the exact gradient of a loss that couples every
// sample of the window — a contrastive loss, whose denominator sums over the
// whole batch — while holding the activations of one micro-batch at a time
// (GradCache, Gao et al. 2021):
//
//  1. each micro-batch is embedded without grad, under a snapshot of the
//     random generators taken first, and its embeddings are kept;
//  2. the loss of the whole window is computed once from the concatenated
//     embeddings (made leaves that require grad) and backpropagated: the
//     embeddings' gradients are the cache, the loss's own parameters get
//     their gradient here, once;
//  3. each micro-batch is embedded again with grad under its snapshot, so
//     dropout draws the same masks and the embeddings equal the cached
//     ones, and backpropagated with its slice of the cached gradient.
//
// Two forwards per sample; memory: the window's embeddings and their
// gradients plus one micro-batch's activations. A window that fits in one
// micro-batch is embedded once, with grad, and its loss backpropagated
// directly: the same gradient for one forward (after an out-of-memory
// error halves the micro-batch, the window is redone as above). Naive accumulation of a
// contrastive loss over micro-batches is a different, weaker loss (each
// sample sees the micro-batch's negatives only); this is the large batch's.
func (e *Engine) GradCache(b *data.Batch, p CachePass) (Window, error) {
	size, err := batchSize(b)
	if err != nil {
		return Window{}, err
	}
	if size == 0 {
		return Window{}, fmt.Errorf("train: empty batch")
	}
	if p.Embed == nil || p.Loss == nil {
		return Window{}, fmt.Errorf("train: grad-cache needs an embedding function and a loss")
	}
	if e.cfg.Parallel != nil {
		// A contrastive loss over all ranks' samples needs their embeddings
		// gathered: not built yet.
		return Window{}, fmt.Errorf("train: grad-cache windows are not data parallel (EngineConfig.Parallel)")
	}
	return e.retry(size, Pass{Reset: p.Reset, Step: p.Step}, nil, func() (Window, error) { return e.gradCache(b, size, p) })
}

func (e *Engine) gradCache(b *data.Batch, size int, p CachePass) (w Window, err error) {
	w = Window{Samples: size, Count: float64(size), MicroBatch: e.micro}
	var rngs []*torch.RNG
	var cached [][]*torch.Tensor // [micro-batch][tower]
	var grads []*torch.Tensor    // per tower: the whole window's embedding gradient
	// The window's loss, read once the last backward is queued: on a GPU
	// a read waits for every kernel queued before it.
	var loss *torch.Tensor
	defer func() {
		if loss != nil {
			loss.Free()
		}
		for _, r := range rngs {
			r.Free()
		}
		for _, c := range cached {
			for _, t := range c {
				t.Free()
			}
		}
		for _, g := range grads {
			g.Free()
		}
	}()
	bounds := func(k int) (int, int) { return k * e.micro, min((k+1)*e.micro, size) }
	n := (size + e.micro - 1) / e.micro
	if n == 1 {
		return e.wholeWindow(b, size, p, w)
	}

	// 1. Embeddings without grad, each micro-batch under its snapshot.
	for k := 0; k < n; k++ {
		i, j := bounds(k)
		if !p.NoRNG {
			rngs = append(rngs, torch.TakeRNG())
		}
		err := torch.TidyErr(func() error {
			mb := microBatch(b, i, j, size, e.cfg.Device)
			var embs []*torch.Tensor
			torch.NoGrad(func() { e.Autocast(func() { embs = p.Embed(mb) }) })
			if len(embs) == 0 {
				return fmt.Errorf("train: the embedding function returned no tensors")
			}
			keep := make([]*torch.Tensor, len(embs))
			for t, x := range embs {
				keep[t] = x.Detach().Keep()
			}
			cached = append(cached, keep)
			return nil
		})
		if err != nil {
			return w, err
		}
	}

	// 2. The window's loss on the concatenated embeddings, backpropagated
	// once: the embeddings' gradients, and the loss parameters'.
	towers := len(cached[0])
	err = torch.TidyErr(func() error {
		leaves := make([]*torch.Tensor, towers)
		for t := range leaves {
			parts := make([]*torch.Tensor, n)
			for k := range parts {
				if len(cached[k]) != towers {
					return fmt.Errorf("train: micro-batch %d has %d embeddings, micro-batch 0 has %d", k, len(cached[k]), towers)
				}
				parts[k] = cached[k][t]
			}
			x := torch.Cat(parts, 0)
			if dt := x.DType(); dt == torch.Float16 || dt == torch.BFloat16 {
				x = x.ToDType(torch.Float32) // the loss in float32, as for any autocast loss
			}
			leaves[t] = x.Detach().SetRequiresGrad(true)
		}
		// Step 3 recomputes the embeddings: hold them once, as the leaves.
		for _, c := range cached {
			for _, x := range c {
				x.Free()
			}
		}
		cached = nil
		wl := p.Loss(leaves)
		if wl == nil {
			return fmt.Errorf("train: the loss function returned nil")
		}
		loss = wl.Detach().Keep()
		p.Scaler.Scale(wl).Backward()
		for _, l := range leaves {
			g := l.Grad()
			if g == nil {
				return fmt.Errorf("train: the loss does not depend on an embedding")
			}
			grads = append(grads, g.Keep())
		}
		return nil
	})
	if err != nil {
		return w, err
	}

	// 3. Each micro-batch again, with grad, under the same snapshot;
	// backward with its slice of the cached gradient.
	for k := 0; k < n; k++ {
		i, j := bounds(k)
		err := torch.TidyErr(func() error {
			if !p.NoRNG {
				rngs[k].Restore()
			}
			mb := microBatch(b, i, j, size, e.cfg.Device)
			var embs []*torch.Tensor
			e.Autocast(func() { embs = p.Embed(mb) })
			if len(embs) != towers {
				return fmt.Errorf("train: the embedding function returned %d tensors, then %d", towers, len(embs))
			}
			var surrogate *torch.Tensor
			for t, x := range embs {
				term := x.ToDType(grads[t].DType()).Mul(grads[t].Narrow(0, int64(i), int64(j-i))).Sum()
				if surrogate == nil {
					surrogate = term
				} else {
					surrogate = surrogate.Add(term)
				}
			}
			if e.cfg.BeforeBackward != nil {
				e.cfg.BeforeBackward(k, n)
			}
			surrogate.Backward()
			return nil
		})
		if err != nil {
			return w, err
		}
		w.Micro++
	}
	if p.DeviceLoss {
		w.LossTensor, loss = loss, nil
		return w, nil
	}
	if err := torch.Try(func() { w.Loss = loss.Item() }); err != nil {
		return w, err
	}
	return w, nil
}

// wholeWindow is a grad-cache pass over a window of one micro-batch: one
// forward with grad, the loss on the embeddings (in float32, as the cached
// path computes it), one backward.
func (e *Engine) wholeWindow(b *data.Batch, size int, p CachePass, w Window) (Window, error) {
	err := torch.TidyErr(func() error {
		mb := microBatch(b, 0, size, size, e.cfg.Device)
		var embs []*torch.Tensor
		e.Autocast(func() { embs = p.Embed(mb) })
		if len(embs) == 0 {
			return fmt.Errorf("train: the embedding function returned no tensors")
		}
		for t, x := range embs {
			if dt := x.DType(); dt == torch.Float16 || dt == torch.BFloat16 {
				embs[t] = x.ToDType(torch.Float32)
			}
		}
		loss := p.Loss(embs)
		if loss == nil {
			return fmt.Errorf("train: the loss function returned nil")
		}
		if e.cfg.BeforeBackward != nil {
			e.cfg.BeforeBackward(0, 1)
		}
		p.Scaler.Scale(loss).Backward()
		if p.DeviceLoss {
			w.LossTensor = loss.Detach().Keep()
		} else {
			w.Loss = loss.Item() // after the backward is queued
		}
		return nil
	})
	if err != nil {
		return w, err
	}
	w.Micro = 1
	return w, nil
}
