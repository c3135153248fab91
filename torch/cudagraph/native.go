package cudagraph

/*
#cgo CXXFLAGS: -std=c++17 -O2 -fPIC -Wno-deprecated-declarations -Wno-unused-parameter
#cgo CPPFLAGS: -I${SRCDIR}/../internal/capi
#cgo LDFLAGS: -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lstdc++
#include <stdlib.h>
#include "graph.h"
*/
import "C"

import (
	"unsafe"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// handle is a native graph (graph.h).
type handle = C.tf_graph

func check(e C.tf_err) error { return capi.Check(unsafe.Pointer(e)) }

func nativeNew(dev int) (handle, error) {
	var h handle
	err := check(C.tf_graph_new(C.int32_t(dev), &h))
	return h, err
}

func nativeEnter(h handle) error        { return check(C.tf_graph_enter(h)) }
func nativeExit(h handle) error         { return check(C.tf_graph_exit(h)) }
func nativeCaptureBegin(h handle) error { return check(C.tf_graph_capture_begin(h)) }
func nativeCaptureEnd(h handle) error   { return check(C.tf_graph_capture_end(h)) }
func nativeReplay(h handle) error       { return check(C.tf_graph_replay(h)) }
func nativeFree(h handle) error         { return check(C.tf_graph_free(h)) }
