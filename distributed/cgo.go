package distributed

/*
#cgo CFLAGS: -I${SRCDIR}/../torch/internal/capi
#cgo CXXFLAGS: -std=c++17 -O2 -fPIC -Wno-deprecated-declarations -Wno-unused-parameter -I${SRCDIR}/../torch/internal/capi
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++
#include <stdlib.h>
#include "dist.h"
*/
import "C"

import (
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/torchfit/torchfit/torch"
)

// check turns a dist.h error string into an *Error for op.
func check(op string, e C.tfd_err) error {
	if e == nil {
		return nil
	}
	s := C.GoString(e)
	C.tfd_free_error(e)
	err := &Error{Op: op, Msg: s}
	if len(s) >= 2 && s[1] == ':' {
		switch s[0] {
		case 'T':
			err.Kind = KindTimeout
		case 'P':
			err.Kind = KindPeer
		case 'B':
			err.Kind = KindBroken
		case 'O':
			err.Kind = KindOutOfMemory
		}
		err.Msg = s[2:]
	}
	err.Msg = strings.TrimSpace(err.Msg)
	return err
}

// handles returns the tensors' C handles in C memory (free it with
// C.free), and keeps the tensors alive until the caller's KeepAlive.
func handles(ts []*torch.Tensor) *C.tf_tensor {
	if len(ts) == 0 {
		return nil
	}
	p := (*C.tf_tensor)(C.malloc(C.size_t(len(ts)) * C.size_t(unsafe.Sizeof(C.tf_tensor(nil)))))
	hs := unsafe.Slice(p, len(ts))
	for i, t := range ts {
		hs[i] = C.tf_tensor(t.CHandle())
	}
	return p
}

func handle(t *torch.Tensor) C.tf_tensor { return C.tf_tensor(t.CHandle()) }

func ms(d time.Duration) C.int64_t { return C.int64_t(d / time.Millisecond) }

func cstr(s string) (*C.char, func()) {
	c := C.CString(s)
	return c, func() { C.free(unsafe.Pointer(c)) }
}

// withTensors runs fn with the C handles of ts and keeps ts alive.
func withTensors(ts []*torch.Tensor, fn func(p *C.tf_tensor) C.tfd_err) C.tfd_err {
	p := handles(ts)
	defer C.free(unsafe.Pointer(p))
	e := fn(p)
	runtime.KeepAlive(ts)
	return e
}
