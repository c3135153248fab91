package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/torchfit/torchfit/torch"
)

// Options configure a Loader. The zero value loads batches of one sample,
// in order, in the caller's goroutine, and leaves them on the CPU.
type Options struct {
	BatchSize int    // samples per batch (default 1)
	Shuffle   bool   // permute the samples each epoch
	Seed      uint64 // shuffle seed: epoch e uses the permutation of PCG(Seed, e)
	DropLast  bool   // drop the last batch of an epoch when it is short
	// Workers is the number of goroutines building batches; 0 builds each
	// batch in Next, in the caller's goroutine. At most MaxWorkers.
	Workers int
	// Prefetch is the number of batches per worker that may be built ahead
	// (default 2): at most Workers×Prefetch batches exist undelivered
	// (MaxAhead at most).
	Prefetch int
	// Device is where delivered batches live. CUDA: batches are pinned in
	// the workers and copied (non-blocking) when Next hands them over. The
	// zero value is the CPU (no move).
	Device torch.Device
	// Resume, when set, starts at that position (its Seed replaces Seed).
	Resume *State
	// Shard makes the loader deliver one rank's part of each batch, for
	// data-parallel training (see Shard). The zero value: one process.
	Shard Shard
}

// Shard is a rank's place in a data-parallel run. Every rank's loader draws
// the same permutation (same Seed) and cuts it into global batches of
// BatchSize × World samples; rank Rank gets its contiguous part of each, so
// the ranks' batches are disjoint and together are the batch one process
// with BatchSize × World would see (PyTorch's DistributedSampler draws a
// shard per epoch the same way). Each rank has the same number of batches
// per epoch. A short last global batch (DropLast false) is split as evenly
// as it goes: parts differ by at most one sample, and a rank may get none
// (an empty batch) — the training core weights each rank's loss by its
// share of the samples counted over all ranks, so the mean stays right.
// World 0 or 1 is one process.
type Shard struct {
	Rank, World int
}

// State is a loader's position: the next batch it delivers is batch Batch
// of epoch Epoch, in the order given by Seed. It is plain data: store it in
// a checkpoint and pass it as Options.Resume to continue.
type State struct {
	Epoch int    `json:"epoch"`
	Batch int    `json:"batch"`
	Seed  uint64 `json:"seed"`
	// Samples counts the samples of epoch Epoch that the batches before
	// Batch held over all ranks, and World the ranks they were split over:
	// set (World > 0) by a sharded loader, and by one whose epoch began
	// at a resumed position, so that a run can resume with another number
	// of ranks or another batch size: the next batch then starts at sample
	// Samples of the epoch's order, none skipped or repeated. A position
	// without them (World 0) was taken at the loader's global batch size.
	Samples int `json:"samples,omitempty"`
	World   int `json:"world,omitempty"`
}

// Stats are a loader's counters.
type Stats struct {
	Batches int           // batches delivered
	Wait    time.Duration // time Next spent waiting for a batch to be built
}

// BatchError is the error of a batch that could not be built.
type BatchError struct {
	Epoch, Batch int
	Index        int // dataset index whose Get failed; -1 when collate failed
	Err          error
}

func (e *BatchError) Error() string {
	where := "collate"
	if e.Index >= 0 {
		where = fmt.Sprintf("sample %d", e.Index)
	}
	return fmt.Sprintf("data: epoch %d batch %d, %s: %v", e.Epoch, e.Batch, where, e.Err)
}

func (e *BatchError) Unwrap() error { return e.Err }

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("data: loader closed")

// Loader batches a Dataset. Its methods are not safe for concurrent use:
// one goroutine iterates (workers run inside).
type Loader[S any, B TensorBatch] struct {
	ds      Dataset[S]
	collate func([]S) (B, error)
	opt     Options
	n       int // dataset length, fixed at creation
	nb      int // batches per epoch
	cuda    bool
	world   int // ranks sharing each batch (1: none)
	gb      int // samples per global batch: BatchSize × world
	// base is where batch 0 of epoch baseEpoch starts in its order: 0,
	// except in the epoch a run resumed in with another number of ranks.
	base, baseEpoch int

	epoch, batch int
	perm         []int // this epoch's order (nil until needed)
	pipe         *pipeline[B]
	err          error // sticky error
	closed       bool
	stats        Stats
}

// MaxWorkers and MaxAhead bound Options.Workers and Workers×Prefetch:
// each worker may hold an OS thread while it builds a batch (the Go
// runtime stops the process at 10000 threads), and each batch built ahead
// holds its tensors. NewLoader refuses more with an error.
const (
	MaxWorkers = 1024
	MaxAhead   = 1 << 16
)

// defaultPrefetch is Options.Prefetch when it is 0.
const defaultPrefetch = 2

// Resident bounds, in batches, the CPU memory a loader with these options
// holds while its caller holds a batch (a caller that frees each batch
// before asking for the next): that batch and, with workers, the
// Workers×Prefetch built ahead, and while each worker builds one its
// samples before collation (a batch's worth each). Without workers a batch
// is built in Next, while the caller holds none. A memory planner on the
// CPU holds as many (recipes.NewWorst): a training step runs while the
// workers build.
func (o Options) Resident() int {
	if o.Workers <= 0 {
		return 1
	}
	p := o.Prefetch
	if p == 0 {
		p = defaultPrefetch
	}
	return 1 + o.Workers*(max(p, 0)+1)
}

// NewLoader returns a loader over ds. Close it when done.
func NewLoader[S any, B TensorBatch](ds Dataset[S], collate func([]S) (B, error), opt Options) (*Loader[S, B], error) {
	if ds == nil || collate == nil {
		return nil, fmt.Errorf("data: NewLoader: nil dataset or collate")
	}
	if opt.BatchSize == 0 {
		opt.BatchSize = 1
	}
	if opt.Prefetch == 0 {
		opt.Prefetch = defaultPrefetch
	}
	if opt.BatchSize < 0 || opt.Workers < 0 || opt.Prefetch < 0 {
		return nil, fmt.Errorf("data: NewLoader: negative BatchSize, Workers or Prefetch (%d, %d, %d)",
			opt.BatchSize, opt.Workers, opt.Prefetch)
	}
	if opt.Workers > MaxWorkers || opt.Prefetch > MaxAhead || opt.Workers*opt.Prefetch > MaxAhead {
		return nil, fmt.Errorf("data: NewLoader: %d Workers × %d Prefetch: at most %d workers and %d batches built ahead",
			opt.Workers, opt.Prefetch, MaxWorkers, MaxAhead)
	}
	l := &Loader[S, B]{ds: ds, collate: collate, opt: opt, n: ds.Len(), world: 1}
	if l.n < 0 {
		return nil, fmt.Errorf("data: NewLoader: dataset length %d", l.n)
	}
	if sh := opt.Shard; sh.World > 1 || sh.Rank != 0 {
		if sh.World < 1 || sh.Rank < 0 || sh.Rank >= sh.World {
			return nil, fmt.Errorf("data: NewLoader: shard rank %d of %d", sh.Rank, sh.World)
		}
		l.world = sh.World
	}
	l.gb = opt.BatchSize * l.world
	l.nb = l.batches(0)
	switch opt.Device.Type {
	case torch.DeviceCPU:
	case torch.DeviceCUDA:
		if !torch.CUDAAvailable() {
			return nil, fmt.Errorf("data: NewLoader: device %v requested but CUDA is not available", opt.Device)
		}
		l.cuda = true
	default:
		return nil, fmt.Errorf("data: NewLoader: unsupported device %v", opt.Device)
	}
	if r := opt.Resume; r != nil {
		if r.Epoch < 0 || r.Batch < 0 || (r.World == 0 && r.Batch > l.nb) || r.Samples < 0 || r.Samples > l.n || r.World < 0 {
			return nil, fmt.Errorf("data: NewLoader: resume state %+v outside [0, %d] batches per epoch", *r, l.nb)
		}
		l.opt.Seed = r.Seed
		l.epoch, l.batch = r.Epoch, r.Batch
		if r.World > 0 {
			// A position in samples (perhaps of another number of ranks or
			// another batch size): continue at the same sample of the
			// epoch's order.
			l.batch, l.base, l.baseEpoch = r.Samples/l.gb, r.Samples%l.gb, r.Epoch
			l.nb = l.batches(l.epoch)
		}
	}
	return l, nil
}

// batches returns the number of batches of epoch e.
func (l *Loader[S, B]) batches(e int) int {
	n := l.n - l.baseOf(e)
	nb := n / l.gb
	if !l.opt.DropLast && n%l.gb != 0 {
		nb++
	}
	return nb
}

func (l *Loader[S, B]) baseOf(e int) int {
	if e == l.baseEpoch {
		return l.base
	}
	return 0
}

// span returns the positions in epoch e's order of this rank's part of
// batch k.
func (l *Loader[S, B]) span(e, k int) (lo, hi int) {
	lo = l.baseOf(e) + k*l.gb
	hi = min(lo+l.gb, l.n)
	if l.world == 1 {
		return lo, hi
	}
	n, r := hi-lo, l.opt.Shard.Rank
	part, extra := n/l.world, n%l.world
	lo += r*part + min(r, extra)
	hi = lo + part
	if r < extra {
		hi++
	}
	return lo, hi
}

// Len returns the number of batches per epoch (of the current one, which
// may have one less after a resume with another number of ranks).
func (l *Loader[S, B]) Len() int { return l.nb }

// State returns the position of the next batch.
func (l *Loader[S, B]) State() State {
	st := State{Epoch: l.epoch, Batch: l.batch, Seed: l.opt.Seed}
	if l.world > 1 || l.baseOf(l.epoch) != 0 {
		st.Samples = min(l.baseOf(l.epoch)+l.batch*l.gb, l.n)
		st.World = l.world
	}
	return st
}

// Stats returns the loader's counters.
func (l *Loader[S, B]) Stats() Stats { return l.stats }

// Permutation returns the sample order of epoch e (the identity without
// Shuffle): batch k holds positions k·BatchSize … of it (with a Shard, the
// rank's part of positions k·BatchSize·World …).
func (l *Loader[S, B]) Permutation(e int) []int {
	p := make([]int, l.n)
	for i := range p {
		p[i] = i
	}
	if l.opt.Shuffle {
		r := rand.New(rand.NewPCG(l.opt.Seed, uint64(e)))
		for i := len(p) - 1; i > 0; i-- { // Fisher–Yates, fixed here to stay reproducible
			j := int(r.Uint64N(uint64(i + 1)))
			p[i], p[j] = p[j], p[i]
		}
	}
	return p
}

// indices returns the dataset indices of batch k of the current epoch.
func (l *Loader[S, B]) indices(k int) []int {
	lo, hi := l.span(l.epoch, k)
	return l.perm[lo:hi]
}

// Next returns the next batch of the current epoch, or io.EOF at its end;
// the call after io.EOF starts the next epoch. ctx bounds the wait (a
// cancelled wait loses nothing: the next call picks the batch up). The batch
// belongs to the caller (see the package doc).
func (l *Loader[S, B]) Next(ctx context.Context) (B, error) {
	var zero B
	if l.closed {
		return zero, ErrClosed
	}
	if l.err != nil {
		return zero, l.err
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if l.batch >= l.nb {
		// The workers, if any, are already building the next epoch.
		l.epoch, l.batch, l.perm = l.epoch+1, 0, nil
		l.nb = l.batches(l.epoch)
		return zero, io.EOF
	}
	if l.perm == nil {
		l.perm = l.Permutation(l.epoch)
	}
	start := time.Now()
	var r result[B]
	if l.opt.Workers == 0 {
		r = l.build(l.epoch, l.batch, l.indices(l.batch))
	} else {
		if l.pipe == nil {
			l.pipe = l.startPipeline()
		}
		var err error
		if r, err = l.pipe.next(ctx, l.epoch, l.batch); err != nil {
			l.stats.Wait += time.Since(start)
			return zero, err
		}
	}
	l.stats.Wait += time.Since(start)
	if r.panicVal != nil {
		l.err = fmt.Errorf("data: worker panicked building epoch %d batch %d", l.epoch, l.batch)
		l.stopPipeline()
		panic(fmt.Sprintf("data: worker panic building epoch %d batch %d: %v\n\nworker stack:\n%s",
			l.epoch, l.batch, r.panicVal, r.stack))
	}
	if r.err != nil {
		l.err = r.err
		l.stopPipeline()
		return zero, r.err
	}
	if l.cuda {
		if err := toDevice(r.b, l.opt.Device); err != nil {
			freeBatch(r.b)
			l.err = &BatchError{Epoch: l.epoch, Batch: l.batch, Index: -1, Err: fmt.Errorf("moving to %v: %w", l.opt.Device, err)}
			l.stopPipeline()
			return zero, l.err
		}
	}
	l.batch++
	l.stats.Batches++
	return r.b, nil
}

// Epoch iterates the rest of the current epoch: for b, err := range
// l.Epoch(ctx). An error ends the iteration after it is yielded; breaking
// out early leaves the position after the last batch received.
func (l *Loader[S, B]) Epoch(ctx context.Context) iter.Seq2[B, error] {
	return func(yield func(B, error) bool) {
		for {
			b, err := l.Next(ctx)
			if err == io.EOF {
				return
			}
			if !yield(b, err) || err != nil {
				return
			}
		}
	}
}

// Close stops the workers, releases the batches built but not delivered and
// waits for the loader's goroutines to end. Batches already delivered stay
// the caller's. Close is idempotent.
func (l *Loader[S, B]) Close() error {
	l.stopPipeline()
	l.closed = true
	return nil
}

// toDevice moves every tensor of b to d in place, non-blocking (the source
// is pinned). The new tensors are the caller's, in no scope: Assign moves the
// device tensor into the batch's existing *Tensor.
func toDevice[B TensorBatch](b B, d torch.Device) error {
	return torch.Try(func() {
		for _, t := range b.Tensors() {
			t.Assign(t.ToAsync(d, t.DType()))
		}
	})
}

func freeBatch[B TensorBatch](b B) {
	for _, t := range b.Tensors() {
		t.Free()
	}
}

// ---- building a batch ---------------------------------------------------------

type result[B any] struct {
	b        B
	err      error
	panicVal any
	stack    []byte
}

// build makes batch k of the current epoch inside a Tidy scope: samples and
// temporaries are released, the batch's tensors are kept (and pinned when
// the target is CUDA). Errors and *torch.Error panics become r.err; other
// panics are captured for Next to re-raise.
func (l *Loader[S, B]) build(epoch, k int, idx []int) (r result[B]) {
	defer func() {
		if p := recover(); p != nil {
			r = result[B]{panicVal: p, stack: debug.Stack()}
		}
	}()
	var b B
	var built bool
	err := torch.TidyErr(func() error {
		samples := make([]S, len(idx))
		for j, i := range idx {
			var err error
			if perr := torch.Try(func() { samples[j], err = l.ds.Get(i) }); perr != nil {
				err = perr
			}
			if err != nil {
				return &BatchError{Epoch: epoch, Batch: k, Index: i, Err: err}
			}
		}
		var err error
		if perr := torch.Try(func() { b, err = l.collate(samples) }); perr != nil {
			err = perr
		}
		if err != nil {
			return &BatchError{Epoch: epoch, Batch: k, Index: -1, Err: err}
		}
		built = true
		for _, t := range b.Tensors() {
			t.Keep()
		}
		if l.cuda {
			for _, t := range b.Tensors() {
				p, err := t.PinMemory()
				if err != nil {
					return &BatchError{Epoch: epoch, Batch: k, Index: -1, Err: fmt.Errorf("pinning: %w", err)}
				}
				t.Assign(p)
			}
		}
		return nil
	})
	if err != nil {
		if built {
			freeBatch(b)
		}
		return result[B]{err: err}
	}
	return result[B]{b: b}
}

// ---- the worker pipeline ---------------------------------------------------------

type task[B any] struct {
	e, k int
	idx  []int
	done chan result[B] // buffered 1: workers never block on it
}

// pipeline builds batches from the loader's position on, across epochs.
type pipeline[B TensorBatch] struct {
	slots   chan struct{} // counting semaphore: one per undelivered batch
	pending chan *task[B] // tasks in batch order, for the consumer
	cur     *task[B]      // the task Next is waiting on
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (l *Loader[S, B]) startPipeline() *pipeline[B] {
	limit := l.opt.Workers * l.opt.Prefetch
	p := &pipeline[B]{
		slots:   make(chan struct{}, limit),
		pending: make(chan *task[B], limit),
		stop:    make(chan struct{}),
	}
	tasks := make(chan *task[B])
	first, epoch, perm := l.batch, l.epoch, l.perm
	p.wg.Add(1 + l.opt.Workers)
	go func() { // dispatcher: hands out batches in order, at most limit ahead
		defer p.wg.Done()
		defer close(tasks)
		for e := epoch; ; e++ { // l.nb > 0 here: Next starts no pipeline otherwise
			if e != epoch {
				perm = l.Permutation(e)
			}
			for k, nb := first, l.batches(e); k < nb; k++ {
				select {
				case p.slots <- struct{}{}:
				case <-p.stop:
					return
				}
				lo, hi := l.span(e, k)
				t := &task[B]{e: e, k: k, idx: perm[lo:hi], done: make(chan result[B], 1)}
				p.pending <- t // never blocks: len(pending) ≤ slots taken
				select {
				case tasks <- t:
				case <-p.stop:
					return
				}
			}
			first = 0
		}
	}()
	for w := 0; w < l.opt.Workers; w++ {
		go func() {
			defer p.wg.Done()
			for t := range tasks {
				t.done <- l.build(t.e, t.k, t.idx)
			}
		}()
	}
	return p
}

// next waits for the next batch in order and frees its slot.
func (p *pipeline[B]) next(ctx context.Context, epoch, k int) (result[B], error) {
	if p.cur == nil {
		select {
		case p.cur = <-p.pending:
		case <-ctx.Done():
			return result[B]{}, ctx.Err()
		}
		if p.cur.e != epoch || p.cur.k != k {
			panic(fmt.Sprintf("data: internal error: pipeline at epoch %d batch %d, loader at %d/%d", p.cur.e, p.cur.k, epoch, k))
		}
	}
	select {
	case r := <-p.cur.done:
		p.cur = nil
		<-p.slots
		return r, nil
	case <-ctx.Done():
		return result[B]{}, ctx.Err()
	}
}

// stopPipeline ends the workers and frees the batches nobody received.
func (l *Loader[S, B]) stopPipeline() {
	p := l.pipe
	if p == nil {
		return
	}
	l.pipe = nil
	close(p.stop)
	p.wg.Wait()
	drain := func(t *task[B]) {
		select {
		case r := <-t.done:
			if r.err == nil && r.panicVal == nil {
				freeBatch(r.b)
			}
		default: // never handed to a worker
		}
	}
	if p.cur != nil {
		drain(p.cur)
	}
	for {
		select {
		case t := <-p.pending:
			drain(t)
		default:
			return
		}
	}
}
