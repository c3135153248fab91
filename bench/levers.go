package bench

import (
	"fmt"
	"sort"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
)

// levers are the Go variants Measure can time beside torchfit's default,
// by name: each is torchfit with one lever turned off (or another setting),
// so its ratio to the default is that lever's effect.
var levers = map[string]Variant{
	// OpenBLAS's generic SSE3 kernels, what a CPU OpenBLAS does not
	// recognise gets without lever 0.
	"blas-prescott": blasVariant("Prescott"),
	// AVX2 kernels (OpenBLAS's choice for an AVX-512 Zen 4 it takes for a Zen).
	"blas-haswell": blasVariant("Haswell"),
	// glibc's start-up malloc values held fixed (lever 2 off, and glibc's
	// dynamic mmap threshold off with it): every allocation of 128 KiB or
	// more mmap'ed and unmapped, the worst case. glibc's real default, whose
	// threshold rises with the chunks freed, cannot be restored in a running
	// process: run bench-recipes with TORCHFIT_MALLOC=default for it.
	"malloc-128k": {Set: func() func() {
		var err error
		torch.Main().Do(func() { err = torch.SetMallocTuned(false) })
		if err != nil {
			return func() {}
		}
		return func() {
			if torch.Malloc().Tuned {
				torch.Main().Do(func() { torch.SetMallocTuned(true) })
			}
		}
	}},
	// Attention as scores, softmax, dropout and product, the (L, S) matrices
	// kept for backward: nn.FusedAttention (libtorch 1.13) and nn.SDPA (2.x)
	// off.
	"unfused-attention": {Set: func() func() {
		fused, sdpa := nn.FusedAttention, nn.SDPA
		nn.FusedAttention, nn.SDPA = false, false
		return func() { nn.FusedAttention, nn.SDPA = fused, sdpa }
	}},
	// AdamW as PyTorch runs it: nine ops per parameter (lever 3 off).
	"unfused-adamw": {Set: func() func() {
		prev := nn.SetFusedOptimizers(false)
		return func() { nn.SetFusedOptimizers(prev) }
	}},
	// ASR's CTC on the device (asr.CTCOnDevice): on CUDA cuDNN's, which
	// reads its lengths there, where ATen's copies them to the host inside
	// the op. Not a lever turned off but one not yet on by default: its
	// ratio to the default is what turning it on would give. The other
	// twins are unchanged by it.
	"ctc-on-device": {Set: func() func() {
		prev := asr.CTCOnDevice
		asr.CTCOnDevice = true
		return func() { asr.CTCOnDevice = prev }
	}},
	// ATen's dropout, as PyTorch runs it on the CPU: a Bernoulli mask from
	// the CPU generator, saved for backward (the fused dropout off).
	"aten-dropout": {Set: func() func() {
		prev := nn.SetFusedDropout(false)
		return func() { nn.SetFusedDropout(prev) }
	}},
}

func blasVariant(core string) Variant {
	return Variant{Name: "blas-" + core, Set: func() func() {
		undo := func() {}
		torch.Main().Do(func() {
			if _, u, err := torch.SelectBLASCore(core); err == nil {
				undo = u
			}
		})
		return func() { torch.Main().Do(undo) }
	}}
}

// LeverNames lists the variants Lever knows.
func LeverNames() []string {
	var out []string
	for n := range levers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lever returns the variant called name.
func Lever(name string) (Variant, error) {
	v, ok := levers[name]
	if !ok {
		return Variant{}, fmt.Errorf("bench: no variant %q (have %v)", name, LeverNames())
	}
	v.Name = name
	return v, nil
}
