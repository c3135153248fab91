package scan

import (
	"fmt"
	"strings"

	"github.com/torchfit/torchfit/torch"
)

// DefaultChunk is the chunk length of Chunked, LogDepth and Fused when 0 is
// given: the Mamba seed's "chunks of 64 timesteps".
const DefaultChunk = 64

// Scan is one formulation of the selective scan.
type Scan interface {
	// Name is the formulation's name as --scan spells it.
	Name() string
	// Apply returns y (batch, length, channels) and the state after the
	// last step (batch, channels, state), which carries no gradient. It
	// panics with *torch.Error on bad shapes, as tensor math does.
	Apply(x, delta, A, B, C, D *torch.Tensor) (y, last *torch.Tensor)
}

// Names are the formulations Parse knows, the default first.
var Names = []string{"fused", "chunked", "sequential", "parallel"}

// Parse returns the formulation named name (fused, chunked, sequential or
// parallel, the log-depth one) with chunk length k (0: DefaultChunk).
func Parse(name string, k int) (Scan, error) {
	if k < 0 {
		return nil, fmt.Errorf("scan: chunk length %d: must not be negative", k)
	}
	switch strings.ToLower(name) {
	case "fused":
		return Fused(k), nil
	case "chunked":
		return Chunked(k), nil
	case "sequential":
		return Sequential(), nil
	case "parallel", "logdepth", "log-depth":
		return LogDepth(k), nil
	}
	return nil, fmt.Errorf("scan: unknown scan %q (want %s)", name, strings.Join(Names, ", "))
}

func chunkOr(k int) int64 {
	if k <= 0 {
		return DefaultChunk
	}
	return int64(k)
}

// operands are the inputs cast to the compute dtype, with their sizes.
type operands struct {
	x, dt, A, B, C, D *torch.Tensor
	b, l, d, n        int64
	ct                torch.DType // the compute dtype
	out               torch.DType // y's dtype
}

// prepare checks shapes and casts to the compute dtype: float64 when an
// input is float64, else float32.
func prepare(op string, x, dt, A, B, C, D *torch.Tensor) operands {
	o := check(op, x, dt, A, B, C, D)
	cast := func(t *torch.Tensor) *torch.Tensor {
		if t.DType() == o.ct {
			return t
		}
		return t.ToDType(o.ct)
	}
	o.x, o.dt, o.A, o.B, o.C, o.D = cast(x), cast(dt), cast(A), cast(B), cast(C), cast(D)
	return o
}

// check checks the operands' shapes and dtypes (panicking with
// *torch.Error) and returns their sizes and dtypes.
func check(op string, x, dt, A, B, C, D *torch.Tensor) operands {
	bad := func(format string, args ...any) {
		panic(&torch.Error{Op: op, Msg: fmt.Sprintf(format, args...)})
	}
	if x.Dim() != 3 {
		bad("x must be (batch, length, channels), got shape %v", x.Shape())
	}
	b, l, d := x.Size(0), x.Size(1), x.Size(2)
	if b < 1 || l < 1 || d < 1 {
		bad("empty input of shape %v", x.Shape())
	}
	if !same(dt.Shape(), x.Shape()) {
		bad("delta must have x's shape %v, got %v", x.Shape(), dt.Shape())
	}
	if A.Dim() != 2 || A.Size(0) != d || A.Size(1) < 1 {
		bad("A must be (%d, state), got shape %v", d, A.Shape())
	}
	n := A.Size(1)
	if !same(B.Shape(), []int64{b, l, n}) {
		bad("B must be (%d, %d, %d), got shape %v", b, l, n, B.Shape())
	}
	if !same(C.Shape(), []int64{b, l, n}) {
		bad("C must be (%d, %d, %d), got shape %v", b, l, n, C.Shape())
	}
	if !same(D.Shape(), []int64{d}) {
		bad("D must be (%d), got shape %v", d, D.Shape())
	}
	ct := torch.Float32
	for _, t := range []*torch.Tensor{x, dt, A, B, C, D} {
		if !t.DType().IsFloat() {
			bad("inputs must be floating point, got %v", t.DType())
		}
		if t.DType() == torch.Float64 {
			ct = torch.Float64
		}
	}
	out := ct
	if xt := x.DType(); xt == torch.Float16 || xt == torch.BFloat16 {
		out = xt
	}
	dev := x.Device()
	for _, t := range []*torch.Tensor{dt, A, B, C, D} {
		if t.Device() != dev {
			bad("inputs on different devices (%v and %v)", dev, t.Device())
		}
	}
	return operands{b: b, l: l, d: d, n: n, ct: ct, out: out}
}

func (o operands) result(y *torch.Tensor) *torch.Tensor {
	if y.DType() != o.out {
		return y.ToDType(o.out)
	}
	return y
}

func same(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// Step advances the recurrence by one token: from the state h (batch,
// channels, state) and one step's x and Δ (batch, channels) and B and C
// (batch, state) it returns y (batch, channels) and the next state. It is
// generation's O(1)-per-token path: no earlier token is looked at again.
func Step(h, x, delta, A, B, C, D *torch.Tensor) (y, next *torch.Tensor) {
	dA := delta.Unsqueeze(-1).Mul(A).Exp()                        // (b, d, n)
	dBx := delta.Mul(x).Unsqueeze(-1).Mul(B.Unsqueeze(1))         // (b, d, n)
	next = dA.Mul(h).Add(dBx)                                     // (b, d, n)
	y = next.Matmul(C.Unsqueeze(-1)).SqueezeDim(-1).Add(x.Mul(D)) // (b, d)
	dA.Free()
	dBx.Free()
	return y, next
}
