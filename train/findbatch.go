package train

import (
	"fmt"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// FindBatchSize searches the largest micro-batch for this trainer's model,
// optimizer and precision: each trial is a full forward, backward and
// optimizer step on batch(n), after which the parameters, buffers,
// optimizer and scaler state and the random generator are restored
// (memplan.Snapshot: copies kept on the CPU, so the search measures the
// device as training will use it). The search is memplan.FindBatchSize.
func (t *Trainer) FindBatchSize(max int, batch func(n int) (*data.Batch, error)) (res memplan.FindResult, err error) {
	t.Thread().Do(func() { res, err = t.findBatchSize(max, batch) })
	return res, err
}

func (t *Trainer) findBatchSize(max int, batch func(n int) (*data.Batch, error)) (memplan.FindResult, error) {
	if batch == nil {
		return memplan.FindResult{}, fmt.Errorf("train: FindBatchSize: nil batch function")
	}
	snap, err := memplan.NewSnapshot(t.Model, []nn.Optimizer{t.Opt}, []*amp.GradScaler{t.Scaler})
	if err != nil {
		return memplan.FindResult{}, err
	}
	defer snap.Free()
	res, err := memplan.FindBatchSize(t.cfg.Device, max, func(n int) error {
		b, err := batch(n)
		if err != nil {
			return err
		}
		if b == nil {
			return fmt.Errorf("train: FindBatchSize: the batch function returned a nil batch for %d samples", n)
		}
		defer b.Free()
		err = torch.TidyErr(func() error {
			nn.SetTraining(t.Model, true)
			mb := b.Slice(0, b.Size(), t.cfg.Device)
			var loss *torch.Tensor
			t.engine.Autocast(func() { loss = t.Loss(mb) })
			t.Scaler.Scale(loss.ToDType(torch.Float32)).Backward()
			t.Opt.Step()
			return nil
		})
		t.Opt.ZeroGrad()
		if rerr := snap.Restore(); rerr != nil && err == nil {
			err = rerr
		}
		return err
	})
	if err == nil && res.MicroBatch == 0 {
		err = fmt.Errorf("train: not even a micro-batch of 1 fits: %w", res.Trials[0].Err)
	}
	return res, err
}
