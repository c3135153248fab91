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

	"github.com/torchfit/torchfit/torch"
)

// Backend is a process group's communication library.
type Backend string

// Backends.
const (
	Gloo Backend = "gloo" // CPU tensors, TCP (every build)
	NCCL Backend = "nccl" // CUDA tensors (builds with the cuda tag)
)

// HasNCCL reports whether this build has ProcessGroupNCCL (the cuda build
// tag, a CUDA libtorch).
func HasNCCL() bool { return C.tfd_has_nccl() != 0 }

// ReduceOp is how a reduction combines the ranks' values.
type ReduceOp int

// Reductions (c10d::ReduceOp).
const (
	Sum     ReduceOp = 0
	Avg     ReduceOp = 1 // NCCL only in libtorch 1.13
	Product ReduceOp = 2
	Min     ReduceOp = 3
	Max     ReduceOp = 4
)

// Options configure a process group.
type Options struct {
	Backend Backend       // "" is Gloo
	Timeout time.Duration // rendezvous and each collective (0: DefaultTimeout)
	// Host is the address of this machine Gloo binds its sockets to
	// ("": loopback). Init picks the address the route to MASTER_ADDR
	// leaves from.
	Host string
	// Interface, when set, binds Gloo to this network interface instead
	// (GLOO_SOCKET_IFNAME, as in PyTorch).
	Interface string
	// Threads is Gloo's worker threads (0: its default, 2).
	Threads int
}

// Group is a c10d process group: size processes, this one of rank Rank,
// that run collectives together. Every rank must issue the same
// collectives in the same order. Each collective waits up to the group's
// timeout and returns an *Error (ErrTimeout, ErrPeer) instead of hanging or
// aborting; after a failure the group is broken (ErrBroken) and the process
// should stop.
type Group struct {
	mu      sync.Mutex
	h       C.tfd_group
	rank    int
	size    int
	backend Backend
	timeout time.Duration
	store   *Store
	server  *StoreServer // rank 0's, when it hosts the store
	env     Env
}

// NewGroup creates a process group of size ranks that meet in store. Every
// rank calls it at about the same time (it waits up to the timeout for the
// others).
func NewGroup(store *Store, rank, size int, opt Options) (*Group, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, usagef("rank %d of a group of %d", rank, size)
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Backend == "" {
		opt.Backend = Gloo
	}
	var backend C.int32_t
	switch opt.Backend {
	case Gloo:
		backend = C.TFD_GLOO
	case NCCL:
		if !HasNCCL() {
			return nil, usagef("the nccl backend needs a CUDA build (the cuda build tag and a CUDA libtorch)")
		}
		backend = C.TFD_NCCL
	default:
		return nil, usagef("unknown backend %q (gloo or nccl)", opt.Backend)
	}
	if opt.Host == "" {
		opt.Host = "127.0.0.1"
	}
	sh, err := store.handle()
	if err != nil {
		return nil, err
	}
	ch, free := cstr(opt.Host)
	defer free()
	ci, freeI := cstr(opt.Interface)
	defer freeI()
	var h C.tfd_group
	e := C.tfd_group_new(sh, C.int32_t(rank), C.int32_t(size), backend, ch, ci, ms(opt.Timeout), C.int32_t(opt.Threads), &h)
	runtime.KeepAlive(store)
	if err := check("rendezvous", e); err != nil {
		err.(*Error).Rank = rank
		return nil, err
	}
	g := &Group{h: h, rank: rank, size: size, backend: opt.Backend, timeout: opt.Timeout, store: store}
	return g, nil
}

// Rank returns this process's rank.
func (g *Group) Rank() int { return g.rank }

// Size returns the number of ranks.
func (g *Group) Size() int { return g.size }

// World is Size (train.Parallel's name for it).
func (g *Group) World() int { return g.size }

// Backend returns the group's backend.
func (g *Group) Backend() Backend { return g.backend }

// Timeout returns the group's timeout.
func (g *Group) Timeout() time.Duration { return g.timeout }

// Env returns the environment Init read (zero for NewGroup).
func (g *Group) Env() Env { return g.env }

// Store returns the store the group met in.
func (g *Group) Store() *Store { return g.store }

// Close releases the group. A group broken by a failure is left to the
// process (its threads may be blocked on a dead peer until Gloo's timeout;
// the process is expected to exit). Close is idempotent.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.h != nil {
		var leaked C.int32_t
		C.tfd_group_free(g.h, &leaked)
		g.h = nil
	}
	if g.store != nil {
		g.store.Close()
	}
	if g.server != nil {
		g.server.Close()
		g.server = nil
	}
	return nil
}

func (g *Group) handle(op string) (C.tfd_group, error) {
	if g == nil || g.h == nil {
		return nil, &Error{Op: op, Msg: "process group closed", Rank: -1}
	}
	return g.h, nil
}

// call runs one collective and stamps errors with the rank.
func (g *Group) call(op string, fn func(h C.tfd_group) C.tfd_err) error {
	h, err := g.handle(op)
	if err != nil {
		return err
	}
	var e C.tfd_err
	if perr := torch.Try(func() { e = fn(h) }); perr != nil {
		return perr
	}
	if err := check(op, e); err != nil {
		err.(*Error).Rank = g.rank
		return err
	}
	return nil
}

func (g *Group) checkCount(op string, n int) error {
	if n != g.size {
		return usagef("%s: %d tensors for a group of %d", op, n, g.size)
	}
	return nil
}

// AllReduce combines ts element-wise over the ranks with op, in place (one
// collective for all of them).
func (g *Group) AllReduce(op ReduceOp, ts ...*torch.Tensor) error {
	if len(ts) == 0 {
		return nil
	}
	return g.call("all-reduce", func(h C.tfd_group) C.tfd_err {
		return withTensors(ts, func(p *C.tf_tensor) C.tfd_err {
			return C.tfd_allreduce(h, p, C.int32_t(len(ts)), C.int32_t(op))
		})
	})
}

// Broadcast copies root's ts into every rank's ts.
func (g *Group) Broadcast(root int, ts ...*torch.Tensor) error {
	if root < 0 || root >= g.size {
		return usagef("broadcast: root %d outside [0, %d)", root, g.size)
	}
	if len(ts) == 0 {
		return nil
	}
	return g.call("broadcast", func(h C.tfd_group) C.tfd_err {
		return withTensors(ts, func(p *C.tf_tensor) C.tfd_err {
			return C.tfd_broadcast(h, p, C.int32_t(len(ts)), C.int32_t(root))
		})
	})
}

// BroadcastCoalesced is Broadcast through flat buffers of at most
// bucketBytes (consecutive tensors of one dtype and device share one):
// few collectives for many small tensors (a model's parameters).
func (g *Group) BroadcastCoalesced(root int, bucketBytes int64, ts ...*torch.Tensor) error {
	if root < 0 || root >= g.size {
		return usagef("broadcast: root %d outside [0, %d)", root, g.size)
	}
	if len(ts) == 0 {
		return nil
	}
	if bucketBytes <= 0 {
		bucketBytes = DefaultBucketBytes
	}
	return g.call("broadcast", func(h C.tfd_group) C.tfd_err {
		return withTensors(ts, func(p *C.tf_tensor) C.tfd_err {
			return C.tfd_broadcast_coalesced(h, p, C.int32_t(len(ts)), C.int32_t(root), C.int64_t(bucketBytes))
		})
	})
}

// AllGather copies every rank's in into out[rank] on every rank (len(out)
// is the group's size; each out has in's shape and dtype).
func (g *Group) AllGather(out []*torch.Tensor, in *torch.Tensor) error {
	if err := g.checkCount("all-gather", len(out)); err != nil {
		return err
	}
	return g.call("all-gather", func(h C.tfd_group) C.tfd_err {
		return withTensors(out, func(p *C.tf_tensor) C.tfd_err {
			e := C.tfd_allgather(h, handle(in), p)
			runtime.KeepAlive(in)
			return e
		})
	})
}

// ReduceScatter sets out to the op-reduction over the ranks of their
// in[rank] (len(in) is the group's size; each in has out's shape). Gloo in
// libtorch 1.13 has no reduce-scatter: it all-reduces the concatenation and
// keeps this rank's part (twice the traffic of a true reduce-scatter);
// NCCL runs its own.
func (g *Group) ReduceScatter(out *torch.Tensor, in []*torch.Tensor, op ReduceOp) error {
	if err := g.checkCount("reduce-scatter", len(in)); err != nil {
		return err
	}
	return g.call("reduce-scatter", func(h C.tfd_group) C.tfd_err {
		return withTensors(in, func(p *C.tf_tensor) C.tfd_err {
			e := C.tfd_reduce_scatter(h, p, handle(out), C.int32_t(op))
			runtime.KeepAlive(out)
			return e
		})
	})
}

// Barrier returns once every rank has called it.
func (g *Group) Barrier() error {
	return g.call("barrier", func(h C.tfd_group) C.tfd_err { return C.tfd_barrier(h) })
}

// Send sends t to rank dst (tag tells messages apart); the receiver calls
// Recv with a tensor of t's shape and dtype.
func (g *Group) Send(t *torch.Tensor, dst, tag int) error {
	if dst < 0 || dst >= g.size || dst == g.rank {
		return usagef("send: destination %d (this is rank %d of %d)", dst, g.rank, g.size)
	}
	return g.call("send", func(h C.tfd_group) C.tfd_err {
		e := C.tfd_send(h, handle(t), C.int32_t(dst), C.int32_t(tag))
		runtime.KeepAlive(t)
		return e
	})
}

// Recv receives into t what rank src sent with tag.
func (g *Group) Recv(t *torch.Tensor, src, tag int) error {
	if src < 0 || src >= g.size || src == g.rank {
		return usagef("receive: source %d (this is rank %d of %d)", src, g.rank, g.size)
	}
	return g.call("receive", func(h C.tfd_group) C.tfd_err {
		e := C.tfd_recv(h, handle(t), C.int32_t(src), C.int32_t(tag))
		runtime.KeepAlive(t)
		return e
	})
}

// SumFloats adds vals element-wise over the ranks, in place (one float64
// all-reduce: counts, losses, flags).
func (g *Group) SumFloats(vals []float64) error {
	if len(vals) == 0 {
		return nil
	}
	return torch.TidyErr(func() error {
		t := torch.FromSlice(vals, []int64{int64(len(vals))})
		if err := g.AllReduce(Sum, t); err != nil {
			return err
		}
		copy(vals, torch.ToSlice[float64](t))
		return nil
	})
}

func (g *Group) String() string {
	return fmt.Sprintf("%s group: rank %d of %d", g.backend, g.rank, g.size)
}

// Names of the C types for files without cgo.
type (
	cGroup = C.tfd_group
	cErr   = C.tfd_err
)

func setSequenceNumber(h cGroup) cErr { return C.tfd_group_set_sequence_number(h) }
