package capi

/*
#include <stdlib.h>
#include "capi.h"
*/
import "C"

import (
	"sync"
	"time"
	"unsafe"
)

// CheckpointFunc is what a checkpointed region runs: it receives borrowed
// input handles and returns new output handles (ownership passes to the shim).
type CheckpointFunc func(inputs []Tensor) ([]Tensor, error)

var ckpt = struct {
	sync.Mutex
	next uint64
	fns  map[uint64]CheckpointFunc
}{fns: map[uint64]CheckpointFunc{}}

// Checkpoint runs fn on inputs as a checkpointed region (see tf_checkpoint).
func Checkpoint(fn CheckpointFunc, inputs []Tensor) ([]Tensor, error) {
	ckpt.Lock()
	ckpt.next++
	id := ckpt.next
	ckpt.fns[id] = fn
	ckpt.Unlock()
	in := cTensors(inputs)
	defer C.free(unsafe.Pointer(in))
	var outs *C.tf_tensor
	var n C.int32_t
	err := check(C.tf_checkpoint(C.uint64_t(id), in, C.int32_t(len(inputs)), &outs, &n))
	if err != nil {
		return nil, err
	}
	res := make([]Tensor, int(n))
	copy(res, unsafe.Slice((*Tensor)(unsafe.Pointer(outs)), int(n)))
	C.free(unsafe.Pointer(outs))
	return res, nil
}

// CheckpointsLive returns how many checkpointed regions still hold their function.
func CheckpointsLive() int {
	ckpt.Lock()
	defer ckpt.Unlock()
	return len(ckpt.fns)
}

//export tfGoCheckpointRun
func tfGoCheckpointRun(id C.uint64_t, inputs *C.tf_tensor, nin C.int32_t, outs **C.tf_tensor, nout *C.int32_t) *C.char {
	ckpt.Lock()
	fn := ckpt.fns[uint64(id)]
	ckpt.Unlock()
	*outs, *nout = nil, 0
	if fn == nil {
		return C.CString("checkpoint: function released")
	}
	in := make([]Tensor, int(nin))
	if nin > 0 {
		copy(in, unsafe.Slice((*Tensor)(unsafe.Pointer(inputs)), int(nin)))
	}
	res, err := fn(in)
	if len(res) > 0 {
		arr := (*C.tf_tensor)(C.calloc(C.size_t(len(res)), C.size_t(unsafe.Sizeof(Tensor(nil)))))
		copy(unsafe.Slice((*Tensor)(unsafe.Pointer(arr)), len(res)), res)
		*outs, *nout = arr, C.int32_t(len(res))
	}
	if err != nil {
		return C.CString(err.Error())
	}
	return nil
}

//export tfGoCheckpointRelease
func tfGoCheckpointRelease(id C.uint64_t) {
	ckpt.Lock()
	delete(ckpt.fns, uint64(id))
	ckpt.Unlock()
}

// AutocastState mirrors tf_autocast_state.
type AutocastState struct{ Enabled, DType int32 }

// AutocastEnter applies autocast on the calling thread (deviceType 0 CPU, 1 CUDA).
func AutocastEnter(deviceType int, enabled bool, dtype int32) (AutocastState, error) {
	if statsOn.Load() {
		defer count("(autocast enter)", time.Now())
	}
	var prev AutocastState
	err := check(C.tf_autocast_enter(C.int32_t(deviceType), b32(enabled), C.int32_t(dtype), (*C.tf_autocast_state)(unsafe.Pointer(&prev))))
	return prev, err
}

// AutocastExit restores prev; the outermost exit clears the weight cache.
func AutocastExit(deviceType int, prev AutocastState) error {
	if statsOn.Load() {
		defer count("(autocast exit)", time.Now())
	}
	return check(C.tf_autocast_exit(C.int32_t(deviceType), (*C.tf_autocast_state)(unsafe.Pointer(&prev))))
}

// AutocastGet reads the calling thread's autocast state.
func AutocastGet(deviceType int) (AutocastState, error) {
	var s AutocastState
	err := check(C.tf_autocast_get(C.int32_t(deviceType), (*C.tf_autocast_state)(unsafe.Pointer(&s))))
	return s, err
}

// AutocastClearCache drops the calling thread's cached low-precision weights.
func AutocastClearCache() error { return check(C.tf_autocast_clear_cache()) }
