package memplan

import (
	"errors"
	"fmt"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// Snapshot is a copy, on the CPU, of what a training step changes: a
// model's parameters and buffers, optimizers' state, scalers' state and the
// CPU random generator. Restore puts it back, so a dry run, a batch-size
// search or a planner leaves the run where it was.
type Snapshot struct {
	targets []*torch.Tensor // the model's tensors
	saved   []*torch.Tensor // their copies
	opts    []nn.Optimizer
	optSt   []map[string]*torch.Tensor
	scalers []*amp.GradScaler
	scSt    []map[string]float64
	rng     *torch.Tensor
	// Bytes is what the copies take on the CPU.
	Bytes int64
}

// NewSnapshot copies m's parameters and buffers (m may be nil), the
// optimizers' state, the scalers' state and the CPU generator's state to
// the CPU.
func NewSnapshot(m nn.Module, opts []nn.Optimizer, scalers []*amp.GradScaler) (*Snapshot, error) {
	for k, o := range opts {
		if o == nil {
			return nil, optErr("NewSnapshot", "opts", "optimizer %d is nil", k)
		}
	}
	for k, sc := range scalers {
		if sc == nil {
			return nil, optErr("NewSnapshot", "scalers", "scaler %d is nil", k)
		}
	}
	s := &Snapshot{opts: opts, scalers: scalers}
	err := torch.TidyErr(func() error {
		keep := func(t *torch.Tensor) *torch.Tensor {
			c := t.To(torch.CPU, t.DType()).Clone().Keep()
			s.Bytes += c.NBytes()
			return c
		}
		if m != nil {
			for _, p := range append(nn.Parameters(m), nn.Buffers(m)...) {
				s.targets = append(s.targets, p.T)
				s.saved = append(s.saved, keep(p.T))
			}
		}
		for _, o := range opts {
			st := map[string]*torch.Tensor{}
			for _, n := range o.State() {
				st[n.Name] = keep(n.T)
			}
			s.optSt = append(s.optSt, st)
		}
		for _, sc := range scalers {
			s.scSt = append(s.scSt, sc.State())
		}
		s.rng = torch.RNGState().Keep()
		s.Bytes += s.rng.NBytes()
		return nil
	})
	if err != nil {
		s.Free()
		return nil, fmt.Errorf("memplan: snapshot: %w", err)
	}
	return s, nil
}

// Restore puts the snapshot back: values are copied into the model's own
// tensors (which keep their identity), optimizers and scalers load their
// saved state (state created since is released), every parameter's
// gradient is set to none and the generator is rewound.
func (s *Snapshot) Restore() error {
	err := torch.TidyErr(func() error {
		torch.NoGrad(func() {
			for k, t := range s.targets {
				t.CopyFrom(s.saved[k])
				if t.RequiresGrad() {
					t.SetGrad(nil)
				}
			}
		})
		for k, o := range s.opts {
			o.ZeroGrad()
			if err := o.LoadState(s.optSt[k]); err != nil {
				return err
			}
		}
		for k, sc := range s.scalers {
			sc.Reset()
			if err := sc.LoadState(s.scSt[k]); err != nil {
				return err
			}
		}
		torch.SetRNGState(s.rng)
		return nil
	})
	if err != nil {
		return fmt.Errorf("memplan: restoring a snapshot: %w", err)
	}
	return nil
}

// Free releases the copies.
func (s *Snapshot) Free() {
	for _, t := range s.saved {
		t.Free()
	}
	for _, st := range s.optSt {
		for _, t := range st {
			t.Free()
		}
	}
	if s.rng != nil {
		s.rng.Free()
	}
	s.saved, s.optSt, s.rng = nil, nil, nil
}

// Measurement is a measured training step.
type Measurement struct {
	// Held is what the device holds between steps (weights, optimizer
	// state, and anything else allocated there), in bytes.
	Held int64
	// Peak is the step's high-water mark above Held, in bytes.
	Peak int64
	// Micro is one micro-batch's forward and backward.
	Micro time.Duration
	// Update is the optimizer step that ends an accumulation window (zero
	// when Micro includes it).
	Update time.Duration
}

// Need is the device memory the step needs: Held + Peak.
func (m Measurement) Need() int64 { return m.Held + m.Peak }

// DryRun measures a training step on a model and leaves the model,
// optimizers, scalers and random generator as it found them (a Snapshot
// taken before and restored after, also after an error).
type DryRun struct {
	Device     torch.Device
	Model      nn.Module // may be nil
	Optimizers []nn.Optimizer
	Scalers    []*amp.GradScaler
	// Warmup is the number of unmeasured windows run first (default 1):
	// optimizers create their state in their first step, libraries their
	// workspaces on first use. Use NoWarmup for none.
	Warmup int
	// Repeat is the number of measured windows (default 1); the times
	// reported are the fastest, the peak the highest.
	Repeat int
}

// NoWarmup asks DryRun for no warm-up window.
const NoWarmup = -1

// Run runs accumulation windows of min(accum, 2) micro-batches followed by
// the optimizer update, each call inside its own tensor scope, on
// torch.Main(): two micro-batches because from the second on the
// gradients of the first are held while activations are at their peak;
// more add time but no memory. micro runs one micro-batch's forward and
// backward (autocast, scaling and loss weighting are the caller's);
// update steps the optimizers and sets the gradients to none; the
// autocast cache is cleared after it, as the training loop does.
//
// The measurement: Held is what the device holds once the warm-up is done
// (the snapshot's copies excluded when the device is the CPU); Peak is the
// highest allocation of any window, warm-up included, above Held; Micro
// the fastest mean micro-batch time of a measured window and Update its
// fastest update. An error (errors.Is(err, torch.ErrOutOfMemory) when the
// step ran out of memory) comes back wrapped, with the snapshot restored;
// memory still allocated once everything is restored (and cuBLAS's
// workspaces freed: torch.ClearBlasWorkspaces) is ErrLeak.
func (d DryRun) Run(accum int, micro, update func() error) (m Measurement, err error) {
	torch.Main().Do(func() { m, err = d.run(accum, micro, update) })
	return m, err
}

func (d DryRun) run(accum int, micro, update func() error) (Measurement, error) {
	var m Measurement
	if accum < 1 {
		return m, optErr("DryRun.Run", "accum", "%d (want >= 1)", accum)
	}
	if micro == nil || update == nil {
		return m, optErr("DryRun.Run", "micro/update", "both are required")
	}
	warmup, repeat := d.Warmup, d.Repeat
	if warmup == 0 {
		warmup = 1
	}
	warmup = max(warmup, 0)
	if repeat < 1 {
		repeat = 1
	}
	dev := d.Device
	if !dev.IsCUDA() {
		dev = torch.CPU
	}
	if _, err := torch.EmptyCache(); err != nil {
		return m, err
	}
	// cuBLAS's workspaces, made by the first product on each thread and
	// kept, would otherwise count as the dry run's leak.
	if dev.IsCUDA() {
		if _, err := torch.ClearBlasWorkspaces(); err != nil {
			return m, err
		}
	}
	snap, err := NewSnapshot(d.Model, d.Optimizers, d.Scalers)
	if err != nil {
		return m, err
	}
	defer snap.Free()
	var local int64 // the snapshot's bytes on the measured device
	if dev == torch.CPU {
		local = snap.Bytes
	}
	start, err := torch.MemoryStats(dev)
	if err != nil {
		return m, err
	}
	if err := torch.ResetPeakMemory(dev); err != nil {
		return m, err
	}
	window := func() (microT, updateT time.Duration, err error) {
		k := min(accum, 2)
		for i := 0; i < k; i++ {
			t0 := time.Now()
			if err := torch.TidyErr(micro); err != nil {
				return 0, 0, fmt.Errorf("memplan: dry run: micro-batch %d of %d: %w", i+1, k, err)
			}
			microT += time.Since(t0)
		}
		t0 := time.Now()
		if err := torch.TidyErr(update); err != nil {
			return 0, 0, fmt.Errorf("memplan: dry run: update: %w", err)
		}
		updateT = time.Since(t0)
		// As the training loop does after each step: what autocast cached
		// (low-precision weight copies, and, with checkpointing, the casts
		// made while recomputing in backward) is released.
		torch.ClearAutocastCache()
		return microT / time.Duration(k), updateT, nil
	}
	measure := func() error {
		for i := 0; i < warmup; i++ {
			if _, _, err := window(); err != nil {
				return err
			}
		}
		st, err := torch.MemoryStats(dev)
		if err != nil {
			return err
		}
		m.Held = st.Allocated - local
		for i := 0; i < repeat; i++ {
			mt, ut, err := window()
			if err != nil {
				return err
			}
			if i == 0 || mt < m.Micro {
				m.Micro = mt
			}
			if i == 0 || ut < m.Update {
				m.Update = ut
			}
		}
		st, err = torch.MemoryStats(dev)
		if err != nil {
			return err
		}
		m.Peak = st.PeakAllocated - local - m.Held
		return nil
	}
	err = measure()
	if rerr := snap.Restore(); rerr != nil && err == nil {
		err = rerr
	}
	// A candidate that ran out of memory must leave nothing behind either:
	// the next one would be measured over what it left (and a plan would
	// find that nothing fits).
	oom := errors.Is(err, torch.ErrOutOfMemory)
	if (err == nil || oom) && dev.IsCUDA() {
		if _, cerr := torch.ClearBlasWorkspaces(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err == nil || oom {
		st, serr := torch.MemoryStats(dev)
		switch {
		case serr != nil:
			if err == nil {
				err = serr
			}
		case st.Allocated > start.Allocated && oom:
			err = fmt.Errorf("memplan: dry run: %w: %s after running out of memory (%v) (micro and update must release what they create, also when they fail; Keep nothing)",
				ErrLeak, torch.FormatBytes(st.Allocated-start.Allocated), err)
		case st.Allocated > start.Allocated:
			err = fmt.Errorf("memplan: dry run: %w: %s (micro and update must release what they create; Keep nothing)",
				ErrLeak, torch.FormatBytes(st.Allocated-start.Allocated))
		}
	}
	if _, eerr := torch.EmptyCache(); eerr != nil && err == nil {
		err = eerr
	}
	if err != nil {
		return Measurement{}, err
	}
	return m, nil
}

// Workspaces frees cuBLAS's workspaces and makes them again as a training
// step does — matrix products with and without a bias, forward on this
// thread and backward on the autograd engine's device thread — and returns
// the bytes they hold: libtorch keeps them from a thread's first product to
// the end of the process (on an H100 with 2.11, 32 MiB for each of cuBLAS
// and cuBLASLt a thread), and the allocator counts them as allocated. A
// table that measures configurations one after another takes them out of
// its baseline with this, or the first configuration carries them. 0 on the
// CPU.
func Workspaces(dev torch.Device) (int64, error) {
	if !dev.IsCUDA() {
		return 0, nil
	}
	if _, err := torch.ClearBlasWorkspaces(); err != nil {
		return 0, err
	}
	before, err := torch.MemoryStats(dev)
	if err != nil {
		return 0, err
	}
	err = torch.TidyErr(func() error {
		for _, dt := range []torch.DType{torch.Float32, torch.BFloat16, torch.Float16} {
			a := torch.Ones([]int64{16, 16}, dt, dev).SetRequiresGrad(true)
			bias := torch.Ones([]int64{16}, dt, dev).SetRequiresGrad(true)
			torch.Linear(a.Matmul(a), a, bias).Sum().Backward()
		}
		return nil
	})
	if err == nil {
		err = torch.Synchronize(dev)
	}
	if err != nil {
		return 0, err
	}
	after, err := torch.MemoryStats(dev)
	if err != nil {
		return 0, err
	}
	return after.Allocated - before.Allocated, nil
}
