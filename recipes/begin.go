package recipes

import (
	"fmt"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
)

// Session is the part of a training run every recipe shares, begun by
// Begin at the top of the recipe's Train and ended when it returns.
type Session struct {
	// Precision is the resolved --mixed-precision and why (auto: what the
	// device computes natively).
	Precision amp.Choice
	cm        Common
	sink      train.Sink
	held      []train.Event // the lines before the run starts
	started   bool
	undo      []func()
}

// Begin starts a recipe's training run from its shared settings, on
// libtorch's thread, before the recipe loads data or builds its model:
// it checks the settings (Common.Validate), that the device exists (CUDA
// asked for where there is none: torch.ErrNoCUDA), resolves the precision
// (amp.ParsePrecision, logged with its reason), caps the device's memory
// (MemoryLimit or MemoryFraction, logged; End lifts the cap) and seeds
// libtorch's generator (Seed). Every error is the user's (exit status 2).
// events receives the log lines (nil: none). The set-up's lines, Begin's
// own (the precision, the cap) and the recipe's (its model, its data),
// wait until the run starts (Started, or its first event that is not a
// log line: an epoch, a step), so that a run that fails on bad input
// before then prints its one error line and nothing else. The recipe
// sends its events through Events (or Logf).
func Begin(cm Common, events train.Sink) (*Session, error) {
	if err := cm.Validate(); err != nil {
		return nil, err
	}
	if err := torch.CheckDevice(cm.Device); err != nil {
		return nil, &ConfigError{Field: "device", Value: cm.Device.String(), Err: err}
	}
	prec, err := amp.ParsePrecision(cm.Precision, cm.Device)
	if err != nil {
		return nil, &ConfigError{Field: "mixed-precision", Value: cm.Precision, Err: err}
	}
	s := &Session{Precision: prec, cm: cm, sink: events}
	if err := s.capMemory(cm); err != nil {
		return nil, err
	}
	s.Logf("precision %s", prec)
	torch.ManualSeed(cm.Seed)
	return s, nil
}

// Logf sends a log line to the run's events.
func (s *Session) Logf(format string, args ...any) {
	s.emit(train.Message{Text: fmt.Sprintf(format, args...)})
}

// Events is the run's event sink: the one Begin was given, after Begin's
// own lines.
func (s *Session) Events() train.Sink {
	if s.sink == nil {
		return nil
	}
	return s.emit
}

func (s *Session) emit(e train.Event) {
	if s.sink == nil {
		return
	}
	if _, line := e.(train.Message); line && !s.started {
		s.held = append(s.held, e)
		return
	}
	s.Started()
	s.sink(e)
}

// Started says the run's set-up is done and its input checked (the
// checkpoint directory too): the lines held until now are written, and
// those after as they come. Session.Run calls it before Job.Start; a
// recipe with its own loop calls it once its checks are done.
func (s *Session) Started() {
	s.started = true
	for _, h := range s.held {
		s.sink(h)
	}
	s.held = nil
}

// End lifts the memory cap Begin set.
func (s *Session) End() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
	s.undo = nil
}

// capMemory applies MemoryLimit (bytes with a unit, or a fraction) or
// MemoryFraction to the device: the one place torchfit's recipes cap it.
func (s *Session) capMemory(cm Common) error {
	dev := cm.Device
	switch {
	case cm.MemoryLimit != "":
		bytes, frac, err := torch.ParseMemory(cm.MemoryLimit)
		if err != nil {
			return &ConfigError{Field: "memory-limit", Value: cm.MemoryLimit, Err: err}
		}
		if frac > 0 {
			err = torch.SetMemoryFraction(dev, frac)
		} else {
			err = torch.SetMemoryLimit(dev, bytes)
		}
		if err != nil {
			return &ConfigError{Field: "memory-limit", Value: cm.MemoryLimit, Err: err}
		}
		s.Logf("memory limit on %v: %s", dev, cm.MemoryLimit)
	case cm.MemoryFraction > 0:
		if err := torch.SetMemoryFraction(dev, cm.MemoryFraction); err != nil {
			return &ConfigError{Field: "memory-fraction", Value: cm.MemoryFraction, Err: err}
		}
		s.Logf("memory limit on %v: %.2f of the device", dev, cm.MemoryFraction)
	default:
		return nil
	}
	s.undo = append(s.undo, func() { _ = torch.SetMemoryLimit(dev, 0) })
	return nil
}
