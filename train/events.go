package train

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
)

// Event is something the training core reports: a step, a memory reading,
// an out-of-memory adaptation, an evaluation, a checkpoint, a message. The
// core never writes to the terminal; a front end (package report) renders
// events as log lines, metrics, a progress bar.
type Event interface{ event() }

// Sink receives events. It is called on the training thread: keep it quick.
type Sink func(Event)

func emit(s Sink, e Event) {
	if s != nil {
		s(e)
	}
}

// Message is a line for the log.
type Message struct{ Text string }

// StepEvent reports an optimizer step.
type StepEvent struct {
	StepInfo
	Epoch int
}

// MemoryEvent reports the allocator after a step (every Config.MemoryEvery steps).
type MemoryEvent struct {
	Step  int
	Stats torch.MemStats
}

// OOMEvent reports a window redone with a smaller micro-batch at the same
// effective batch.
type OOMEvent struct {
	Step             int // the optimizer step the window was for
	From, To         int // micro-batch before and after
	Accum, Effective int // accumulation steps now, and the effective batch
	Err              error
}

// EvalEvent reports an evaluation.
type EvalEvent struct {
	Step, Epoch int
	Values      map[string]float64
	// Text, when set, is the evaluation's log line (a recipe's own, the
	// seed's wording), in place of "epoch N: values": one line for one
	// evaluation.
	Text string
}

// CheckpointEvent reports a checkpoint written (and files pruned).
type CheckpointEvent struct {
	Step   int
	Path   string
	Pruned []string
}

// SkipEvent reports an optimizer step that did not update the parameters.
type SkipEvent struct {
	Step   int
	Reason string
}

func (Message) event()         {}
func (StepEvent) event()       {}
func (MemoryEvent) event()     {}
func (OOMEvent) event()        {}
func (EvalEvent) event()       {}
func (CheckpointEvent) event() {}
func (SkipEvent) event()       {}

// String renders an event as the log line torchfit has always printed.
func (e OOMEvent) String() string {
	return fmt.Sprintf("out of memory at micro-batch %d (step %d): redoing the window with micro-batch %d × %d accumulation steps; effective batch %d unchanged",
		e.From, e.Step, e.To, e.Accum, e.Effective)
}

func (e MemoryEvent) String() string { return fmt.Sprintf("step %d | %s", e.Step, MemoryLine(e.Stats)) }

func (e SkipEvent) String() string {
	return fmt.Sprintf("step %d: %s; skipping the optimizer step", e.Step, e.Reason)
}

// MemoryLine formats allocated, peak and reserved memory as the loop logs it.
func MemoryLine(s torch.MemStats) string {
	return fmt.Sprintf("memory allocated %s | peak %s | reserved %s", torch.FormatBytes(s.Allocated),
		torch.FormatBytes(s.PeakAllocated), torch.FormatBytes(s.Reserved))
}
