package torch

import "github.com/torchfit/torchfit/torch/internal/blas"

// BLASChoice is the BLAS kernel choice torchfit made at start-up.
type BLASChoice struct {
	Library string // the BLAS build ("OpenBLAS 0.3.21 DYNAMIC_ARCH ..."; "" when not OpenBLAS)
	Before  string // the core type OpenBLAS chose itself when it loaded
	Core    string // the core type in use
	Changed bool   // torchfit selected Core
	Reason  string // why
}

// BLAS reports the BLAS kernels libtorch's float32/float64 matrix products
// use. Debian's OpenBLAS picks its kernels from the CPU's model number and
// falls back to generic SSE3 ("Prescott") ones on a CPU it does not know;
// torchfit re-runs the choice at start-up for the best kernels the CPU's
// features allow (AVX-512, AVX2+FMA, AVX), never ones it cannot run, never
// below OpenBLAS's own choice, and not at all when OPENBLAS_CORETYPE is set
// (see torch/internal/blas).
func BLAS() BLASChoice {
	s := blas.Startup
	return BLASChoice{Library: s.Config, Before: s.Before, Core: s.Core, Changed: s.Changed, Reason: s.Reason}
}

// String is one line for logs.
func (b BLASChoice) String() string {
	if b.Library == "" && b.Core == "" {
		return b.Reason
	}
	return b.Library + ": " + b.Core + " kernels (" + b.Reason + ")"
}

// SelectBLASCore switches OpenBLAS to the kernels of core type core (a
// name OPENBLAS_CORETYPE takes, e.g. "Prescott", "Haswell", "SkylakeX")
// and returns the core now in use and a function that puts the previous
// kernels back. It is for benchmarks that compare kernels: no matrix
// product may run meanwhile, and nothing checks that the CPU can run them.
func SelectBLASCore(core string) (now string, undo func(), err error) {
	sel, err := blas.SelectUndoable(core)
	if err != nil {
		return "", nil, &Error{Op: "SelectBLASCore", Msg: err.Error(), wrapped: err}
	}
	return sel.Core, sel.Undo, nil
}
