package torch

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// Tensor is a reference to a libtorch tensor. Release it with Free, or
// create it inside Tidy, which releases it when the scope ends. A finalizer
// remains as a safety net only: memory is never meant to wait for Go's GC.
//
// A Tensor is not safe for concurrent Free; concurrent reads are fine.
type Tensor struct {
	h     capi.Tensor
	scope uint64 // the scope that owns it (0: none)
}

var liveTensors atomic.Int64

// LiveTensors returns the number of tensor references not yet released.
func LiveTensors() int64 { return liveTensors.Load() }

// Tensors are allocated in slabs that carry one finalizer for all of them:
// runtime.SetFinalizer and clearing it again in Free cost about 120 ns, more
// than the rest of the Go side of an op. The safety net is coarser for it: a
// tensor dropped without Free is released once every tensor of its slab is
// unreachable.
const slabSize = 32

type tensorSlab struct{ ts [slabSize]Tensor }

var slabs struct {
	mu  sync.Mutex
	cur *tensorSlab
	n   int
}

func allocTensor() *Tensor {
	slabs.mu.Lock()
	if slabs.cur == nil || slabs.n == slabSize {
		s := new(tensorSlab)
		runtime.SetFinalizer(s, (*tensorSlab).finalize)
		slabs.cur, slabs.n = s, 0
	}
	t := &slabs.cur.ts[slabs.n]
	slabs.n++
	slabs.mu.Unlock()
	return t
}

func (s *tensorSlab) finalize() {
	for k := range s.ts {
		t := &s.ts[k]
		if t.h != nil {
			capi.Free(t.h)
			t.h = nil
			liveTensors.Add(-1)
		}
	}
}

// newTensor wraps a handle created on a thread whose scope is scope.
func newTensor(h capi.Tensor, scope uint64) *Tensor {
	t := allocTensor()
	t.h = h
	liveTensors.Add(1)
	if scope != 0 {
		scopes.adopt(scope, t)
	}
	return t
}

// wrapNew wraps a handle created by a hand-written (non-op) call on this thread.
func wrapNew(h capi.Tensor) *Tensor {
	if h == nil {
		return nil
	}
	return newTensor(h, capi.CurrentScope())
}

// Free releases this reference now. The memory goes back to the allocator
// once no other reference (another Tensor, a view, the autograd graph) holds
// it. Free is idempotent; using t afterwards panics with ErrFreed.
func (t *Tensor) Free() {
	if t == nil || t.h == nil {
		return
	}
	capi.Free(t.h)
	t.h = nil
	liveTensors.Add(-1)
}

// Freed reports whether t was released.
func (t *Tensor) Freed() bool { return t == nil || t.h == nil }

// handle returns the C handle or panics when t was released.
func (t *Tensor) handle(op string) capi.Tensor {
	if t == nil {
		panic(&Error{Op: op, Msg: "nil tensor", wrapped: ErrNilTensor})
	}
	if t.h == nil {
		panic(&Error{Op: op, Msg: ErrFreed.Error(), wrapped: ErrFreed})
	}
	return t.h
}

// Keep removes t from every scope: Tidy will not release it, and the caller
// owns it (Free it, or let the finalizer do so).
func (t *Tensor) Keep() *Tensor {
	if t != nil && t.scope != 0 {
		scopes.forget(t)
	}
	return t
}

// ---- scopes -------------------------------------------------------------------

type scope struct {
	tensors []*Tensor
}

type scopeTable struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]*scope
}

var scopes = scopeTable{m: map[uint64]*scope{}}

func (s *scopeTable) open() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.m[s.next] = &scope{}
	return s.next
}

func (s *scopeTable) adopt(id uint64, t *Tensor) {
	s.mu.Lock()
	if sc := s.m[id]; sc != nil {
		sc.tensors = append(sc.tensors, t)
		t.scope = id
	}
	s.mu.Unlock()
}

func (s *scopeTable) forget(t *Tensor) {
	s.mu.Lock()
	t.scope = 0 // close() skips tensors whose scope is no longer its own
	s.mu.Unlock()
}

// owns reports whether t belongs to scope id.
func (s *scopeTable) owns(t *Tensor, id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return t != nil && t.scope == id
}

// close releases the scope's tensors except those in keep, which move to parent.
func (s *scopeTable) close(id, parent uint64, keep []*Tensor) {
	s.mu.Lock()
	sc := s.m[id]
	delete(s.m, id)
	var moved []*Tensor
	for _, t := range keep {
		if t != nil && t.scope == id {
			t.scope = 0
			moved = append(moved, t)
		}
	}
	var release []*Tensor
	for _, t := range sc.tensors {
		if t.scope == id {
			t.scope = 0
			release = append(release, t)
		}
	}
	if p := s.m[parent]; p != nil {
		for _, t := range moved {
			t.scope = parent
			p.tensors = append(p.tensors, t)
		}
	}
	s.mu.Unlock()
	for _, t := range release {
		t.Free()
	}
}

// Tidy runs fn and then releases every tensor created by this goroutine
// inside it, except those marked with Keep. It locks the goroutine to its OS
// thread for its extent (libtorch's thread-local state and the scope are per
// thread). Tensors created by other goroutines are not affected. Scopes nest.
// Tensors are released even when fn panics.
func Tidy(fn func()) {
	tidy(func() []*Tensor { fn(); return nil })
}

// TidyTensor is Tidy for a function returning a tensor: the result survives
// and moves to the enclosing scope (or to none).
func TidyTensor(fn func() *Tensor) *Tensor {
	var out *Tensor
	tidy(func() []*Tensor { out = fn(); return []*Tensor{out} })
	return out
}

// TidyTensors is TidyTensor for several results.
func TidyTensors(fn func() []*Tensor) []*Tensor {
	var out []*Tensor
	tidy(func() []*Tensor { out = fn(); return out })
	return out
}

// Pipe runs step(0, x), then step(1, its result), … n steps, each in a
// scope of its own, and releases each intermediate result as soon as the
// next step has run, as Python's reference counting releases a
// sequential model's activations that backward does not keep (a bf16
// autocast's float32 inputs of a cast, say). Only results the steps
// created are released: never x, nor a tensor a step returned without
// creating it (its input, a parameter). It returns the last result.
func Pipe(x *Tensor, n int, step func(i int, x *Tensor) *Tensor) *Tensor {
	return TidyTensor(func() *Tensor {
		id := capi.CurrentScope()
		for i := 0; i < n; i++ {
			y := TidyTensor(func() *Tensor { return step(i, x) })
			if x != y && scopes.owns(x, id) {
				x.Free()
			}
			x = y
		}
		return x
	})
}

// TidyErr is Tidy for a function returning an error; it also turns a
// *Error panic inside fn into the returned error (see Try).
func TidyErr(fn func() error) error {
	var err error
	tidy(func() []*Tensor {
		if e := Try(func() { err = fn() }); e != nil {
			err = e
		}
		return nil
	})
	return err
}

func tidy(fn func() []*Tensor) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	id := scopes.open()
	parent := capi.ScopeSwap(id)
	var keep []*Tensor
	defer func() {
		capi.ScopeSwap(parent)
		scopes.close(id, parent, keep)
	}()
	keep = fn()
}

// ---- metadata -------------------------------------------------------------------

func (t *Tensor) info(op string) (capi.Info, [capi.MaxDims]int64) {
	var shape [capi.MaxDims]int64
	info, err := capi.Describe(t.handle(op), &shape, nil)
	runtime.KeepAlive(t)
	check(op, err)
	return info, shape
}

// Shape returns the sizes of t's dimensions.
func (t *Tensor) Shape() []int64 {
	info, shape := t.info("Shape")
	if int(info.NDim) > capi.MaxDims {
		throwf("Shape", "tensor has %d dimensions; torchfit supports %d", info.NDim, capi.MaxDims)
	}
	return append(make([]int64, 0, info.NDim), shape[:info.NDim]...) // 0-d: empty, not nil
}

// Strides returns t's strides in elements.
func (t *Tensor) Strides() []int64 {
	var shape, strides [capi.MaxDims]int64
	info, err := capi.Describe(t.handle("Strides"), &shape, &strides)
	runtime.KeepAlive(t)
	check("Strides", err)
	return append(make([]int64, 0, info.NDim), strides[:info.NDim]...)
}

// Size returns the size of dimension d (negative counts from the end).
func (t *Tensor) Size(d int) int64 {
	s := t.Shape()
	if d < 0 {
		d += len(s)
	}
	if d < 0 || d >= len(s) {
		throwf("Size", "dimension %d out of range for a %d-d tensor", d, len(s))
	}
	return s[d]
}

// Dim returns the number of dimensions.
func (t *Tensor) Dim() int { info, _ := t.info("Dim"); return int(info.NDim) }

// Numel returns the number of elements.
func (t *Tensor) Numel() int64 { info, _ := t.info("Numel"); return info.Numel }

// NBytes returns the bytes its elements occupy.
func (t *Tensor) NBytes() int64 { info, _ := t.info("NBytes"); return info.NBytes }

// DType returns the element type.
func (t *Tensor) DType() DType { info, _ := t.info("DType"); return DType(info.DType) }

// Device returns where t lives.
func (t *Tensor) Device() Device {
	info, _ := t.info("Device")
	return Device{Type: DeviceType(info.DeviceType), Index: int(info.DeviceIndex)}
}

// RequiresGrad reports whether autograd records operations on t.
func (t *Tensor) RequiresGrad() bool {
	info, _ := t.info("RequiresGrad")
	return info.RequiresGrad != 0
}

// IsLeaf reports whether t is a leaf of the autograd graph.
func (t *Tensor) IsLeaf() bool { info, _ := t.info("IsLeaf"); return info.IsLeaf != 0 }

// IsContiguous reports whether t is laid out contiguously.
func (t *Tensor) IsContiguous() bool {
	info, _ := t.info("IsContiguous")
	return info.IsContiguous != 0
}

// Defined reports whether t holds a tensor (and was not released).
func (t *Tensor) Defined() bool {
	if t == nil || t.h == nil {
		return false
	}
	info, _ := t.info("Defined")
	return info.Defined != 0
}

// Same reports whether t and o refer to the same tensor.
func (t *Tensor) Same(o *Tensor) bool {
	s, err := capi.SameTensor(t.handle("Same"), o.handle("Same"))
	runtime.KeepAlive(t)
	runtime.KeepAlive(o)
	check("Same", err)
	return s
}

// Ref returns a second reference to the same tensor, released independently.
func (t *Tensor) Ref() *Tensor {
	h, err := capi.CloneHandle(t.handle("Ref"))
	runtime.KeepAlive(t)
	check("Ref", err)
	return wrapNew(h)
}

// Describe prints "Tensor[2 3] float32 cpu".
func (t *Tensor) Describe() string {
	if t.Freed() {
		return "Tensor(freed)"
	}
	return fmt.Sprintf("Tensor%v %v %v", t.Shape(), t.DType(), t.Device())
}

// Assign makes t refer to o's tensor, releasing t's previous reference, and
// consumes o (o is Freed afterwards). Pointers to t stay valid: modules use
// it to replace a parameter's tensor (device moves, loading) in place.
func (t *Tensor) Assign(o *Tensor) {
	h := o.handle("Assign")
	o.h = nil
	if t.h != nil {
		capi.Free(t.h)
	} else {
		liveTensors.Add(1)
	}
	liveTensors.Add(-1) // o's reference moved into t
	t.h = h
}

//go:noinline
func keepAlive(t *Tensor) { runtime.KeepAlive(t) }

// CollectGarbage runs Go's garbage collector and waits until the finalizers
// of unreachable tensors have released them. Training code never needs it
// (scopes and Free release memory deterministically); tests that count live
// tensors call it first, so that garbage left by earlier code is not
// released in the middle of their measurement.
func CollectGarbage() {
	for round := 0; round < 10; round++ {
		before := liveTensors.Load()
		runtime.GC()
		// Finalizers run one after another in the order they were queued: a
		// sentinel queued by a second collection runs after the first's.
		done := make(chan struct{})
		sentinel := new([16]byte)
		runtime.SetFinalizer(sentinel, func(*[16]byte) { close(done) })
		sentinel = nil
		runtime.GC()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		if liveTensors.Load() == before {
			return
		}
	}
}
