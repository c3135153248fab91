package distributed

/*
#include <stdlib.h>
#include "dist.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
)

// Bucket sizes (PyTorch's DistributedDataParallel: bucket_cap_mb=25, and a
// first bucket of 1 MiB so that communication starts early in backward).
const (
	DefaultBucketBytes      = 25 << 20
	DefaultFirstBucketBytes = 1 << 20
)

// DataParallelOptions configure a DataParallel.
type DataParallelOptions struct {
	// BucketBytes caps a gradient bucket (0: DefaultBucketBytes).
	BucketBytes int64
	// FirstBucketBytes caps the first bucket, the last layers' gradients,
	// ready first (0: DefaultFirstBucketBytes; negative: BucketBytes).
	FirstBucketBytes int64
	// AfterBackward all-reduces every bucket once backward has ended
	// instead of as their gradients become ready (no overlap): what
	// pytorch/examples' C++ dist-mnist does, kept for comparison.
	AfterBackward bool
	// NoBufferSync leaves buffers (batch-norm statistics) alone; by
	// default rank 0's are broadcast before each window's first forward, as
	// DistributedDataParallel does (broadcast_buffers=True).
	NoBufferSync bool
}

// ReduceStats accumulate what the reducer did over the optimizer steps.
type ReduceStats struct {
	Steps int // windows reduced
	// Buckets and Bytes are per step.
	Buckets int
	Bytes   int64
	// InBackward counts buckets started by backward's hooks (the rest
	// started after backward).
	InBackward int
	// Wait is the time spent after backward waiting for the all-reduce:
	// the communication backward did not hide. Copy is the time copying
	// the sums back into the gradients.
	Wait, Copy time.Duration
}

// DataParallel makes a model's training data parallel over a Group, as
// PyTorch's DistributedDataParallel does: at creation rank 0's parameters
// and buffers are broadcast to every rank; each rank computes gradients on
// its own shard of the batch; the gradients are summed over the ranks in
// buckets whose all-reduce starts during backward as soon as the bucket's
// gradients are accumulated (autograd hooks on the parameters' gradient
// accumulators), so communication overlaps the rest of backward. Only the
// last backward of an accumulation window syncs (PyTorch's no_sync for the
// others). It implements train.Parallel: give it to train.Config.Parallel,
// which weights each rank's loss by its share of the items counted over
// all ranks, so that the sum is the global batch's mean gradient — also
// when ranks hold different numbers of samples (an epoch's short last
// batch).
//
// The model's parameters must stay the same tensors (create it after the
// model is on its device and before training).
type DataParallel struct {
	g       *Group
	opt     DataParallelOptions
	mu      sync.Mutex
	r       C.tfd_reducer
	buffers []*torch.Tensor
	buckets []int64
	stats   ReduceStats
}

// NewDataParallel broadcasts model's parameters and buffers from rank 0
// and sets up the gradient reducer. Every rank calls it.
func NewDataParallel(g *Group, model nn.Module, opt DataParallelOptions) (*DataParallel, error) {
	if opt.BucketBytes == 0 {
		opt.BucketBytes = DefaultBucketBytes
	}
	if opt.BucketBytes < 0 {
		return nil, usagef("bucket size %d bytes", opt.BucketBytes)
	}
	switch {
	case opt.FirstBucketBytes == 0:
		opt.FirstBucketBytes = min(DefaultFirstBucketBytes, opt.BucketBytes)
	case opt.FirstBucketBytes < 0:
		opt.FirstBucketBytes = opt.BucketBytes
	}
	params := nn.Tensors(nn.Parameters(model))
	d := &DataParallel{g: g, opt: opt, buffers: nn.Tensors(nn.Buffers(model))}
	// Parameters and buffers start equal everywhere.
	var err error
	torch.NoGrad(func() {
		if err = g.BroadcastCoalesced(0, opt.BucketBytes, params...); err == nil {
			err = g.BroadcastCoalesced(0, opt.BucketBytes, d.buffers...)
		}
	})
	if err != nil {
		return nil, err
	}
	hooks := C.int32_t(1)
	if opt.AfterBackward {
		hooks = 0
	}
	h, err := g.handle("data parallel")
	if err != nil {
		return nil, err
	}
	var r C.tfd_reducer
	e := withTensors(params, func(p *C.tf_tensor) C.tfd_err {
		return C.tfd_reducer_new(h, p, C.int32_t(len(params)), C.int64_t(opt.BucketBytes), C.int64_t(opt.FirstBucketBytes), hooks, &r)
	})
	if err := check("data parallel", e); err != nil {
		return nil, withRank(err, g.rank)
	}
	d.r = r
	var n C.int32_t
	if err := check("data parallel", C.tfd_reducer_buckets(r, nil, 0, &n)); err == nil && n > 0 {
		sizes := make([]C.int64_t, n)
		C.tfd_reducer_buckets(r, &sizes[0], n, &n)
		for _, s := range sizes {
			d.buckets = append(d.buckets, int64(s))
		}
	}
	runtime.SetFinalizer(d, (*DataParallel).Close)
	return d, nil
}

// Group returns the process group.
func (d *DataParallel) Group() *Group { return d.g }

// Rank returns this process's rank.
func (d *DataParallel) Rank() int { return d.g.rank }

// World returns the number of ranks.
func (d *DataParallel) World() int { return d.g.size }

// Buckets returns the gradient buckets' sizes in bytes, in the order their
// all-reduces run.
func (d *DataParallel) Buckets() []int64 { return d.buckets }

// Stats returns what the reducer did so far.
func (d *DataParallel) Stats() ReduceStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// ResetStats zeroes the counters.
func (d *DataParallel) ResetStats() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats = ReduceStats{}
}

// SumFloats adds vals over the ranks, in place.
func (d *DataParallel) SumFloats(vals []float64) error { return d.g.SumFloats(vals) }

// StartWindow runs before a window's first forward: rank 0's buffers are
// broadcast (unless NoBufferSync).
func (d *DataParallel) StartWindow() error {
	if d.opt.NoBufferSync || len(d.buffers) == 0 {
		return nil
	}
	var err error
	torch.NoGrad(func() { err = d.g.BroadcastCoalesced(0, d.opt.BucketBytes, d.buffers...) })
	return err
}

// BeforeBackward arms the reducer for the next backward: sync for the last
// micro-batch of a window (its backward starts the all-reduce), not for the
// others (gradients accumulate locally).
func (d *DataParallel) BeforeBackward(sync bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.r == nil {
		return &Error{Op: "data parallel", Msg: "closed", Rank: d.g.rank}
	}
	s := C.int32_t(0)
	if sync {
		s = 1
	}
	return withRank(check("data parallel", C.tfd_reducer_arm(d.r, s)), d.g.rank)
}

// AfterBackward finishes a synced backward: buckets backward did not start
// are started, every bucket is waited for, and the sums are copied into
// the gradients. After a backward that was not synced it does nothing.
func (d *DataParallel) AfterBackward() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.r == nil {
		return &Error{Op: "data parallel", Msg: "closed", Rank: d.g.rank}
	}
	var st C.tfd_reduce_stats
	if err := check("data parallel", C.tfd_reducer_finish(d.r, &st)); err != nil {
		return withRank(err, d.g.rank)
	}
	if st.buckets > 0 {
		d.stats.Steps++
		d.stats.Buckets = int(st.buckets)
		d.stats.Bytes = int64(st.bytes)
		d.stats.InBackward += int(st.launched_in_backward)
		d.stats.Wait += time.Duration(st.wait_ns)
		d.stats.Copy += time.Duration(st.copy_ns)
	}
	return nil
}

// Close releases the reducer (its hooks become no-ops). The group stays
// open.
func (d *DataParallel) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.r != nil {
		C.tfd_reducer_free(d.r)
		d.r = nil
	}
	return nil
}

func (d *DataParallel) String() string {
	mode := "during backward"
	if d.opt.AfterBackward {
		mode = "after backward"
	}
	return fmt.Sprintf("data parallel over %v: %d gradient buckets, all-reduced %s", d.g, len(d.buckets), mode)
}
