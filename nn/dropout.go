package nn

import (
	"os"
	"sync/atomic"

	"github.com/torchfit/torchfit/nn/internal/dropout"
	"github.com/torchfit/torchfit/torch"
)

// fusedDropout selects the fused dropout (nn/internal/dropout) for
// Dropout and ApplyDropout.
var fusedDropout atomic.Bool

func init() { fusedDropout.Store(os.Getenv("TORCHFIT_DROPOUT") != "aten") }

// SetFusedDropout turns the fused dropout on (the default) or off and
// returns the previous setting; the environment variable
// TORCHFIT_DROPOUT=aten turns it off at start-up.
//
// On, Dropout and ApplyDropout run torchfit's fused dropout on CPU tensors
// (float32, float64, bfloat16, float16): the mask comes from a
// counter-based generator (Philox4x32-10, keyed by 64 bits drawn from
// libtorch's CPU generator per call), is generated and applied in one
// vectorised pass, and is made again from its seed in backward instead of
// being saved — no mask the size of the activation stays in the graph.
// Off, they run ATen's dropout (a Bernoulli mask from the CPU generator,
// saved for backward), as PyTorch does. Both are deterministic under
// torch.ManualSeed and reproduce under torch.RNG snapshots (activation
// checkpointing) and checkpointed RNG states, but they draw different
// masks: switching changes a run's random stream, not its distribution.
// CUDA tensors take ATen's dropout either way (a fused Philox kernel
// already). Attention-weight dropout (MultiheadAttention) is not affected.
func SetFusedDropout(on bool) (prev bool) { return fusedDropout.Swap(on) }

// FusedDropout reports whether the fused dropout is on (SetFusedDropout).
func FusedDropout() bool { return fusedDropout.Load() }

// ApplyDropout is x.Dropout(p, train) through the SetFusedDropout switch:
// in training (train true) it zeroes elements with probability p and
// scales the rest by 1/(1−p); with train false, p = 0 or no elements it
// returns a new reference to x. p outside [0, 1] panics with *torch.Error,
// as every op does.
func ApplyDropout(x *torch.Tensor, p float64, train bool) *torch.Tensor {
	if !fusedDropout.Load() {
		return x.Dropout(p, train)
	}
	if _, err := dropout.Check(); err != nil {
		panic(&torch.Error{Op: "nn.ApplyDropout", Msg: err.Error()})
	}
	return torch.CallOp(dropout.Op, "", x, p, train)[0].(*torch.Tensor)
}
