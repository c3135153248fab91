package cudagraph

import (
	"errors"
	"fmt"
	"sync"

	"github.com/torchfit/torchfit/torch"
)

// ErrNoCUDA is returned where CUDA graphs cannot run: a binary built
// without the cuda tag, or no such CUDA device on this machine.
var ErrNoCUDA = errors.New("cudagraph: needs CUDA (the cuda build tag and a CUDA device)")

// ErrArg is an invalid argument: a nil step, a device that is not CUDA, a
// negative warm-up count, a graph already freed.
var ErrArg = errors.New("cudagraph: invalid argument")

// DefaultWarmup is the number of side-stream runs of the step before the
// capture when Options.Warmup is 0 (PyTorch's examples use 3).
const DefaultWarmup = 3

// Options of Capture.
type Options struct {
	// Warmup is how many times the step runs on the side stream before the
	// capture (0: DefaultWarmup; negative: invalid). Each run is a real
	// training step: it updates the weights.
	Warmup int
}

// Graph is a captured step. Its methods are safe for concurrent use.
type Graph struct {
	mu  sync.Mutex
	h   handle
	dev torch.Device
}

// Built reports whether this binary was built with CUDA graphs (the cuda
// build tag); Available also needs a device.
func Built() bool { return built }

// Available reports whether Capture can run on dev here.
func Available(dev torch.Device) bool {
	return built && dev.IsCUDA() && dev.Index >= 0 && dev.Index < torch.CUDADeviceCount()
}

func checkArgs(dev torch.Device, step func() error, o Options) error {
	switch {
	case step == nil:
		return fmt.Errorf("%w: nil step", ErrArg)
	case !dev.IsCUDA():
		return fmt.Errorf("%w: device %v is not a CUDA device", ErrArg, dev)
	case o.Warmup < 0:
		return fmt.Errorf("%w: warm-up %d < 0", ErrArg, o.Warmup)
	case !built:
		return fmt.Errorf("%w: torchfit was built without the cuda tag", ErrNoCUDA)
	case dev.Index < 0 || dev.Index >= torch.CUDADeviceCount():
		return fmt.Errorf("%w: no device %v (%d CUDA devices)", ErrNoCUDA, dev, torch.CUDADeviceCount())
	}
	return nil
}

// ErrPanic is a step that panicked with something other than a
// *torch.Error (which comes back as itself).
var ErrPanic = errors.New("cudagraph: the step panicked")

// run calls step, turning any panic into an error, so that Capture always
// ends the capture and restores the stream.
func run(step func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	if perr := torch.Try(func() { err = step() }); perr != nil {
		return perr
	}
	return err
}

// Capture warms step up on a side stream of dev (o.Warmup runs), captures
// one run of it into a CUDA graph and returns the graph; the capture's run
// computes nothing (a captured stream only records), so the weights have
// taken o.Warmup steps when Capture returns. step runs on torch.Main()'s
// thread; what it must respect is in the package documentation. An error
// from step, a panic with a *torch.Error in it, or libtorch's refusal to
// capture (an operation that synchronises, say) is returned wrapped; the
// stream and the device are restored then.
func Capture(dev torch.Device, step func() error, o Options) (*Graph, error) {
	if err := checkArgs(dev, step, o); err != nil {
		return nil, err
	}
	warm := o.Warmup
	if warm == 0 {
		warm = DefaultWarmup
	}
	// Tensors left to the garbage collector are released now, not by a
	// finalizer in the middle of the capture.
	torch.CollectGarbage()
	var g *Graph
	err := torch.Main().DoErr(func() error {
		h, err := nativeNew(dev.Index)
		if err != nil {
			return fmt.Errorf("cudagraph: new graph on %v: %w", dev, err)
		}
		fail := func(err error) error {
			if ferr := nativeFree(h); ferr != nil {
				err = fmt.Errorf("%w (and freeing the graph: %v)", err, ferr)
			}
			return err
		}
		if err := nativeEnter(h); err != nil {
			return fail(fmt.Errorf("cudagraph: side stream: %w", err))
		}
		for i := 0; i < warm; i++ {
			if err := run(step); err != nil {
				return fail(fmt.Errorf("cudagraph: warm-up run %d: %w", i+1, err))
			}
		}
		if err := nativeCaptureBegin(h); err != nil {
			return fail(fmt.Errorf("cudagraph: capture begin: %w", err))
		}
		stepErr := run(step)
		if stepErr != nil {
			return fail(fmt.Errorf("cudagraph: captured run: %w", stepErr))
		}
		if err := nativeCaptureEnd(h); err != nil {
			return fail(fmt.Errorf("cudagraph: capture end: %w", err))
		}
		if err := nativeExit(h); err != nil {
			return fail(fmt.Errorf("cudagraph: leaving the side stream: %w", err))
		}
		g = &Graph{h: h, dev: dev}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// Replay launches the captured step once on the current stream of the
// graph's device (asynchronously: synchronise, or read an output, to wait
// for it). Copy the step's inputs into its static tensors before each
// replay.
func (g *Graph) Replay() error {
	if g == nil {
		return fmt.Errorf("%w: nil graph", ErrArg)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.h == nil {
		return fmt.Errorf("%w: graph already freed", ErrArg)
	}
	return torch.Main().DoErr(func() error {
		if err := nativeReplay(g.h); err != nil {
			return fmt.Errorf("cudagraph: replay: %w", err)
		}
		return nil
	})
}

// Device is the graph's device.
func (g *Graph) Device() torch.Device { return g.dev }

// Free destroys the graph and returns its memory pool to the caching
// allocator. The tensors the captured step made must not be used by a
// replay afterwards (there is none: the graph is gone), but they stay
// valid tensors. Freeing twice, or a nil graph, does nothing.
func (g *Graph) Free() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.h == nil {
		return nil
	}
	h := g.h
	g.h = nil
	return torch.Main().DoErr(func() error {
		if err := nativeFree(h); err != nil {
			return fmt.Errorf("cudagraph: free: %w", err)
		}
		return nil
	})
}
