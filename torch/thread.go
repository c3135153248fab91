package torch

import (
	"runtime"
	"sync"
	"syscall"
)

// Thread is one OS thread that runs libtorch work handed to it, as Python
// runs a training loop on its main thread. Go moves goroutines between OS
// threads; libtorch's CPU libraries keep state per OS thread, and with
// libtorch 1.13 that state must stay on one thread: ideep, between ATen and
// oneDNN, caches primitive descriptors per thread, and a descriptor one
// thread obtains from oneDNN's process-wide primitive cache can point into
// another thread's descriptor, freed when that thread's cache evicts it.
// oneDNN 2.6 then builds bf16 matmul kernels from freed memory (std::bad_alloc,
// std::future_error "Broken promise", or a crash; see docs/bf16-onednn.md). On one thread
// the two caches evict in a safe order.
//
// Do runs a function on the thread; a Thread is safe for concurrent use
// (calls are serialised, in order of arrival).
type Thread struct {
	work chan func()
	tid  int
}

var (
	mainOnce   sync.Once
	mainThread *Thread
)

// Main returns the process's libtorch thread, started on first use. The
// training loop, evaluation and every torchfit entry point that computes run
// their libtorch work on it, whichever goroutine calls them; do the same with
// Main().Do for work of your own that runs alongside them.
func Main() *Thread {
	mainOnce.Do(func() { mainThread = NewThread() })
	return mainThread
}

// NewThread starts a new libtorch thread. It lives as long as the process.
func NewThread() *Thread {
	t := &Thread{work: make(chan func())}
	ready := make(chan int)
	go func() {
		runtime.LockOSThread() // never unlocked: the goroutine owns the thread
		ready <- syscall.Gettid()
		for fn := range t.work {
			fn()
		}
	}()
	t.tid = <-ready
	return t
}

// OnThread reports whether the caller is running on t.
func (t *Thread) OnThread() bool { return syscall.Gettid() == t.tid }

// Do runs fn on t and waits for it. Called on t itself (from inside another
// Do) it runs fn directly. A panic in fn is raised again in the caller with
// the same value (a *Error stays a *Error). fn must not wait for a goroutine
// that is itself waiting in t.Do.
func (t *Thread) Do(fn func()) {
	if t.OnThread() {
		fn()
		return
	}
	var p any
	panicked := false
	done := make(chan struct{})
	t.work <- func() {
		defer close(done)
		defer func() {
			if panicked {
				p = recover()
			}
		}()
		panicked = true
		fn()
		panicked = false
	}
	<-done
	if panicked {
		panic(p)
	}
}

// DoErr is Do for a function returning an error.
func (t *Thread) DoErr(fn func() error) error {
	var err error
	t.Do(func() { err = fn() })
	return err
}
