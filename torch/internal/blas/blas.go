package blas

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "blas.h"
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

// Info describes the OpenBLAS in the process.
type Info struct {
	Loaded  bool   // an OpenBLAS is loaded
	Dynamic bool   // it picks kernels at run time (DYNAMIC_ARCH)
	Core    string // the kernels it uses now
	Config  string // its build configuration ("OpenBLAS 0.3.21 DYNAMIC_ARCH ...")
}

// Read returns the OpenBLAS in the process.
func Read() Info {
	var core, config *C.char
	var dyn C.int
	if C.tf_blas_info(&core, &config, &dyn) == 0 {
		return Info{}
	}
	i := Info{Loaded: true, Dynamic: dyn != 0}
	if core != nil {
		i.Core = C.GoString(core)
	}
	if config != nil {
		i.Config = C.GoString(config)
	}
	return i
}

// Has reports whether the loaded OpenBLAS holds kernels for core.
func Has(core string) bool {
	c := C.CString(core)
	defer C.free(unsafe.Pointer(c))
	return C.tf_blas_has_core(c) != 0
}

// Select re-runs OpenBLAS's kernel selection for core and returns the core
// it uses afterwards. No BLAS call may run meanwhile: it is for start-up
// and for tests and benchmarks that compare kernels.
func Select(core string) (string, error) {
	c := C.CString(core)
	defer C.free(unsafe.Pointer(c))
	var now *C.char
	if C.tf_blas_select(c, &now) == 0 {
		return "", fmt.Errorf("blas: this BLAS cannot select kernels at run time")
	}
	return C.GoString(now), nil
}

// Selected is a selection that can be undone.
type Selected struct {
	Core string // the core type in use after the selection
	prev unsafe.Pointer
}

// Undo puts back the kernels in use before the selection.
func (s Selected) Undo() { C.tf_blas_set_table(s.prev) }

// SelectUndoable is Select, remembering the kernels it replaces.
func SelectUndoable(core string) (Selected, error) {
	prev := C.tf_blas_table()
	if prev == nil {
		return Selected{}, fmt.Errorf("blas: this BLAS cannot select kernels at run time")
	}
	now, err := Select(core)
	if err != nil {
		return Selected{}, err
	}
	return Selected{Core: now, prev: prev}, nil
}

// Choice is what start-up did.
type Choice struct {
	Info
	Before  string // OpenBLAS's own choice
	Changed bool
	Reason  string
}

// String is one line for logs: "OpenBLAS 0.3.21 ...: Cooperlake kernels (reason)".
func (c Choice) String() string {
	if !c.Loaded {
		return "not OpenBLAS"
	}
	return fmt.Sprintf("%s kernels (%s)", c.Core, c.Reason)
}

// Startup is what init did.
var Startup Choice

func init() { Startup = Apply(HostFeatures(), os.Getenv("OPENBLAS_CORETYPE")) }

// Apply chooses the core type for features f (and the user's
// OPENBLAS_CORETYPE, env) and selects it. A selection that does not give
// the core asked for is undone.
func Apply(f Features, env string) Choice {
	info := Read()
	c := Choice{Info: info, Before: info.Core}
	switch {
	case !info.Loaded:
		c.Reason = "the BLAS is not OpenBLAS"
		return c
	case !info.Dynamic:
		c.Reason = "OpenBLAS built for one CPU (no DYNAMIC_ARCH): kept"
		return c
	}
	d := Choose(info.Core, f, env, Has)
	c.Reason = d.Reason
	if d.Core == "" {
		return c
	}
	sel, err := SelectUndoable(d.Core)
	if err != nil {
		c.Reason = fmt.Sprintf("OpenBLAS chose %s; selecting %s failed: %v", info.Core, d.Core, err)
		return c
	}
	if sel.Core != d.Core {
		sel.Undo()
		c.Reason = fmt.Sprintf("OpenBLAS chose %s; selecting %s gave %q: kept %s", info.Core, d.Core, sel.Core, Read().Core)
		c.Core = Read().Core
		return c
	}
	c.Core, c.Changed = sel.Core, true
	return c
}
