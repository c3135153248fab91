package train

import (
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// Trial is one micro-batch size tried by FindBatchSize.
type Trial struct {
	MicroBatch int
	Fits       bool
	Peak       int64 // peak bytes allocated during the trial step (above what was held before it)
	Err        error // the out-of-memory error when it did not fit
}

// FindResult is FindBatchSize's answer.
type FindResult struct {
	MicroBatch int     // the largest size that fit (0: none did)
	Trials     []Trial // in the order tried
}

// Table prints the trials like the seeds' test_memory_config.
func (r FindResult) Table(w io.Writer) {
	ts := append([]Trial(nil), r.Trials...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].MicroBatch < ts[j].MicroBatch })
	fmt.Fprintf(w, "%-12s %-6s %14s\n", "micro-batch", "fits", "peak memory")
	for _, t := range ts {
		fits, peak := "yes", torch.FormatBytes(t.Peak)
		if !t.Fits {
			fits, peak = "OOM", "-"
		}
		fmt.Fprintf(w, "%-12d %-6s %14s\n", t.MicroBatch, fits, peak)
	}
	fmt.Fprintf(w, "largest micro-batch that fits: %d\n", r.MicroBatch)
}

// FindBatchSize finds the largest n in [1, max] for which try(n) succeeds:
// it doubles n from 1 until try fails with torch.ErrOutOfMemory (or max is
// reached), then bisects between the last fit and the first failure. Errors
// other than out-of-memory stop the search. After each trial the device's
// cache is emptied, so nothing a trial allocated stays behind.
func FindBatchSize(device torch.Device, max int, try func(n int) error) (FindResult, error) {
	var res FindResult
	tried := map[int]bool{}
	attempt := func(n int) (bool, error) {
		torch.EmptyCache()
		before := torch.MustMemoryStats(device).Allocated
		if err := torch.ResetPeakMemory(device); err != nil {
			return false, err
		}
		err := try(n)
		peak := torch.MustMemoryStats(device).PeakAllocated - before
		torch.EmptyCache()
		tr := Trial{MicroBatch: n, Fits: err == nil, Peak: peak}
		if err != nil {
			if !errors.Is(err, torch.ErrOutOfMemory) {
				return false, err
			}
			tr.Err = err
		}
		tried[n] = true
		res.Trials = append(res.Trials, tr)
		return tr.Fits, nil
	}
	lo, hi := 0, 0 // lo fits, hi fails (0: unknown)
	for n := 1; ; n *= 2 {
		if n > max {
			n = max
		}
		ok, err := attempt(n)
		if err != nil {
			return res, err
		}
		if !ok {
			hi = n
			break
		}
		lo = n
		if n == max {
			break
		}
	}
	for hi > 0 && hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, err := attempt(mid)
		if err != nil {
			return res, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	res.MicroBatch = lo
	return res, nil
}

// FindBatchSize searches the largest micro-batch for this trainer's model,
// optimizer and precision: each trial is a full forward, backward and
// optimizer step on batch(n), after which the parameters and optimizer
// state are restored (from copies kept on the CPU, so the search measures
// the device as training will use it).
func (t *Trainer) FindBatchSize(max int, batch func(n int) (*data.Batch, error)) (res FindResult, err error) {
	t.Thread().Do(func() { res, err = t.findBatchSize(max, batch) })
	return res, err
}

func (t *Trainer) findBatchSize(max int, batch func(n int) (*data.Batch, error)) (FindResult, error) {
	params := nn.StateDict(t.Model)
	saved := make([]*torch.Tensor, len(params))
	var optState map[string]*torch.Tensor
	err := torch.TidyErr(func() error {
		for k, p := range params {
			saved[k] = p.T.To(torch.CPU, p.T.DType()).Clone().Keep()
		}
		optState = map[string]*torch.Tensor{}
		for _, s := range t.Opt.State() {
			optState[s.Name] = s.T.To(torch.CPU, s.T.DType()).Clone().Keep()
		}
		return nil
	})
	defer func() {
		for _, s := range saved {
			s.Free()
		}
		for _, s := range optState {
			s.Free()
		}
	}()
	if err != nil {
		return FindResult{}, err
	}
	restore := func() error {
		t.Opt.ZeroGrad()
		err := torch.Try(func() {
			torch.NoGrad(func() {
				for k, p := range params {
					p.T.CopyFrom(saved[k])
				}
			})
		})
		if err != nil {
			return err
		}
		return t.Opt.LoadState(optState)
	}
	res, err := FindBatchSize(t.cfg.Device, max, func(n int) error {
		b, err := batch(n)
		if err != nil {
			return err
		}
		defer b.Free()
		err = torch.TidyErr(func() error {
			nn.Train(t.Model, true)
			mb := b.Slice(0, b.Size(), t.cfg.Device)
			var loss *torch.Tensor
			t.engine.Autocast(func() { loss = t.Loss(mb) })
			t.Scaler.Scale(loss.ToDType(torch.Float32)).Backward()
			t.Opt.Step()
			return nil
		})
		if rerr := restore(); rerr != nil && err == nil {
			err = rerr
		}
		return err
	})
	if err == nil && res.MicroBatch == 0 {
		err = fmt.Errorf("train: not even a micro-batch of 1 fits: %w", res.Trials[0].Err)
	}
	return res, err
}
