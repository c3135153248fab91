package report

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// LogEvery is the default cadence of StepLog's lines: every 10 optimizer
// steps, as the Mamba seed's logging_steps (Hugging Face's Trainer logs
// every logging_steps, Lightning every log_every_n_steps).
const LogEvery = 10

// StepLog writes a training line every few optimizer steps, for a log
// without a progress bar (stderr piped to a file or CI): the step (of the
// run's last, once an epoch event has said it), the epoch, the mean loss over the steps since the last line (as Hugging
// Face's Trainer logs it), the learning rate, samples per second over those
// steps and the allocator's memory after the step. The first step has a
// line too, so that a run shows its loss at once. It is safe for
// concurrent use; a nil *StepLog does nothing.
type StepLog struct {
	mu    sync.Mutex
	log   *Logger
	every int
	epoch train.EpochEvent
	// the window since the last line
	loss, count float64
	samples     int
	busy        time.Duration
}

// NewStepLog returns a StepLog writing to log every `every` steps (0: none).
func NewStepLog(log *Logger, every int) *StepLog { return &StepLog{log: log, every: every} }

// SetEvery changes the cadence (0: no lines), for a recipe that logs its
// own steps.
func (s *StepLog) SetEvery(every int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.every = every
}

// Sink keeps the epoch and renders steps.
func (s *StepLog) Sink(e train.Event) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e := e.(type) {
	case train.EpochEvent:
		s.epoch = e
	case train.StepEvent:
		if s.every <= 0 {
			return
		}
		i := e.StepInfo
		if !i.Skipped && !math.IsNaN(i.Loss) && !math.IsInf(i.Loss, 0) {
			w := i.Count
			if w <= 0 {
				w = 1
			}
			s.loss += i.Loss * w
			s.count += w
		}
		s.samples += i.Samples
		s.busy += i.Duration
		if i.Step != 1 && i.Step%s.every != 0 {
			return
		}
		s.log.Printf("%s", s.line(e))
		s.loss, s.count, s.samples, s.busy = 0, 0, 0, 0
	}
}

func (s *StepLog) line(e train.StepEvent) string {
	i := e.StepInfo
	epoch := "" // the EpochEvent's (from 1); StepEvent.Epoch counts from 0 in train.Fit
	if s.epoch.Epochs > 0 {
		epoch = fmt.Sprintf(" | epoch %d/%d", s.epoch.Epoch, s.epoch.Epochs)
	}
	loss := "loss nan (skipped)"
	if s.count > 0 {
		loss = fmt.Sprintf("loss %.4f", s.loss/s.count)
	}
	rate := 0.0
	if s.busy > 0 {
		rate = float64(s.samples) / s.busy.Seconds()
	}
	step := fmt.Sprint(i.Step)
	if s.epoch.LastStep > 0 {
		step = fmt.Sprintf("%d/%d", i.Step, s.epoch.LastStep)
	}
	return fmt.Sprintf("step %s%s | %s | lr %.2e | %.1f samples/s | memory %s (peak %s)", step, epoch, loss, i.LR, rate,
		torch.FormatBytes(i.Memory.Allocated), torch.FormatBytes(i.Memory.PeakAllocated))
}
