package torch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/rand"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
)

// ops_test checks every op wrapper against Python PyTorch on the same
// libtorch: the inputs (a pool of named tensors) go to one Python run as
// JSON, each case is a Python expression over the pool and a Go function
// over the same tensors, and values, shapes, dtypes and (for the ops that
// matter in training) gradients must agree.

// poolTensor is an input tensor, sent to Python as JSON.
type poolTensor struct {
	Data  []float64 `json:"data"`
	Shape []int64   `json:"shape"`
	DType string    `json:"dtype"`
}

// env holds one case's fresh copies of the pool.
type env map[string]*Tensor

type opCase struct {
	name  string
	py    string          // Python expression over the pool names, torch, F, math
	fn    func(x env) any // *Tensor, []*Tensor, bool, float64 or int64
	grads []string        // pool names whose gradient to compare
	tol   float64         // relative and absolute tolerance (default 1e-4)
	seed  bool            // manual_seed(0) before both sides (random ops)
}

type pyOut struct {
	Shape []int64 `json:"shape"`
	DType string  `json:"dtype"`
	V     []any   `json:"v"`
	Py    bool    `json:"py"`
}

type pyResult struct {
	Outs  []pyOut `json:"outs"`
	Grads []pyOut `json:"grads"`
	Error string  `json:"error"`
}

const opsScript = `
import torch.nn.functional as F
def mk(p):
    return torch.tensor(p['data'], dtype=torch.float64).to(getattr(torch, p['dtype'])).reshape(p['shape'])
pool = {k: mk(p) for k, p in inp['pool'].items()}
def enc(x):
    if isinstance(x, torch.Tensor):
        t = x.detach()
        flat = t.reshape(-1).double().tolist()
        return {'shape': list(t.shape), 'dtype': str(t.dtype).replace('torch.', ''),
                'v': [v if math.isfinite(v) else str(v) for v in flat]}
    if isinstance(x, (bool, int, float)):
        return {'shape': [], 'dtype': 'number', 'v': [float(x)], 'py': True}
    raise TypeError('unsupported result %r' % type(x))
def outs(r):
    if isinstance(r, (tuple, list)):
        return [enc(x) for x in r]
    return [enc(r)]
res = {}
for c in inp['cases']:
    try:
        env = {k: v.clone() for k, v in pool.items()}
        for g in c['grads']:
            env[g].requires_grad_(True)
        env.update(torch=torch, F=F, math=math)
        if c['seed']:
            torch.manual_seed(0)
        r = eval(c['py'], env)
        o = outs(r)
        gr = []
        if c['grads']:
            y = r[0] if isinstance(r, (tuple, list)) else r
            w = torch.cos(torch.arange(y.numel(), dtype=torch.float64)).to(y.dtype).reshape(y.shape)
            (y * w).sum().backward()
            gr = [enc(env[g].grad) for g in c['grads']]
        res[c['name']] = {'outs': o, 'grads': gr}
    except Exception as e:
        res[c['name']] = {'error': repr(e)}
emit(res)
`

// makePool returns the named inputs every case draws from.
func makePool() map[string]poolTensor {
	rng := rand.New(rand.NewSource(1))
	p := map[string]poolTensor{}
	uni := func(name string, lo, hi float64, shape ...int64) {
		n := int64(1)
		for _, s := range shape {
			n *= s
		}
		d := make([]float64, n)
		for k := range d {
			d[k] = math.Round((lo+(hi-lo)*rng.Float64())*1000) / 1000
		}
		p[name] = poolTensor{d, shape, "float32"}
	}
	lit := func(name, dtype string, data []float64, shape ...int64) {
		p[name] = poolTensor{data, shape, dtype}
	}
	uni("a", -2, 2, 3, 4)
	uni("b", -2, 2, 3, 4)
	uni("c", -2, 2, 3, 4)
	uni("p", 0.5, 2.5, 3, 4)
	uni("r3", -2, 2, 3)
	uni("r4", -2, 2, 4)
	uni("r5", -2, 2, 5)
	uni("r6", -2, 2, 6)
	uni("m45", -2, 2, 4, 5)
	uni("w54", -1, 1, 5, 4)
	uni("sq", -2, 2, 3, 3)
	uni("b234", -2, 2, 2, 3, 4)
	uni("b245", -2, 2, 2, 4, 5)
	uni("one13", -2, 2, 1, 3, 1)
	uni("x23", -1, 1, 2, 3)
	uni("x24", -1, 1, 2, 4)
	uni("bw", -1, 1, 6, 3, 4)
	uni("seq", -1, 1, 2, 3, 10)
	uni("w1", -0.5, 0.5, 4, 3, 3)
	uni("wg", -0.5, 0.5, 6, 2, 3)
	uni("wt1", -0.5, 0.5, 3, 4, 3)
	uni("bias4", -0.5, 0.5, 4)
	uni("img", -1, 1, 2, 3, 6, 6)
	uni("w2", -0.5, 0.5, 4, 3, 3, 3)
	uni("wt2", -0.5, 0.5, 3, 4, 3, 3)
	uni("gn_x", -2, 2, 2, 6, 5)
	uni("gnw", 0.5, 1.5, 6)
	uni("gnb", -0.5, 0.5, 6)
	uni("lnw", 0.5, 1.5, 4)
	uni("lnb", -0.5, 0.5, 4)
	uni("bn_x", -2, 2, 4, 3, 5)
	uni("bnw", 0.5, 1.5, 3)
	uni("bnb", -0.5, 0.5, 3)
	uni("rm", -0.5, 0.5, 3)
	uni("rv", 0.5, 1.5, 3)
	uni("embw", -1, 1, 10, 4)
	uni("cew", 0.5, 2, 5)
	uni("ctc_x", -2, 2, 12, 2, 5)
	uni("tgt01", 0, 1, 3, 4)
	uni("pw", 0.5, 2, 4)
	uni("audio", -1, 1, 2, 400)
	uni("audio1", -1, 1, 300)
	lit("ia", "int64", []float64{-5, 3, 0, 7, 2, -1, 4, 9, -8, 6, 1, 2}, 3, 4)
	lit("ib", "int64", []float64{2, -3, 4, 2, 5, 3, -2, 4, 3, 7, 1, 2}, 3, 4)
	lit("idx3", "int64", []float64{2, 0, 1}, 3)
	lit("idxdup", "int64", []float64{0, 0, 2}, 3)
	lit("gidx", "int64", []float64{0, 3, 1, 1, 2, 2, 0, 3, 3, 3, 1, 0}, 3, 4)
	lit("sidx", "int64", []float64{0, 2, 1, 3, 3, 0}, 3, 2)
	lit("mask", "bool", []float64{1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1}, 3, 4)
	lit("cond", "bool", []float64{0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0}, 3, 4)
	lit("mask0", "bool", []float64{0, 0, 0}, 3)
	lit("cls", "int64", []float64{1, 0, 4, 2}, 4)
	lit("cls_ig", "int64", []float64{1, -100, 4, 2}, 4)
	lit("embi", "int64", []float64{1, 0, 9, 3, 3, 0}, 2, 3)
	lit("ctc_t", "int64", []float64{1, 2, 2, 3, 4, 1, 3, 0}, 2, 4)
	lit("ctc_il", "int64", []float64{12, 10}, 2)
	lit("ctc_tl", "int64", []float64{4, 3}, 2)
	lit("ctc_il2", "int64", []float64{12, 2}, 2) // the second target cannot fit
	return p
}

func makeEnv(pool map[string]poolTensor, grads []string) env {
	x := env{}
	for name, p := range pool {
		dt, err := ParseDType(p.DType)
		if err != nil {
			panic(err)
		}
		x[name] = FromSlice(p.Data, p.Shape, dt)
	}
	for _, g := range grads {
		x[g].SetRequiresGrad(true)
	}
	return x
}

// opCases is the table: every wrapper of ops_shape.go, ops_math.go,
// ops_nn.go, inplace.go and create.go appears at least once.
func opCases() []opCase {
	ts := func(t ...*Tensor) []*Tensor { return t }
	pair := func(a, b *Tensor) []*Tensor { return []*Tensor{a, b} }
	cs := []opCase{
		// ---- shape -----------------------------------------------------------------
		{name: "View", py: "a.view(4, 3)", fn: func(x env) any { return x["a"].View(4, 3) }},
		{name: "Reshape", py: "a.reshape(-1)", fn: func(x env) any { return x["a"].Reshape(-1) }},
		{name: "Permute", py: "b234.permute(2, 0, 1)", fn: func(x env) any { return x["b234"].Permute(2, 0, 1) }},
		{name: "Transpose", py: "b234.transpose(0, 2)", fn: func(x env) any { return x["b234"].Transpose(0, 2) }},
		{name: "T", py: "b234.transpose(-2, -1)", fn: func(x env) any { return x["b234"].T() }},
		{name: "Contiguous", py: "a.t().contiguous()", fn: func(x env) any { return x["a"].T().Contiguous() }},
		{name: "Expand", py: "one13.expand(2, 3, 4)", fn: func(x env) any { return x["one13"].Expand(2, 3, 4) }},
		{name: "ExpandNeg", py: "one13.expand(2, -1, 4)", fn: func(x env) any { return x["one13"].Expand(2, -1, 4) }},
		{name: "ExpandAs", py: "one13.expand_as(b234)", fn: func(x env) any { return x["one13"].ExpandAs(x["b234"]) }},
		{name: "ViewAs", py: "a.view_as(a.t())", fn: func(x env) any { return x["a"].ViewAs(x["a"].T()) }},
		{name: "Squeeze", py: "one13.squeeze()", fn: func(x env) any { return x["one13"].Squeeze() }},
		{name: "SqueezeDim", py: "one13.squeeze(-1)", fn: func(x env) any { return x["one13"].SqueezeDim(-1) }},
		{name: "Unsqueeze", py: "a.unsqueeze(1)", fn: func(x env) any { return x["a"].Unsqueeze(1) }},
		{name: "Flatten", py: "b234.flatten(1, 2)", fn: func(x env) any { return x["b234"].Flatten(1, 2) }},
		{name: "Movedim", py: "torch.movedim(b234, [0], [2])", fn: func(x env) any { return x["b234"].Movedim([]int64{0}, []int64{2}) }},
		{name: "Cat", py: "torch.cat([a, b], 1)", fn: func(x env) any { return Cat(ts(x["a"], x["b"]), 1) }, grads: []string{"a"}},
		{name: "Stack", py: "torch.stack([a, b], 1)", fn: func(x env) any { return Stack(ts(x["a"], x["b"]), 1) }},
		{name: "Chunk", py: "a.chunk(2, 1)", fn: func(x env) any { return x["a"].Chunk(2, 1) }},
		{name: "Unbind", py: "a.unbind(1)", fn: func(x env) any { return x["a"].Unbind(1) }},
		{name: "Alias", py: "torch.ops.aten.alias(a)", fn: func(x env) any { return x["a"].Alias() }},
		{name: "Split", py: "a.split([1, 3], 1)", fn: func(x env) any { return x["a"].Split([]int64{1, 3}, 1) }},
		{name: "SplitEvery", py: "a.split(3, 1)", fn: func(x env) any { return x["a"].SplitEvery(3, 1) }},
		{name: "Narrow", py: "a.narrow(1, 1, 2)", fn: func(x env) any { return x["a"].Narrow(1, 1, 2) }},
		{name: "Slice", py: "a[:, 1:4:2]", fn: func(x env) any { return x["a"].Slice(1, 1, 4, 2) }},
		{name: "SliceNeg", py: "a[-2:100]", fn: func(x env) any { return x["a"].Slice(0, -2, 100, 1) }},
		{name: "Select", py: "a[:, 2]", fn: func(x env) any { return x["a"].Select(1, 2) }},
		{name: "IndexSelect", py: "a.index_select(1, idx3)", fn: func(x env) any { return x["a"].IndexSelect(1, x["idx3"]) }},
		{name: "Index", py: "a[idx3]", fn: func(x env) any { return x["a"].Index(x["idx3"]) }},
		{name: "IndexNone", py: "a[:, idx3]", fn: func(x env) any { return x["a"].Index(nil, x["idx3"]) }},
		{name: "IndexMask", py: "a[mask]", fn: func(x env) any { return x["a"].Index(x["mask"]) }},
		{name: "IndexPut", py: "a.index_put((idx3,), r4)", fn: func(x env) any { return x["a"].IndexPut(ts(x["idx3"]), x["r4"], false) }},
		{name: "IndexPutAcc", py: "a.index_put((idxdup,), r4, True)", fn: func(x env) any { return x["a"].IndexPut(ts(x["idxdup"]), x["r4"], true) }},
		{name: "Gather", py: "a.gather(1, gidx)", fn: func(x env) any { return x["a"].Gather(1, x["gidx"]) }, grads: []string{"a"}},
		{name: "Scatter", py: "a.scatter(1, sidx, b)", fn: func(x env) any { return x["a"].Scatter(1, x["sidx"], x["b"]) }},
		{name: "ScatterAdd", py: "a.scatter_add(1, gidx, b)", fn: func(x env) any { return x["a"].ScatterAdd(1, x["gidx"], x["b"]) }},
		{name: "MaskedFill", py: "a.masked_fill(mask, 7.5)", fn: func(x env) any { return x["a"].MaskedFill(x["mask"], 7.5) }},
		{name: "MaskedFillInt", py: "ia.masked_fill(mask, 3)", fn: func(x env) any { return x["ia"].MaskedFill(x["mask"], 3) }},
		{name: "MaskedFillTensor", py: "a.masked_fill(mask, torch.tensor(3.0))", fn: func(x env) any { return x["a"].MaskedFillTensor(x["mask"], Scalar(3)) }},
		{name: "Where", py: "torch.where(cond, a, b)", fn: func(x env) any { return Where(x["cond"], x["a"], x["b"]) }},
		{name: "Tril", py: "a.tril(0)", fn: func(x env) any { return x["a"].Tril(0) }},
		{name: "Triu", py: "a.triu(1)", fn: func(x env) any { return x["a"].Triu(1) }},
		{name: "Pad", py: "F.pad(a, (1, 2), value=0.5)", fn: func(x env) any { return x["a"].Pad([]int64{1, 2}, 0.5) }},
		{name: "Pad2", py: "F.pad(a, (1, 1, 2, 0))", fn: func(x env) any { return x["a"].Pad([]int64{1, 1, 2, 0}, 0) }},
		{name: "PadInt", py: "F.pad(ia, (1, 1), value=-1)", fn: func(x env) any { return x["ia"].Pad([]int64{1, 1}, -1) }},
		{name: "PadReflect", py: "F.pad(seq, (2, 1), mode='reflect')", fn: func(x env) any { return x["seq"].PadMode([]int64{2, 1}, "reflect") }},
		{name: "PadReplicate", py: "F.pad(seq, (2, 3), mode='replicate')", fn: func(x env) any { return x["seq"].PadMode([]int64{2, 3}, "replicate") }},
		{name: "PadConstant", py: "F.pad(seq, (2, 3), mode='constant')", fn: func(x env) any { return x["seq"].PadMode([]int64{2, 3}, "constant") }},
		{name: "Repeat", py: "a.repeat(2, 1, 3)", fn: func(x env) any { return x["a"].Repeat(2, 1, 3) }},
		{name: "RepeatInterleave", py: "a.repeat_interleave(2, 0)", fn: func(x env) any { return x["a"].RepeatInterleave(2, 0) }},
		{name: "Flip", py: "a.flip(0, 1)", fn: func(x env) any { return x["a"].Flip(0, 1) }},
		{name: "Roll", py: "a.roll(1, 1)", fn: func(x env) any { return x["a"].Roll([]int64{1}, []int64{1}) }},
		{name: "Roll2", py: "a.roll((1, -1), (0, 1))", fn: func(x env) any { return x["a"].Roll([]int64{1, -1}, []int64{0, 1}) }},
		{name: "Unfold", py: "seq.unfold(2, 4, 3)", fn: func(x env) any { return x["seq"].Unfold(2, 4, 3) }},
		{name: "OneHot", py: "F.one_hot(cls, 6)", fn: func(x env) any { return x["cls"].OneHot(6) }},
		{name: "OneHotInfer", py: "F.one_hot(cls)", fn: func(x env) any { return x["cls"].OneHot(-1) }},
		{name: "Clone", py: "a.clone()", fn: func(x env) any { return x["a"].Clone() }},
		{name: "Detach", py: "a.detach()", fn: func(x env) any { return x["a"].Detach() }},
		{name: "To", py: "a.to('cpu', torch.float64)", fn: func(x env) any { return x["a"].To(CPU, Float64) }},
		{name: "ToAsync", py: "a.to('cpu', torch.float64, non_blocking=True)", fn: func(x env) any { return x["a"].ToAsync(CPU, Float64) }},
		{name: "ToDevice", py: "a.to('cpu')", fn: func(x env) any { return x["a"].ToDevice(CPU) }},
		{name: "ToDType", py: "a.to(torch.int64)", fn: func(x env) any { return x["a"].ToDType(Int64) }},
		{name: "ToBool", py: "ia.to(torch.bool)", fn: func(x env) any { return x["ia"].ToDType(Bool) }},

		// ---- elementwise math ------------------------------------------------------
		{name: "Add", py: "a + b", fn: func(x env) any { return x["a"].Add(x["b"]) }, grads: []string{"a", "b"}},
		{name: "AddBroadcast", py: "a + r4", fn: func(x env) any { return x["a"].Add(x["r4"]) }, grads: []string{"r4"}},
		{name: "AddScaled", py: "torch.add(a, b, alpha=2.5)", fn: func(x env) any { return x["a"].AddScaled(x["b"], 2.5) }},
		{name: "AddScalar", py: "a + 2.5", fn: func(x env) any { return x["a"].AddScalar(2.5) }},
		{name: "AddScalarInt", py: "ia + 2", fn: func(x env) any { return x["ia"].AddScalar(2) }},
		{name: "AddScalarIntFloat", py: "ia + 2.5", fn: func(x env) any { return x["ia"].AddScalar(2.5) }},
		{name: "Sub", py: "a - b", fn: func(x env) any { return x["a"].Sub(x["b"]) }},
		{name: "SubScalar", py: "a - 1.5", fn: func(x env) any { return x["a"].SubScalar(1.5) }},
		{name: "RSubScalar", py: "1.5 - a", fn: func(x env) any { return x["a"].RSubScalar(1.5) }},
		{name: "Mul", py: "a * b", fn: func(x env) any { return x["a"].Mul(x["b"]) }, grads: []string{"a", "b"}},
		{name: "MulScalar", py: "a * -3", fn: func(x env) any { return x["a"].MulScalar(-3) }},
		{name: "MulScalarInt", py: "ia * 3", fn: func(x env) any { return x["ia"].MulScalar(3) }},
		{name: "Div", py: "a / p", fn: func(x env) any { return x["a"].Div(x["p"]) }, grads: []string{"a", "p"}},
		{name: "DivInt", py: "ia / ib", fn: func(x env) any { return x["ia"].Div(x["ib"]) }},
		{name: "DivScalar", py: "a / 4", fn: func(x env) any { return x["a"].DivScalar(4) }},
		{name: "DivScalarInt", py: "ia / 2", fn: func(x env) any { return x["ia"].DivScalar(2) }},
		{name: "FloorDiv", py: "torch.div(a, p, rounding_mode='floor')", fn: func(x env) any { return x["a"].FloorDiv(x["p"]) }},
		{name: "FloorDivInt", py: "torch.div(ia, ib, rounding_mode='floor')", fn: func(x env) any { return x["ia"].FloorDiv(x["ib"]) }},
		{name: "FloorDivScalar", py: "torch.div(a, 0.75, rounding_mode='floor')", fn: func(x env) any { return x["a"].FloorDivScalar(0.75) }},
		{name: "FloorDivScalarInt", py: "torch.div(ia - 3, 2, rounding_mode='floor')", fn: func(x env) any { return x["ia"].SubScalar(3).FloorDivScalar(2) }},
		{name: "Remainder", py: "torch.remainder(a, 1.5)", fn: func(x env) any { return x["a"].Remainder(1.5) }},
		{name: "RemainderInt", py: "torch.remainder(ia, 3)", fn: func(x env) any { return x["ia"].Remainder(3) }},
		{name: "Neg", py: "-a", fn: func(x env) any { return x["a"].Neg() }},
		{name: "Pow", py: "a ** 3", fn: func(x env) any { return x["a"].Pow(3) }, grads: []string{"a"}},
		{name: "PowFrac", py: "p ** 0.5", fn: func(x env) any { return x["p"].Pow(0.5) }},
		{name: "PowTensor", py: "p ** b", fn: func(x env) any { return x["p"].PowTensor(x["b"]) }, grads: []string{"p", "b"}},
		{name: "Exp", py: "a.exp()", fn: func(x env) any { return x["a"].Exp() }},
		{name: "Log", py: "p.log()", fn: func(x env) any { return x["p"].Log() }},
		{name: "LogNeg", py: "a.log()", fn: func(x env) any { return x["a"].Log() }},
		{name: "Log1p", py: "p.log1p()", fn: func(x env) any { return x["p"].Log1p() }},
		{name: "Sqrt", py: "p.sqrt()", fn: func(x env) any { return x["p"].Sqrt() }},
		{name: "Rsqrt", py: "p.rsqrt()", fn: func(x env) any { return x["p"].Rsqrt() }},
		{name: "Abs", py: "a.abs()", fn: func(x env) any { return x["a"].Abs() }},
		{name: "AbsInt", py: "ia.abs()", fn: func(x env) any { return x["ia"].Abs() }},
		{name: "Sign", py: "ia.sign()", fn: func(x env) any { return x["ia"].Sign() }},
		{name: "Sin", py: "a.sin()", fn: func(x env) any { return x["a"].Sin() }},
		{name: "Cos", py: "a.cos()", fn: func(x env) any { return x["a"].Cos() }},
		{name: "Floor", py: "a.floor()", fn: func(x env) any { return x["a"].Floor() }},
		{name: "Ceil", py: "a.ceil()", fn: func(x env) any { return x["a"].Ceil() }},
		{name: "Round", py: "(a * 2).round()", fn: func(x env) any { return x["a"].MulScalar(2).Round() }},
		{name: "RoundHalf", py: "torch.tensor([0.5, 1.5, 2.5, -0.5]).round()", fn: func(x env) any { return FromSlice([]float32{0.5, 1.5, 2.5, -0.5}, nil).Round() }},
		{name: "Reciprocal", py: "p.reciprocal()", fn: func(x env) any { return x["p"].Reciprocal() }},
		{name: "Square", py: "a.square()", fn: func(x env) any { return x["a"].Square() }},
		{name: "Clamp", py: "a.clamp(-0.5, 1)", fn: func(x env) any { return x["a"].Clamp(-0.5, 1) }, grads: []string{"a"}},
		{name: "ClampInt", py: "ia.clamp(-2, 3)", fn: func(x env) any { return x["ia"].Clamp(-2, 3) }},
		{name: "ClampMin", py: "a.clamp_min(0.25)", fn: func(x env) any { return x["a"].ClampMin(0.25) }},
		{name: "ClampMax", py: "a.clamp_max(0.25)", fn: func(x env) any { return x["a"].ClampMax(0.25) }},
		{name: "Maximum", py: "torch.maximum(a, b)", fn: func(x env) any { return x["a"].Maximum(x["b"]) }},
		{name: "Minimum", py: "torch.minimum(a, b)", fn: func(x env) any { return x["a"].Minimum(x["b"]) }},
		{name: "Lerp", py: "torch.lerp(a, b, 0.3)", fn: func(x env) any { return x["a"].Lerp(x["b"], 0.3) }},
		{name: "Addcmul", py: "torch.addcmul(a, b, c, value=0.5)", fn: func(x env) any { return x["a"].Addcmul(x["b"], x["c"], 0.5) }},
		{name: "Addcdiv", py: "torch.addcdiv(a, b, p, value=-2)", fn: func(x env) any { return x["a"].Addcdiv(x["b"], x["p"], -2) }},
		{name: "IsFinite", py: "a.log().isfinite()", fn: func(x env) any { return x["a"].Log().IsFinite() }},
		{name: "IsNan", py: "a.log().isnan()", fn: func(x env) any { return x["a"].Log().IsNan() }},
		{name: "IsInf", py: "ia.float().reciprocal().isinf()", fn: func(x env) any { return x["ia"].ToDType(Float32).Reciprocal().IsInf() }},
		{name: "Inf", py: "ia.float().reciprocal()", fn: func(x env) any { return x["ia"].ToDType(Float32).Reciprocal() }},
		{name: "LogicalNot", py: "mask.logical_not()", fn: func(x env) any { return x["mask"].LogicalNot() }},
		{name: "LogicalAnd", py: "mask.logical_and(cond)", fn: func(x env) any { return x["mask"].LogicalAnd(x["cond"]) }},
		{name: "LogicalOr", py: "mask.logical_or(cond)", fn: func(x env) any { return x["mask"].LogicalOr(x["cond"]) }},
		{name: "Eq", py: "ia == ib", fn: func(x env) any { return x["ia"].Eq(x["ib"]) }},
		{name: "Ne", py: "ia != ib", fn: func(x env) any { return x["ia"].Ne(x["ib"]) }},
		{name: "Lt", py: "a < b", fn: func(x env) any { return x["a"].Lt(x["b"]) }},
		{name: "Le", py: "ia <= ib", fn: func(x env) any { return x["ia"].Le(x["ib"]) }},
		{name: "Gt", py: "a > b", fn: func(x env) any { return x["a"].Gt(x["b"]) }},
		{name: "Ge", py: "ia >= ib", fn: func(x env) any { return x["ia"].Ge(x["ib"]) }},
		{name: "EqScalar", py: "ia == 2", fn: func(x env) any { return x["ia"].EqScalar(2) }},
		{name: "NeScalar", py: "ia != 2", fn: func(x env) any { return x["ia"].NeScalar(2) }},
		{name: "LtScalar", py: "a < 0.5", fn: func(x env) any { return x["a"].LtScalar(0.5) }},
		{name: "LeScalar", py: "ia <= 2", fn: func(x env) any { return x["ia"].LeScalar(2) }},
		{name: "GtScalar", py: "a > -0.5", fn: func(x env) any { return x["a"].GtScalar(-0.5) }},
		{name: "GeScalar", py: "ia >= 2", fn: func(x env) any { return x["ia"].GeScalar(2) }},
		{name: "AllCloseFalse", py: "torch.allclose(a, b, 1e-5, 1e-8)", fn: func(x env) any { return x["a"].AllClose(x["b"], 1e-5, 1e-8) }},
		{name: "AllCloseTrue", py: "torch.allclose(a, a + 1e-3, 0, 1e-2)", fn: func(x env) any { return x["a"].AllClose(x["a"].AddScalar(1e-3), 0, 1e-2) }},
		{name: "Equal", py: "torch.equal(a, a.clone())", fn: func(x env) any { return x["a"].Equal(x["a"].Clone()) }},
		{name: "EqualFalse", py: "torch.equal(a, b)", fn: func(x env) any { return x["a"].Equal(x["b"]) }},

		// ---- reductions ------------------------------------------------------------
		{name: "Sum", py: "a.sum()", fn: func(x env) any { return x["a"].Sum() }, grads: []string{"a"}},
		{name: "SumInt", py: "ia.sum()", fn: func(x env) any { return x["ia"].Sum() }},
		{name: "SumBool", py: "mask.sum()", fn: func(x env) any { return x["mask"].Sum() }},
		{name: "SumDim", py: "b234.sum([0, 2], keepdim=True)", fn: func(x env) any { return x["b234"].SumDim([]int64{0, 2}, true) }},
		{name: "Mean", py: "a.mean()", fn: func(x env) any { return x["a"].Mean() }, grads: []string{"a"}},
		{name: "MeanDim", py: "b234.mean([-1])", fn: func(x env) any { return x["b234"].MeanDim([]int64{-1}, false) }},
		{name: "Max", py: "a.max()", fn: func(x env) any { return x["a"].Max() }},
		{name: "MaxDim", py: "a.max(1)", fn: func(x env) any { return pair(x["a"].MaxDim(1, false)) }, grads: []string{"a"}},
		{name: "Min", py: "ia.min()", fn: func(x env) any { return x["ia"].Min() }},
		{name: "MinDim", py: "a.min(0, keepdim=True)", fn: func(x env) any { return pair(x["a"].MinDim(0, true)) }},
		{name: "Argmax", py: "a.argmax(1)", fn: func(x env) any { return x["a"].Argmax(1, false) }},
		{name: "Argmin", py: "a.argmin(0, keepdim=True)", fn: func(x env) any { return x["a"].Argmin(0, true) }},
		{name: "Var", py: "a.var(1, unbiased=True)", fn: func(x env) any { return x["a"].Var([]int64{1}, 1, false) }},
		{name: "VarBiased", py: "b234.var([0, 2], unbiased=False, keepdim=True)", fn: func(x env) any { return x["b234"].Var([]int64{0, 2}, 0, true) }},
		{name: "Std", py: "a.std(0, unbiased=True)", fn: func(x env) any { return x["a"].Std([]int64{0}, 1, false) }},
		{name: "StdBiased", py: "a.std([0, 1], unbiased=False, keepdim=True)", fn: func(x env) any { return x["a"].Std([]int64{0, 1}, 0, true) }},
		{name: "Norm", py: "torch.linalg.vector_norm(a, 2)", fn: func(x env) any { return x["a"].Norm(2) }},
		{name: "Norm1", py: "torch.linalg.vector_norm(a, 1)", fn: func(x env) any { return x["a"].Norm(1) }},
		{name: "NormInf", py: "torch.linalg.vector_norm(a, math.inf)", fn: func(x env) any { return x["a"].Norm(math.Inf(1)) }},
		{name: "NormDim", py: "torch.linalg.vector_norm(a, 3, [1], True)", fn: func(x env) any { return x["a"].NormDim(3, []int64{1}, true) }},
		{name: "Logsumexp", py: "a.logsumexp([1])", fn: func(x env) any { return x["a"].Logsumexp([]int64{1}, false) }, grads: []string{"a"}},
		{name: "Cumsum", py: "a.cumsum(1)", fn: func(x env) any { return x["a"].Cumsum(1) }},
		{name: "CumsumInt", py: "ia.cumsum(0)", fn: func(x env) any { return x["ia"].Cumsum(0) }},
		{name: "Cumprod", py: "p.cumprod(1)", fn: func(x env) any { return x["p"].Cumprod(1) }},
		{name: "Prod", py: "p.prod()", fn: func(x env) any { return x["p"].Prod() }},
		{name: "Any", py: "mask.any()", fn: func(x env) any { return x["mask"].Any() }},
		{name: "AnyFalse", py: "mask0.any()", fn: func(x env) any { return x["mask0"].Any() }},
		{name: "All", py: "mask.all()", fn: func(x env) any { return x["mask"].All() }},
		{name: "Topk", py: "a.topk(2, 1)", fn: func(x env) any { return pair(x["a"].Topk(2, 1, true)) }},
		{name: "TopkSmallest", py: "a.topk(2, 0, largest=False)", fn: func(x env) any { return pair(x["a"].Topk(2, 0, false)) }},
		{name: "Sort", py: "a.sort(1)", fn: func(x env) any { return pair(x["a"].Sort(1, false)) }},
		{name: "SortDesc", py: "a.sort(0, descending=True)", fn: func(x env) any { return pair(x["a"].Sort(0, true)) }},
		{name: "Argsort", py: "a.argsort(1)", fn: func(x env) any { return x["a"].Argsort(1, false) }},
		{name: "ArgsortDesc", py: "a.argsort(1, descending=True)", fn: func(x env) any { return x["a"].Argsort(1, true) }},
		{name: "CountNonzero", py: "torch.count_nonzero(ia)", fn: func(x env) any { return x["ia"].CountNonzero() }},
		{name: "Nonzero", py: "mask.nonzero()", fn: func(x env) any { return x["mask"].Nonzero() }},
		{name: "Item", py: "a.sum().item()", fn: func(x env) any { return x["a"].Sum().Item() }},
		{name: "ItemInt", py: "ia.sum().item()", fn: func(x env) any { return x["ia"].Sum().ItemInt() }},

		// ---- linear algebra ---------------------------------------------------------
		{name: "Matmul", py: "a @ m45", fn: func(x env) any { return x["a"].Matmul(x["m45"]) }, grads: []string{"a", "m45"}},
		{name: "MatmulBatched", py: "b234 @ m45", fn: func(x env) any { return x["b234"].Matmul(x["m45"]) }, grads: []string{"b234", "m45"}},
		{name: "MatmulVec", py: "a @ r4", fn: func(x env) any { return x["a"].Matmul(x["r4"]) }},
		{name: "Mm", py: "a.mm(m45)", fn: func(x env) any { return x["a"].Mm(x["m45"]) }},
		{name: "Bmm", py: "b234.bmm(b245)", fn: func(x env) any { return x["b234"].Bmm(x["b245"]) }, grads: []string{"b234", "b245"}},
		{name: "Outer", py: "torch.outer(r3, r4)", fn: func(x env) any { return x["r3"].Outer(x["r4"]) }},
		{name: "Einsum", py: "torch.einsum('ij,jk->ik', a, m45)", fn: func(x env) any { return Einsum("ij,jk->ik", x["a"], x["m45"]) }},
		{name: "EinsumBatched", py: "torch.einsum('bij,bjk->bki', b234, b245)", fn: func(x env) any { return Einsum("bij,bjk->bki", x["b234"], x["b245"]) }, grads: []string{"b234"}},
		{name: "Linear", py: "F.linear(a, w54, r5)", fn: func(x env) any { return Linear(x["a"], x["w54"], x["r5"]) }, grads: []string{"a", "w54", "r5"}},
		{name: "LinearNoBias", py: "F.linear(b234, w54)", fn: func(x env) any { return Linear(x["b234"], x["w54"], nil) }, grads: []string{"b234", "w54"}},
		{name: "Bilinear", py: "F.bilinear(x23, x24, bw, r6)", fn: func(x env) any { return Bilinear(x["x23"], x["x24"], x["bw"], x["r6"]) }, grads: []string{"x23", "bw"}},
		{name: "Addmm", py: "torch.addmm(r5, a, m45, beta=0.5, alpha=2)", fn: func(x env) any { return x["r5"].Addmm(x["a"], x["m45"], 0.5, 2) }},

		// ---- activations -----------------------------------------------------------
		{name: "Softmax", py: "a.softmax(1)", fn: func(x env) any { return x["a"].Softmax(1) }, grads: []string{"a"}},
		{name: "Softmax0", py: "b234.softmax(0)", fn: func(x env) any { return x["b234"].Softmax(0) }, grads: []string{"b234"}},
		{name: "LogSoftmax", py: "a.log_softmax(-1)", fn: func(x env) any { return x["a"].LogSoftmax(-1) }, grads: []string{"a"}},
		{name: "Relu", py: "a.relu()", fn: func(x env) any { return x["a"].Relu() }, grads: []string{"a"}},
		{name: "Gelu", py: "F.gelu(a)", fn: func(x env) any { return x["a"].Gelu() }, grads: []string{"a"}},
		{name: "GeluTanh", py: "F.gelu(a, approximate='tanh')", fn: func(x env) any { return x["a"].GeluTanh() }, grads: []string{"a"}},
		{name: "Silu", py: "F.silu(a)", fn: func(x env) any { return x["a"].Silu() }, grads: []string{"a"}},
		{name: "Softplus", py: "F.softplus(a, 2, 1)", fn: func(x env) any { return x["a"].Softplus(2, 1) }},
		{name: "Sigmoid", py: "a.sigmoid()", fn: func(x env) any { return x["a"].Sigmoid() }, grads: []string{"a"}},
		{name: "Tanh", py: "a.tanh()", fn: func(x env) any { return x["a"].Tanh() }, grads: []string{"a"}},
		{name: "Glu", py: "F.glu(a, 1)", fn: func(x env) any { return x["a"].Glu(1) }, grads: []string{"a"}},
		{name: "Glu0", py: "F.glu(gn_x, 1)", fn: func(x env) any { return x["gn_x"].Glu(1) }, grads: []string{"gn_x"}},
		{name: "LeakyRelu", py: "F.leaky_relu(a, 0.1)", fn: func(x env) any { return x["a"].LeakyRelu(0.1) }},
		{name: "Elu", py: "F.elu(a, 1.5)", fn: func(x env) any { return x["a"].Elu(1.5) }},
		{name: "Mish", py: "F.mish(a)", fn: func(x env) any { return x["a"].Mish() }},
		{name: "DropoutEval", py: "F.dropout(a, 0.5, False)", fn: func(x env) any { return x["a"].Dropout(0.5, false) }},
		{name: "Dropout", py: "F.dropout(a, 0.5, True)", fn: func(x env) any { return x["a"].Dropout(0.5, true) }, seed: true},

		// ---- convolution, normalisation, embedding, pooling ------------------------
		{name: "Conv1d", py: "F.conv1d(seq, w1, bias4, stride=2, padding=1)",
			fn: func(x env) any {
				return Conv1d(x["seq"], x["w1"], x["bias4"], ConvOpts{Stride: []int64{2}, Padding: []int64{1}})
			},
			grads: []string{"seq", "w1", "bias4"}},
		{name: "Conv1dDilated", py: "F.conv1d(seq, w1, None, dilation=2)",
			fn:    func(x env) any { return Conv1d(x["seq"], x["w1"], nil, ConvOpts{Dilation: []int64{2}}) },
			grads: []string{"seq", "w1"}},
		{name: "Conv1dGroups", py: "F.conv1d(gn_x, wg, None, padding=1, groups=3)",
			fn:    func(x env) any { return Conv1d(x["gn_x"], x["wg"], nil, ConvOpts{Padding: []int64{1}, Groups: 3}) },
			grads: []string{"gn_x", "wg"}},
		{name: "Conv2d", py: "F.conv2d(img, w2, bias4, padding=1)",
			fn:    func(x env) any { return Conv2d(x["img"], x["w2"], x["bias4"], ConvOpts{Padding: []int64{1}}) },
			grads: []string{"img", "w2", "bias4"}},
		{name: "Conv2dStrided", py: "F.conv2d(img, w2, None, stride=(2, 1), padding=(0, 1), dilation=(1, 2))",
			fn: func(x env) any {
				return Conv2d(x["img"], x["w2"], nil, ConvOpts{Stride: []int64{2, 1}, Padding: []int64{0, 1}, Dilation: []int64{1, 2}})
			},
			grads: []string{"img", "w2"}},
		{name: "ConvTranspose1d", py: "F.conv_transpose1d(seq, wt1, bias4, stride=2, padding=1, output_padding=1)",
			fn: func(x env) any {
				return ConvTranspose1d(x["seq"], x["wt1"], x["bias4"], ConvOpts{Stride: []int64{2}, Padding: []int64{1}, OutputPadding: []int64{1}})
			},
			grads: []string{"seq", "wt1", "bias4"}},
		{name: "ConvTranspose1dDilated", py: "F.conv_transpose1d(seq, wt1, None, dilation=2)",
			fn:    func(x env) any { return ConvTranspose1d(x["seq"], x["wt1"], nil, ConvOpts{Dilation: []int64{2}}) },
			grads: []string{"seq", "wt1"}},
		{name: "ConvTranspose2d", py: "F.conv_transpose2d(img, wt2, bias4, stride=2, padding=1, output_padding=1)",
			fn: func(x env) any {
				return ConvTranspose2d(x["img"], x["wt2"], x["bias4"], ConvOpts{Stride: []int64{2}, Padding: []int64{1}, OutputPadding: []int64{1}})
			},
			grads: []string{"img", "wt2", "bias4"}},
		{name: "BatchNormTrain", py: "(F.batch_norm(bn_x, rm, rv, bnw, bnb, training=True, momentum=0.1, eps=1e-5), rm, rv)",
			fn: func(x env) any {
				return ts(BatchNorm(x["bn_x"], x["bnw"], x["bnb"], x["rm"], x["rv"], true, 0.1, 1e-5), x["rm"], x["rv"])
			},
			grads: []string{"bn_x", "bnw", "bnb"}},
		{name: "BatchNormEval", py: "F.batch_norm(bn_x, rm, rv, bnw, bnb, training=False, eps=1e-3)",
			fn:    func(x env) any { return BatchNorm(x["bn_x"], x["bnw"], x["bnb"], x["rm"], x["rv"], false, 0.1, 1e-3) },
			grads: []string{"bn_x", "bnw"}},
		{name: "BatchNormNoStats", py: "F.batch_norm(bn_x, None, None, None, None, training=True)",
			fn:    func(x env) any { return BatchNorm(x["bn_x"], nil, nil, nil, nil, true, 0.1, 1e-5) },
			grads: []string{"bn_x"}},
		{name: "LayerNorm", py: "F.layer_norm(b234, [4], lnw, lnb, 1e-5)",
			fn:    func(x env) any { return LayerNorm(x["b234"], []int64{4}, x["lnw"], x["lnb"], 1e-5) },
			grads: []string{"b234", "lnw", "lnb"}},
		{name: "LayerNorm2", py: "F.layer_norm(b234, [3, 4], None, None, 1e-3)",
			fn:    func(x env) any { return LayerNorm(x["b234"], []int64{3, 4}, nil, nil, 1e-3) },
			grads: []string{"b234"}},
		{name: "GroupNorm", py: "F.group_norm(gn_x, 3, gnw, gnb, 1e-5)",
			fn:    func(x env) any { return GroupNorm(x["gn_x"], 3, x["gnw"], x["gnb"], 1e-5) },
			grads: []string{"gn_x", "gnw", "gnb"}},
		{name: "Embedding", py: "F.embedding(embi, embw)",
			fn:    func(x env) any { return Embedding(x["embw"], x["embi"], -1) },
			grads: []string{"embw"}},
		{name: "EmbeddingPadding", py: "F.embedding(embi, embw, padding_idx=0)",
			fn:    func(x env) any { return Embedding(x["embw"], x["embi"], 0) },
			grads: []string{"embw"}},
		{name: "MaxPool1d", py: "F.max_pool1d(seq, 3, 2, 1)", fn: func(x env) any { return MaxPool1d(x["seq"], 3, 2, 1) }, grads: []string{"seq"}},
		{name: "MaxPool1dDefStride", py: "F.max_pool1d(seq, 2)", fn: func(x env) any { return MaxPool1d(x["seq"], 2, 0, 0) }},
		{name: "MaxPool2d", py: "F.max_pool2d(img, 2)", fn: func(x env) any { return MaxPool2d(x["img"], 2, 0, 0) }, grads: []string{"img"}},
		{name: "MaxPool2dPad", py: "F.max_pool2d(img, 3, 2, 1)", fn: func(x env) any { return MaxPool2d(x["img"], 3, 2, 1) }},
		{name: "AvgPool1d", py: "F.avg_pool1d(seq, 3, 2, 1)", fn: func(x env) any { return AvgPool1d(x["seq"], 3, 2, 1) }},
		{name: "AvgPool2d", py: "F.avg_pool2d(img, 3, 2, 1)", fn: func(x env) any { return AvgPool2d(x["img"], 3, 2, 1) }, grads: []string{"img"}},
		{name: "AvgPool2dDefStride", py: "F.avg_pool2d(img, 2)", fn: func(x env) any { return AvgPool2d(x["img"], 2, 0, 0) }},
		{name: "AdaptiveAvgPool1d", py: "F.adaptive_avg_pool1d(seq, 4)", fn: func(x env) any { return AdaptiveAvgPool1d(x["seq"], 4) }},
		{name: "AdaptiveAvgPool2d", py: "F.adaptive_avg_pool2d(img, (2, 3))", fn: func(x env) any { return AdaptiveAvgPool2d(x["img"], 2, 3) }},
		{name: "AdaptiveMaxPool2d", py: "F.adaptive_max_pool2d(img, (2, 3))", fn: func(x env) any { return AdaptiveMaxPool2d(x["img"], 2, 3) }},
		{name: "InterpNearest1d", py: "F.interpolate(seq, size=15, mode='nearest')", fn: func(x env) any { return Interpolate(x["seq"], []int64{15}, "nearest", false) }},
		{name: "InterpNearest2d", py: "F.interpolate(img, size=(9, 4), mode='nearest')", fn: func(x env) any { return Interpolate(x["img"], []int64{9, 4}, "nearest", false) }},
		{name: "InterpLinear", py: "F.interpolate(seq, size=17, mode='linear', align_corners=False)", fn: func(x env) any { return Interpolate(x["seq"], []int64{17}, "linear", false) }},
		{name: "InterpLinearAC", py: "F.interpolate(seq, size=17, mode='linear', align_corners=True)", fn: func(x env) any { return Interpolate(x["seq"], []int64{17}, "linear", true) }},
		{name: "InterpBilinear", py: "F.interpolate(img, size=(4, 9), mode='bilinear', align_corners=False)", fn: func(x env) any { return Interpolate(x["img"], []int64{4, 9}, "bilinear", false) }, grads: []string{"img"}},
		{name: "InterpBilinearAC", py: "F.interpolate(img, size=(4, 9), mode='bilinear', align_corners=True)", fn: func(x env) any { return Interpolate(x["img"], []int64{4, 9}, "bilinear", true) }},

		// ---- spectral --------------------------------------------------------------
		{name: "HannWindow", py: "torch.hann_window(64)", fn: func(x env) any { return HannWindow(64, true) }},
		{name: "HannWindowSym", py: "torch.hann_window(10, periodic=False, dtype=torch.float64)", fn: func(x env) any { return HannWindow(10, false, Float64) }},
		{name: "StftMag", py: "torch.stft(audio, 64, 16, 64, torch.hann_window(64), center=True, pad_mode='reflect', return_complex=True).abs()",
			fn:    func(x env) any { return Stft(x["audio"], 64, 16, 64, HannWindow(64, true), 1) },
			grads: []string{"audio"}, tol: 1e-3},
		{name: "StftPower", py: "torch.stft(audio1, 32, 8, 24, torch.hann_window(24), center=True, pad_mode='reflect', return_complex=True).abs() ** 2",
			fn:    func(x env) any { return Stft(x["audio1"], 32, 8, 24, HannWindow(24, true), 2) },
			grads: []string{"audio1"}, tol: 1e-3},

		// ---- losses ----------------------------------------------------------------
		{name: "CrossEntropy", py: "F.cross_entropy(m45, cls)",
			fn:    func(x env) any { return CrossEntropy(x["m45"], x["cls"], nil, ReduceMean, -100, 0) },
			grads: []string{"m45"}},
		{name: "CrossEntropySmooth", py: "F.cross_entropy(m45, cls, label_smoothing=0.1)",
			fn:    func(x env) any { return CrossEntropy(x["m45"], x["cls"], nil, ReduceMean, -100, 0.1) },
			grads: []string{"m45"}},
		{name: "CrossEntropyIgnore", py: "F.cross_entropy(m45, cls_ig, ignore_index=-100)",
			fn:    func(x env) any { return CrossEntropy(x["m45"], x["cls_ig"], nil, ReduceMean, -100, 0) },
			grads: []string{"m45"}},
		{name: "CrossEntropyIgnore4", py: "F.cross_entropy(m45, cls, ignore_index=4, reduction='sum')",
			fn:    func(x env) any { return CrossEntropy(x["m45"], x["cls"], nil, ReduceSum, 4, 0) },
			grads: []string{"m45"}},
		{name: "CrossEntropyWeighted", py: "F.cross_entropy(m45, cls_ig, weight=cew, label_smoothing=0.2)",
			fn:    func(x env) any { return CrossEntropy(x["m45"], x["cls_ig"], x["cew"], ReduceMean, -100, 0.2) },
			grads: []string{"m45"}},
		{name: "CrossEntropyNone", py: "F.cross_entropy(m45, cls, weight=cew, reduction='none')",
			fn:    func(x env) any { return CrossEntropy(x["m45"], x["cls"], x["cew"], ReduceNone, -100, 0) },
			grads: []string{"m45"}},
		{name: "CrossEntropy3d", py: "F.cross_entropy(b234, idx3.view(1, 3).expand(2, 3).remainder(3)[:, :3].reshape(2, 3)[:, :1].expand(2, 4))",
			fn: func(x env) any {
				tgt := x["idx3"].View(1, 3).Expand(2, 3).Remainder(3).Slice(1, 0, 3, 1).Reshape(2, 3).Slice(1, 0, 1, 1).Expand(2, 4)
				return CrossEntropy(x["b234"], tgt, nil, ReduceMean, -100, 0)
			},
			grads: []string{"b234"}},
		{name: "NLLLoss", py: "F.nll_loss(m45.log_softmax(1), cls_ig, weight=cew)",
			fn:    func(x env) any { return NLLLoss(x["m45"].LogSoftmax(1), x["cls_ig"], x["cew"], ReduceMean, -100) },
			grads: []string{"m45"}},
		{name: "CTCLoss", py: "F.ctc_loss(ctc_x.log_softmax(2), ctc_t, ctc_il, ctc_tl)",
			fn: func(x env) any {
				return CTCLoss(x["ctc_x"].LogSoftmax(2), x["ctc_t"], x["ctc_il"], x["ctc_tl"], 0, ReduceMean, false)
			},
			grads: []string{"ctc_x"}, tol: 1e-3},
		{name: "CTCLossSum", py: "F.ctc_loss(ctc_x.log_softmax(2), ctc_t, ctc_il, ctc_tl, blank=0, reduction='sum', zero_infinity=True)",
			fn: func(x env) any {
				return CTCLoss(x["ctc_x"].LogSoftmax(2), x["ctc_t"], x["ctc_il"], x["ctc_tl"], 0, ReduceSum, true)
			},
			grads: []string{"ctc_x"}, tol: 1e-3},
		{name: "CTCLossOnDevice", py: "F.ctc_loss(ctc_x.log_softmax(2), ctc_t, ctc_il, ctc_tl, zero_infinity=True)",
			fn: func(x env) any {
				return CTCLossOnDevice(x["ctc_x"].LogSoftmax(2), x["ctc_t"], x["ctc_il"], x["ctc_tl"])
			},
			grads: []string{"ctc_x"}, tol: 1e-3},
		{name: "CTCLossOnDeviceInfinite", py: "F.ctc_loss(ctc_x.log_softmax(2), ctc_t, ctc_il2, ctc_tl, zero_infinity=True)",
			fn: func(x env) any {
				return CTCLossOnDevice(x["ctc_x"].LogSoftmax(2), x["ctc_t"], x["ctc_il2"], x["ctc_tl"])
			},
			grads: []string{"ctc_x"}, tol: 1e-3},
		{name: "BCEWithLogits", py: "F.binary_cross_entropy_with_logits(a, tgt01)",
			fn:    func(x env) any { return BCEWithLogits(x["a"], x["tgt01"], nil, nil, ReduceMean) },
			grads: []string{"a"}},
		{name: "BCEWithLogitsWeighted", py: "F.binary_cross_entropy_with_logits(a, tgt01, weight=p, pos_weight=pw, reduction='sum')",
			fn:    func(x env) any { return BCEWithLogits(x["a"], x["tgt01"], x["p"], x["pw"], ReduceSum) },
			grads: []string{"a"}},
		{name: "L1Loss", py: "F.l1_loss(a, b)", fn: func(x env) any { return L1Loss(x["a"], x["b"], ReduceMean) }, grads: []string{"a"}},
		{name: "MSELoss", py: "F.mse_loss(a, b, reduction='sum')", fn: func(x env) any { return MSELoss(x["a"], x["b"], ReduceSum) }, grads: []string{"a"}},
		{name: "MSELossNone", py: "F.mse_loss(a, b, reduction='none')", fn: func(x env) any { return MSELoss(x["a"], x["b"], ReduceNone) }},
		{name: "SmoothL1Loss", py: "F.smooth_l1_loss(a, b, beta=0.5)", fn: func(x env) any { return SmoothL1Loss(x["a"], x["b"], ReduceMean, 0.5) }, grads: []string{"a"}},

		// ---- in place --------------------------------------------------------------
		{name: "AddIn", py: "a.add_(b, alpha=-2)", fn: func(x env) any { return x["a"].AddIn(x["b"], -2) }},
		{name: "AddScalarIn", py: "a.add_(1.25)", fn: func(x env) any { return x["a"].AddScalarIn(1.25) }},
		{name: "SubIn", py: "a.sub_(b, alpha=0.5)", fn: func(x env) any { return x["a"].SubIn(x["b"], 0.5) }},
		{name: "MulIn", py: "a.mul_(b)", fn: func(x env) any { return x["a"].MulIn(x["b"]) }},
		{name: "MulScalarIn", py: "a.mul_(0.3)", fn: func(x env) any { return x["a"].MulScalarIn(0.3) }},
		{name: "DivIn", py: "a.div_(p)", fn: func(x env) any { return x["a"].DivIn(x["p"]) }},
		{name: "DivScalarIn", py: "a.div_(3)", fn: func(x env) any { return x["a"].DivScalarIn(3) }},
		{name: "AddcmulIn", py: "a.addcmul_(b, c, value=0.1)", fn: func(x env) any { return x["a"].AddcmulIn(x["b"], x["c"], 0.1) }},
		{name: "AddcdivIn", py: "a.addcdiv_(b, p, value=-0.1)", fn: func(x env) any { return x["a"].AddcdivIn(x["b"], x["p"], -0.1) }},
		{name: "LerpIn", py: "a.lerp_(b, 0.9)", fn: func(x env) any { return x["a"].LerpIn(x["b"], 0.9) }},
		{name: "CopyFrom", py: "a.copy_(r4)", fn: func(x env) any { return x["a"].CopyFrom(x["r4"]) }},
		{name: "CopyFromInt", py: "a.copy_(ia)", fn: func(x env) any { return x["a"].CopyFrom(x["ia"]) }},
		{name: "CopyFromAsync", py: "a.copy_(b, non_blocking=True)", fn: func(x env) any { return x["a"].CopyFromAsync(x["b"]) }},
		{name: "ZeroIn", py: "a.zero_()", fn: func(x env) any { return x["a"].ZeroIn() }},
		{name: "FillIn", py: "a.fill_(2.5)", fn: func(x env) any { return x["a"].FillIn(2.5) }},
		{name: "FillInInt", py: "ia.fill_(-3)", fn: func(x env) any { return x["ia"].FillIn(-3) }},
		{name: "ClampIn", py: "a.clamp_(-1, 0.5)", fn: func(x env) any { return x["a"].ClampIn(-1, 0.5) }},
		{name: "SqrtIn", py: "p.sqrt_()", fn: func(x env) any { return x["p"].SqrtIn() }},
		{name: "UniformIn", py: "a.uniform_(-3, 2)", fn: func(x env) any { return x["a"].UniformIn(-3, 2) }, seed: true},
		{name: "NormalIn", py: "a.normal_(1, 2)", fn: func(x env) any { return x["a"].NormalIn(1, 2) }, seed: true},
		{name: "MaskedFillIn", py: "a.masked_fill_(mask, -7)", fn: func(x env) any { return x["a"].MaskedFillIn(x["mask"], -7) }},
		{name: "ReluIn", py: "a.relu_()", fn: func(x env) any { return x["a"].ReluIn() }},
		{name: "NegIn", py: "a.neg_()", fn: func(x env) any { return x["a"].NegIn() }},
		{name: "ExpIn", py: "a.exp_()", fn: func(x env) any { return x["a"].ExpIn() }},
		{name: "ErfinvIn", py: "(a / 2.5).erfinv_()", fn: func(x env) any { return x["a"].DivScalar(2.5).ErfinvIn() }},

		// ---- creation --------------------------------------------------------------
		{name: "Zeros", py: "torch.zeros(2, 3)", fn: func(x env) any { return Zeros([]int64{2, 3}) }},
		{name: "ZerosInt", py: "torch.zeros(4, dtype=torch.int32)", fn: func(x env) any { return Zeros([]int64{4}, Int32) }},
		{name: "Ones", py: "torch.ones(2, 3, dtype=torch.int64)", fn: func(x env) any { return Ones([]int64{2, 3}, Int64) }},
		{name: "OnesScalar", py: "torch.ones(())", fn: func(x env) any { return Ones([]int64{}) }},
		{name: "Full", py: "torch.full((2, 2), 3.5)", fn: func(x env) any { return Full([]int64{2, 2}, 3.5) }},
		{name: "FullIntValue", py: "torch.full((3,), 3, dtype=torch.float32)", fn: func(x env) any { return Full([]int64{3}, 3) }},
		{name: "FullInt64", py: "torch.full((3,), 7, dtype=torch.int64)", fn: func(x env) any { return Full([]int64{3}, 7, Int64) }},
		{name: "Empty", py: "torch.empty(2, 5).zero_()", fn: func(x env) any { return Empty([]int64{2, 5}).ZeroIn() }},
		{name: "EmptyF64", py: "torch.empty(3, dtype=torch.float64).fill_(1)", fn: func(x env) any { return Empty([]int64{3}, Float64).FillIn(1) }},
		{name: "Arange", py: "torch.arange(0, 5, 1)", fn: func(x env) any { return Arange(0, 5, 1) }},
		{name: "ArangeFloat", py: "torch.arange(0, 1, 0.25)", fn: func(x env) any { return Arange(0, 1, 0.25) }},
		{name: "ArangeNeg", py: "torch.arange(5, -3, -2)", fn: func(x env) any { return Arange(5, -3, -2) }},
		{name: "ArangeF64", py: "torch.arange(1, 4, 1, dtype=torch.float64)", fn: func(x env) any { return Arange(1, 4, 1, Float64) }},
		{name: "Linspace", py: "torch.linspace(-1, 1, 7)", fn: func(x env) any { return Linspace(-1, 1, 7) }},
		{name: "Eye", py: "torch.eye(3, 4)", fn: func(x env) any { return Eye(3, 4) }},
		{name: "EyeBool", py: "torch.eye(2, 2, dtype=torch.bool)", fn: func(x env) any { return Eye(2, 2, Bool) }},
		{name: "Rand", py: "torch.rand(3, 4)", fn: func(x env) any { return Rand([]int64{3, 4}) }, seed: true},
		{name: "Randn", py: "torch.randn(50)", fn: func(x env) any { return Randn([]int64{50}) }, seed: true},
		{name: "RandnF64", py: "torch.randn(5, 3, dtype=torch.float64)", fn: func(x env) any { return Randn([]int64{5, 3}, Float64) }, seed: true},
		{name: "Randint", py: "torch.randint(-3, 10, (20,))", fn: func(x env) any { return Randint(-3, 10, []int64{20}) }, seed: true},
		{name: "Randperm", py: "torch.randperm(12)", fn: func(x env) any { return Randperm(12) }, seed: true},
		{name: "ZerosLike", py: "torch.zeros_like(ia)", fn: func(x env) any { return ZerosLike(x["ia"]) }},
		{name: "OnesLike", py: "torch.ones_like(a, dtype=torch.float64)", fn: func(x env) any { return OnesLike(x["a"], Float64) }},
		{name: "FullLike", py: "torch.full_like(a, 2.5)", fn: func(x env) any { return FullLike(x["a"], 2.5) }},
		{name: "FullLikeInt", py: "torch.full_like(ia, 4)", fn: func(x env) any { return FullLike(x["ia"], 4) }},
		{name: "RandnLike", py: "torch.randn_like(b234)", fn: func(x env) any { return RandnLike(x["b234"]) }, seed: true},
		{name: "EmptyLike", py: "torch.empty_like(ia).zero_()", fn: func(x env) any { return EmptyLike(x["ia"]).ZeroIn() }},
		{name: "Scalar", py: "torch.tensor(3.5)", fn: func(x env) any { return Scalar(3.5) }},
		{name: "ScalarF64", py: "torch.tensor(-2.0, dtype=torch.float64)", fn: func(x env) any { return Scalar(-2, Float64) }},
		{name: "FromSliceInt32", py: "torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)", fn: func(x env) any { return FromSlice([]int32{1, 2, 3, 4}, []int64{2, 2}) }},
		{name: "FromSliceConvert", py: "torch.tensor([1.5, -2.5], dtype=torch.float16)", fn: func(x env) any { return FromSlice([]float64{1.5, -2.5}, nil, Float16) }},
		{name: "FromSliceBool", py: "torch.tensor([True, False])", fn: func(x env) any { return FromSlice([]bool{true, false}, nil) }},
		{name: "FromSliceUint8", py: "torch.tensor([0, 255, 7], dtype=torch.uint8)", fn: func(x env) any { return FromSlice([]uint8{0, 255, 7}, nil) }},
	}
	if HasSDPA() { // libtorch 2.x; 1.13 has none (TestSDPANeedsLibtorch2)
		cs = append(cs,
			opCase{name: "ScaledDotProductAttention", py: "F.scaled_dot_product_attention(b234, b234 * 0.5, b234 + 1)",
				fn: func(x env) any {
					return ScaledDotProductAttention(x["b234"], x["b234"].MulScalar(0.5), x["b234"].AddScalar(1), nil, 0, false)
				}, grads: []string{"b234"}},
			opCase{name: "ScaledDotProductAttentionMasks", py: "[F.scaled_dot_product_attention(b234, b234, b234, attn_mask=sq), " +
				"F.scaled_dot_product_attention(b234, b234, b234, attn_mask=sq > 0), F.scaled_dot_product_attention(b234, b234, b234, is_causal=True)]",
				fn: func(x env) any {
					q := x["b234"]
					return []*Tensor{ScaledDotProductAttention(q, q, q, x["sq"], 0, false),
						ScaledDotProductAttention(q, q, q, x["sq"].GtScalar(0), 0, false), ScaledDotProductAttention(q, q, q, nil, 0, true)}
				}})
	}
	return cs
}

func TestSDPANeedsLibtorch2(t *testing.T) {
	if HasSDPA() {
		t.Skip("this libtorch has scaled_dot_product_attention (TestOpsMatchPyTorch compares it)")
	}
	x := Ones([]int64{1, 2, 4})
	defer x.Free()
	err := Try(func() { ScaledDotProductAttention(x, x, x, nil, 0, false) })
	require.ErrorContains(t, err, "needs libtorch 2.0 or later")
}

// goOut is one Go result in the form Python's are compared in.
type goOut struct {
	shape []int64
	dtype string
	v     []float64
	py    bool
}

func encodeGo(t *Tensor) goOut {
	return goOut{shape: t.Shape(), dtype: t.DType().String(), v: t.Float64s()}
}

func encodeAny(r any) []goOut {
	switch r := r.(type) {
	case *Tensor:
		return []goOut{encodeGo(r)}
	case []*Tensor:
		out := make([]goOut, len(r))
		for k, t := range r {
			out[k] = encodeGo(t)
		}
		return out
	case bool:
		v := 0.0
		if r {
			v = 1
		}
		return []goOut{{dtype: "number", v: []float64{v}, py: true}}
	case float64:
		return []goOut{{dtype: "number", v: []float64{r}, py: true}}
	case int64:
		return []goOut{{dtype: "number", v: []float64{float64(r)}, py: true}}
	}
	panic(fmt.Sprintf("unsupported result %T", r))
}

// runGoCase evaluates a case in Go: its outputs and the requested gradients.
func runGoCase(pool map[string]poolTensor, c opCase) (outs, grads []goOut, err error) {
	err = Try(func() {
		Tidy(func() {
			x := makeEnv(pool, c.grads)
			if c.seed {
				ManualSeed(0)
			}
			r := c.fn(x)
			outs = encodeAny(r)
			if len(c.grads) == 0 {
				return
			}
			var y *Tensor
			switch r := r.(type) {
			case *Tensor:
				y = r
			case []*Tensor:
				y = r[0]
			}
			w := Arange(0, float64(y.Numel()), 1, Float64).Cos().ToDType(y.DType()).Reshape(y.Shape()...)
			y.Mul(w).Sum().Backward()
			for _, g := range c.grads {
				gt := x[g].Grad()
				if gt == nil {
					grads = append(grads, goOut{dtype: "none"})
					continue
				}
				grads = append(grads, encodeGo(gt))
			}
		})
	})
	return outs, grads, err
}

func pyValue(v any) float64 {
	switch v := v.(type) {
	case float64:
		return v
	case string:
		switch v {
		case "nan":
			return math.NaN()
		case "inf":
			return math.Inf(1)
		case "-inf":
			return math.Inf(-1)
		}
	}
	panic(fmt.Sprintf("bad value %v", v))
}

func compareOut(t *testing.T, what string, g goOut, p pyOut, tol float64) {
	t.Helper()
	if !p.Py {
		require.Equal(t, p.Shape, g.shape, "%s: shape", what)
		require.Equal(t, p.DType, g.dtype, "%s: dtype", what)
	} else {
		require.True(t, g.py, "%s: Go returned a tensor, Python a number", what)
	}
	require.Len(t, g.v, len(p.V), "%s: element count", what)
	for k := range g.v {
		want := pyValue(p.V[k])
		got := g.v[k]
		switch {
		case math.IsNaN(want):
			require.True(t, math.IsNaN(got), "%s[%d]: got %v, want nan", what, k, got)
		case math.IsInf(want, 0):
			require.Equal(t, want, got, "%s[%d]", what, k)
		default:
			require.InDelta(t, want, got, tol+tol*math.Abs(want), "%s[%d]: got %v, want %v", what, k, got, want)
		}
	}
}

func TestOpsMatchPyTorch(t *testing.T) {
	pool := makePool()
	cases := opCases()
	type pyCase struct {
		Name  string   `json:"name"`
		Py    string   `json:"py"`
		Grads []string `json:"grads"`
		Seed  bool     `json:"seed"`
	}
	in := struct {
		Pool  map[string]poolTensor `json:"pool"`
		Cases []pyCase              `json:"cases"`
	}{Pool: pool}
	seen := map[string]bool{}
	for _, c := range cases {
		require.False(t, seen[c.name], "duplicate case %s", c.name)
		seen[c.name] = true
		g := c.grads
		if g == nil {
			g = []string{}
		}
		in.Cases = append(in.Cases, pyCase{c.name, c.py, g, c.seed})
	}
	var res map[string]pyResult
	pyref.Run(t, opsScript, in, &res)

	live := LiveTensors()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, ok := res[c.name]
			require.True(t, ok, "no Python result")
			require.Empty(t, p.Error, "Python failed on %q", c.py)
			outs, grads, err := runGoCase(pool, c)
			require.NoError(t, err)
			tol := c.tol
			if tol == 0 {
				tol = 1e-4
			}
			require.Len(t, outs, len(p.Outs), "number of outputs")
			for k := range outs {
				compareOut(t, fmt.Sprintf("out %d", k), outs[k], p.Outs[k], tol)
			}
			require.Len(t, grads, len(p.Grads))
			for k := range grads {
				compareOut(t, "grad "+c.grads[k], grads[k], p.Grads[k], tol)
			}
		})
	}
	require.Equal(t, live, LiveTensors(), "the cases leaked tensors")
}

// TestOpsCoverage fails when an exported function or method of the op
// files (ops_gen.go, generated from ops.list, and the hand-written ones)
// has no case in opCases (judged by its name appearing as a call in this
// file).
func TestOpsCoverage(t *testing.T) {
	own, err := os.ReadFile("ops_test.go")
	require.NoError(t, err)
	text := string(own)
	fset := token.NewFileSet()
	var missing []string
	for _, file := range []string{"ops_gen.go", "ops_shape.go", "ops_nn.go", "create.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			n := fd.Name.Name
			switch n {
			case "ToSlice", "Float32s", "Float64s", "Int64s": // used by every case
				continue
			case "ManualSeed", "SetNumThreads", "NumThreads", "LibtorchVersion", "CUDAAvailable", "CUDADeviceCount", "HasSDPA", "Synchronize":
				continue // global state, not ops
			}
			if !strings.Contains(text, "."+n+"(") && !strings.Contains(text, " "+n+"(") && !strings.Contains(text, "("+n+"(") {
				missing = append(missing, file+": "+n)
			}
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "wrappers without a case")
}

// TestFactoriesHonourOpts: every factory taking opts ...Opt applies all
// three kinds of option (HannWindow and the *_like ones once dropped
// RequiresGrad).
func TestFactoriesHonourOpts(t *testing.T) {
	x := Ones([]int64{2, 3}, Int32)
	defer x.Free()
	cases := []struct {
		name string
		fn   func(opts ...Opt) *Tensor
	}{
		{"Zeros", func(o ...Opt) *Tensor { return Zeros([]int64{2}, o...) }},
		{"Ones", func(o ...Opt) *Tensor { return Ones([]int64{2}, o...) }},
		{"Full", func(o ...Opt) *Tensor { return Full([]int64{2}, 3, o...) }},
		{"Empty", func(o ...Opt) *Tensor { return Empty([]int64{2}, o...) }},
		{"Linspace", func(o ...Opt) *Tensor { return Linspace(0, 1, 3, o...) }},
		{"Eye", func(o ...Opt) *Tensor { return Eye(2, 2, o...) }},
		{"Rand", func(o ...Opt) *Tensor { return Rand([]int64{2}, o...) }},
		{"Randn", func(o ...Opt) *Tensor { return Randn([]int64{2}, o...) }},
		{"Arange", func(o ...Opt) *Tensor { return Arange(0, 3, 1, o...) }},
		{"HannWindow", func(o ...Opt) *Tensor { return HannWindow(4, true, o...) }},
		{"ZerosLike", func(o ...Opt) *Tensor { return ZerosLike(x, o...) }},
		{"OnesLike", func(o ...Opt) *Tensor { return OnesLike(x, o...) }},
		{"FullLike", func(o ...Opt) *Tensor { return FullLike(x, 2, o...) }},
		{"RandnLike", func(o ...Opt) *Tensor { return RandnLike(x, o...) }},
		{"EmptyLike", func(o ...Opt) *Tensor { return EmptyLike(x, o...) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			Tidy(func() {
				y := c.fn(Float64, CPU, RequiresGrad)
				require.Equal(t, Float64, y.DType())
				require.Equal(t, CPU, y.Device())
				require.True(t, y.RequiresGrad(), "RequiresGrad")
				require.True(t, y.IsLeaf())
			})
		})
	}
}

// The next two tests free what they create (Tidy): a tensor left to the
// finalizer is released at an unknown later time, which the memory
// accounting tests that follow would see.

func TestRNGStateRoundTrip(t *testing.T) {
	Tidy(func() {
		ManualSeed(3)
		state := RNGState()
		a := Randn([]int64{16}).Float32s()
		Randn([]int64{100}) // move the generator on
		func() { SetRNGState(state) }()
		require.Equal(t, a, Randn([]int64{16}).Float32s(), "restoring the state replays the same draws")
		require.Equal(t, Uint8, state.DType())
	})
}

func TestAmpFusedKernels(t *testing.T) {
	Tidy(func() {
		grads := []*Tensor{FromSlice([]float32{2, 4}, nil), FromSlice([]float32{float32(math.Inf(1))}, nil)}
		found := Zeros([]int64{})
		inv := Scalar(0.5)
		scale := Scalar(8)
		tracker := Zeros([]int64{}, Int32)
		major, minor, _ := LibtorchVersion()
		errUnscale := Try(func() { AmpUnscale(grads, found, inv) })
		errUpdate := Try(func() { AmpUpdateScale(scale, tracker, found, 2, 0.5, 2000) })
		if major < 2 || (major == 2 && minor < 3) {
			// libtorch before 2.3 has these kernels for CUDA only: a clear error, no crash.
			require.ErrorContains(t, errUnscale, "_amp_foreach_non_finite_check_and_unscale_")
			require.ErrorContains(t, errUpdate, "_amp_update_scale_")
			return
		}
		require.NoError(t, errUnscale)
		require.Equal(t, []float32{1, 2}, grads[0].Float32s())
		require.Equal(t, float64(1), found.Item())
		require.NoError(t, errUpdate)
		require.Equal(t, float64(4), scale.Item())
	})
}
