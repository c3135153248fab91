// Package bench measures torchfit's recipes beside Python PyTorch on the
// same libtorch: for each recipe a Python twin of its model (parameter
// names equal torchfit's) loads the weights torchfit initialised and the
// batch it trains on, a check confirms that one step gives the same loss
// and gradients, and then Go and Python training steps are timed in one
// run, interleaved repetition by repetition, with medians and per-pair
// ratios, and the peak memory of a step on both sides.
//
// `make bench-recipes` runs every registered twin (go run ./bench/cmd/bench-recipes).
// Its flags also time Go variants in the same rotation, each torchfit with
// one lever turned off (-variants: blas-prescott, blas-haswell,
// malloc-128k, unfused-adamw, aten-dropout, unfused-attention; see Lever)
// or, ctc-on-device, one not yet on by default turned on,
// add environment variables to the Python side (-python-env, e.g. the same
// malloc settings), profile
// one Go step call by call (-count: operators, the backward pass,
// torchfit's other shim calls, Go's time between calls) and sweep the
// ASR twin's padding multiple (-shapes: lever 4, shape bucketing).
// -perf-control switches a `perf record --control` on around Go's and
// eager Python's timed steps only (Options.Perf, PerfControl): `make
// bench-split` splits each side's samples between libtorch's kernels,
// torchfit's own, libc and the OS kernel, and the binding.
//
// With a PyTorch 2.x Python side (TORCHFIT_PYTHON), bench-recipes also
// times the twin under torch.compile (inductor, default mode; -compile,
// on by default where torch has it; -compile-mode and Options.CompileMode
// choose another mode, gpu-check's step-compiled "reduce-overhead") in a
// second Python process, in the
// same rotation (Options.Compiled): the table adds its median step, Go
// over it, compiled over eager Python, its first step (compilation
// included, timed apart from the medians) and its own loss/gradient check.
// A torch without torch.compile (1.13) or a compilation that fails gives
// "n/a: " and the reason in place of figures.
//
// Config.Device runs both sides on a CUDA device (gpu-check's step-time
// check): the Go side's model and batch move there once built, the Python
// twin loads its weights and batch there (scripts/twins/run.py, "device"),
// each timed step ends with the device synchronised on both sides, and no
// peak is measured (the peaks are CPU allocator figures).
//
// # Adding a recipe
//
// A recipe plugs in with two files:
//
//   - bench/<recipe>.go: a Twin registered with Register in an init
//     function. Its Build returns an Instance; a recipe with one model and
//     one optimizer returns a *SingleModel (its model, loss, batch and
//     Python spec), which trains with train.Trainer exactly as the recipe
//     does and writes what Python needs. Its Accum, Contrastive, Beta2,
//     Eps and OnStep fields cover accumulation over micro-batches, the
//     grad-cache step and the recipe's AdamW and after-step work (the CLIP
//     twins, bench/clip.go).
//   - scripts/twins/<recipe>.py: build(spec, data) returning an object
//     with model (a torch.nn.Module whose state-dict names are torchfit's)
//     and loss() (the loss of the batch the file holds), or backward()
//     (the step's gradients accumulated, its loss returned: accumulation,
//     grad cache) and after_step() where the step needs them. Loops that are
//     not one model and one optimizer (a GAN) define step() and check()
//     and their Go Instance implements Step and Check itself.
//
// A twin whose recipe trains in some precisions only implements
// Precisioner; bench-recipes skips the others with a line (Supports).
//
// scripts/twins/run.py is the Python server the driver talks to; its doc
// says how Python's peak memory is measured (profiler memory events, the
// same quantity as torchfit's counting allocator reports).
package bench
