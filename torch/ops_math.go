package torch

// Elementwise arithmetic (broadcasting), comparisons, math functions and
// reductions.

var (
	opAdd        = defOp("aten::add", "Tensor")
	opAddS       = defOp("aten::add", "Scalar")
	opSub        = defOp("aten::sub", "Tensor")
	opSubS       = defOp("aten::sub", "Scalar")
	opRSubS      = defOp("aten::rsub", "Scalar")
	opMul        = defOp("aten::mul", "Tensor")
	opMulS       = defOp("aten::mul", "Scalar")
	opDiv        = defOp("aten::div", "Tensor")
	opDivS       = defOp("aten::div", "Scalar")
	opDivMode    = defOp("aten::div", "Tensor_mode")
	opRemainder  = defOp("aten::remainder", "Scalar")
	opNeg        = defOp("aten::neg", "")
	opPowS       = defOp("aten::pow", "Tensor_Scalar")
	opPowT       = defOp("aten::pow", "Tensor_Tensor")
	opExp        = defOp("aten::exp", "")
	opLog        = defOp("aten::log", "")
	opLog1p      = defOp("aten::log1p", "")
	opSqrt       = defOp("aten::sqrt", "")
	opRsqrt      = defOp("aten::rsqrt", "")
	opAbs        = defOp("aten::abs", "")
	opSign       = defOp("aten::sign", "")
	opClamp      = defOp("aten::clamp", "")
	opClampMin   = defOp("aten::clamp_min", "")
	opClampMax   = defOp("aten::clamp_max", "")
	opSin        = defOp("aten::sin", "")
	opCos        = defOp("aten::cos", "")
	opFloor      = defOp("aten::floor", "")
	opCeil       = defOp("aten::ceil", "")
	opRound      = defOp("aten::round", "")
	opReciprocal = defOp("aten::reciprocal", "")
	opSquare     = defOp("aten::square", "")
	opMaximum    = defOp("aten::maximum", "")
	opMinimum    = defOp("aten::minimum", "")
	opIsFinite   = defOp("aten::isfinite", "")
	opIsNan      = defOp("aten::isnan", "")
	opIsInf      = defOp("aten::isinf", "")
	opLogicalNot = defOp("aten::logical_not", "")
	opLogicalAnd = defOp("aten::logical_and", "")
	opLogicalOr  = defOp("aten::logical_or", "")
	opEq         = defOp("aten::eq", "Tensor")
	opEqS        = defOp("aten::eq", "Scalar")
	opNe         = defOp("aten::ne", "Tensor")
	opNeS        = defOp("aten::ne", "Scalar")
	opLt         = defOp("aten::lt", "Tensor")
	opLtS        = defOp("aten::lt", "Scalar")
	opLe         = defOp("aten::le", "Tensor")
	opLeS        = defOp("aten::le", "Scalar")
	opGt         = defOp("aten::gt", "Tensor")
	opGtS        = defOp("aten::gt", "Scalar")
	opGe         = defOp("aten::ge", "Tensor")
	opGeS        = defOp("aten::ge", "Scalar")
	opAllClose   = defOp("aten::allclose", "")
	opEqual      = defOp("aten::equal", "")
	opLerp       = defOp("aten::lerp", "Scalar")
	opAddcmul    = defOp("aten::addcmul", "")
	opAddcdiv    = defOp("aten::addcdiv", "")

	opSum       = defOp("aten::sum", "")
	opSumDim    = defOp("aten::sum", "dim_IntList")
	opMean      = defOp("aten::mean", "")
	opMeanDim   = defOp("aten::mean", "dim")
	opMax       = defOp("aten::max", "")
	opMaxDim    = defOp("aten::max", "dim")
	opMin       = defOp("aten::min", "")
	opMinDim    = defOp("aten::min", "dim")
	opArgmax    = defOp("aten::argmax", "")
	opArgmin    = defOp("aten::argmin", "")
	opVar       = defOp("aten::var", "correction")
	opStd       = defOp("aten::std", "correction")
	opNorm      = defOp("aten::linalg_vector_norm", "")
	opLogsumexp = defOp("aten::logsumexp", "")
	opCumsum    = defOp("aten::cumsum", "")
	opCumprod   = defOp("aten::cumprod", "")
	opProd      = defOp("aten::prod", "")
	opAny       = defOp("aten::any", "")
	opAll       = defOp("aten::all", "")
	opTopk      = defOp("aten::topk", "")
	opSort      = defOp("aten::sort", "")
	opArgsort   = defOp("aten::argsort", "")
	opCountNZ   = defOp("aten::count_nonzero", "")
	opNonzero   = defOp("aten::nonzero", "")
)

func binary(d *opDef, a, b *Tensor) *Tensor {
	var c call
	return c.t(a).t(b).out1(d)
}

func unary(d *opDef, a *Tensor) *Tensor {
	var c call
	return c.t(a).out1(d)
}

func withScalar(d *opDef, a *Tensor, s float64) *Tensor {
	var c call
	return c.t(a).scalar(s).out1(d)
}

// Add returns t + o (broadcasting).
func (t *Tensor) Add(o *Tensor) *Tensor { return binary(opAdd, t, o) }

// AddScaled returns t + alpha·o.
func (t *Tensor) AddScaled(o *Tensor, alpha float64) *Tensor {
	var c call
	return c.t(t).t(o).scalar(alpha).out1(opAdd)
}

// AddScalar returns t + s.
func (t *Tensor) AddScalar(s float64) *Tensor { return withScalar(opAddS, t, s) }

// Sub returns t − o.
func (t *Tensor) Sub(o *Tensor) *Tensor { return binary(opSub, t, o) }

// SubScalar returns t − s.
func (t *Tensor) SubScalar(s float64) *Tensor { return withScalar(opSubS, t, s) }

// RSubScalar returns s − t.
func (t *Tensor) RSubScalar(s float64) *Tensor { return withScalar(opRSubS, t, s) }

// Mul returns t · o elementwise.
func (t *Tensor) Mul(o *Tensor) *Tensor { return binary(opMul, t, o) }

// MulScalar returns t · s.
func (t *Tensor) MulScalar(s float64) *Tensor { return withScalar(opMulS, t, s) }

// Div returns t / o (true division).
func (t *Tensor) Div(o *Tensor) *Tensor { return binary(opDiv, t, o) }

// DivScalar returns t / s.
func (t *Tensor) DivScalar(s float64) *Tensor {
	var c call
	return c.t(t).f(s).out1(opDivS)
}

// FloorDiv returns floor(t / o).
func (t *Tensor) FloorDiv(o *Tensor) *Tensor {
	var c call
	return c.t(t).t(o).str("floor").out1(opDivMode)
}

// Remainder returns t mod s (Python's sign convention).
func (t *Tensor) Remainder(s float64) *Tensor { return withScalar(opRemainder, t, s) }

// Neg returns −t.
func (t *Tensor) Neg() *Tensor { return unary(opNeg, t) }

// Pow returns t^e.
func (t *Tensor) Pow(e float64) *Tensor { return withScalar(opPowS, t, e) }

// PowTensor returns t^e elementwise.
func (t *Tensor) PowTensor(e *Tensor) *Tensor { return binary(opPowT, t, e) }

// Exp returns e^t.
func (t *Tensor) Exp() *Tensor { return unary(opExp, t) }

// Log returns ln t.
func (t *Tensor) Log() *Tensor { return unary(opLog, t) }

// Log1p returns ln(1 + t).
func (t *Tensor) Log1p() *Tensor { return unary(opLog1p, t) }

// Sqrt returns √t.
func (t *Tensor) Sqrt() *Tensor { return unary(opSqrt, t) }

// Rsqrt returns 1/√t.
func (t *Tensor) Rsqrt() *Tensor { return unary(opRsqrt, t) }

// Abs returns |t|.
func (t *Tensor) Abs() *Tensor { return unary(opAbs, t) }

// Sign returns the sign of t (−1, 0, 1).
func (t *Tensor) Sign() *Tensor { return unary(opSign, t) }

// Sin returns sin t.
func (t *Tensor) Sin() *Tensor { return unary(opSin, t) }

// Cos returns cos t.
func (t *Tensor) Cos() *Tensor { return unary(opCos, t) }

// Floor rounds down.
func (t *Tensor) Floor() *Tensor { return unary(opFloor, t) }

// Ceil rounds up.
func (t *Tensor) Ceil() *Tensor { return unary(opCeil, t) }

// Round rounds half to even.
func (t *Tensor) Round() *Tensor { return unary(opRound, t) }

// Reciprocal returns 1/t.
func (t *Tensor) Reciprocal() *Tensor { return unary(opReciprocal, t) }

// Square returns t².
func (t *Tensor) Square() *Tensor { return unary(opSquare, t) }

// Clamp limits t to [lo, hi].
func (t *Tensor) Clamp(lo, hi float64) *Tensor {
	var c call
	return c.t(t).scalar(lo).scalar(hi).out1(opClamp)
}

// ClampMin limits t from below.
func (t *Tensor) ClampMin(lo float64) *Tensor { return withScalar(opClampMin, t, lo) }

// ClampMax limits t from above.
func (t *Tensor) ClampMax(hi float64) *Tensor { return withScalar(opClampMax, t, hi) }

// Maximum returns the elementwise maximum.
func (t *Tensor) Maximum(o *Tensor) *Tensor { return binary(opMaximum, t, o) }

// Minimum returns the elementwise minimum.
func (t *Tensor) Minimum(o *Tensor) *Tensor { return binary(opMinimum, t, o) }

// Lerp returns t + w·(end − t).
func (t *Tensor) Lerp(end *Tensor, w float64) *Tensor {
	var c call
	return c.t(t).t(end).scalar(w).out1(opLerp)
}

// Addcmul returns t + v·a·b.
func (t *Tensor) Addcmul(a, b *Tensor, v float64) *Tensor {
	var c call
	return c.t(t).t(a).t(b).scalar(v).out1(opAddcmul)
}

// Addcdiv returns t + v·a/b.
func (t *Tensor) Addcdiv(a, b *Tensor, v float64) *Tensor {
	var c call
	return c.t(t).t(a).t(b).scalar(v).out1(opAddcdiv)
}

// IsFinite is true where t is neither inf nor nan.
func (t *Tensor) IsFinite() *Tensor { return unary(opIsFinite, t) }

// IsNan is true where t is nan.
func (t *Tensor) IsNan() *Tensor { return unary(opIsNan, t) }

// IsInf is true where t is ±inf.
func (t *Tensor) IsInf() *Tensor { return unary(opIsInf, t) }

// LogicalNot negates a bool tensor.
func (t *Tensor) LogicalNot() *Tensor { return unary(opLogicalNot, t) }

// LogicalAnd is elementwise and.
func (t *Tensor) LogicalAnd(o *Tensor) *Tensor { return binary(opLogicalAnd, t, o) }

// LogicalOr is elementwise or.
func (t *Tensor) LogicalOr(o *Tensor) *Tensor { return binary(opLogicalOr, t, o) }

// Eq compares elementwise (bool result); so do Ne, Lt, Le, Gt, Ge.
func (t *Tensor) Eq(o *Tensor) *Tensor { return binary(opEq, t, o) }
func (t *Tensor) Ne(o *Tensor) *Tensor { return binary(opNe, t, o) }
func (t *Tensor) Lt(o *Tensor) *Tensor { return binary(opLt, t, o) }
func (t *Tensor) Le(o *Tensor) *Tensor { return binary(opLe, t, o) }
func (t *Tensor) Gt(o *Tensor) *Tensor { return binary(opGt, t, o) }
func (t *Tensor) Ge(o *Tensor) *Tensor { return binary(opGe, t, o) }

// EqScalar compares with a number (bool result); so do the other *Scalar comparisons.
func (t *Tensor) EqScalar(s float64) *Tensor { return withScalar(opEqS, t, s) }
func (t *Tensor) NeScalar(s float64) *Tensor { return withScalar(opNeS, t, s) }
func (t *Tensor) LtScalar(s float64) *Tensor { return withScalar(opLtS, t, s) }
func (t *Tensor) LeScalar(s float64) *Tensor { return withScalar(opLeS, t, s) }
func (t *Tensor) GtScalar(s float64) *Tensor { return withScalar(opGtS, t, s) }
func (t *Tensor) GeScalar(s float64) *Tensor { return withScalar(opGeS, t, s) }

// AllClose reports |t − o| ≤ atol + rtol·|o| everywhere.
func (t *Tensor) AllClose(o *Tensor, rtol, atol float64) bool {
	var c call
	v := c.t(t).t(o).f(rtol).f(atol).outScalar(opAllClose)
	return v.I != 0
}

// Equal reports equal shapes and elements.
func (t *Tensor) Equal(o *Tensor) bool {
	var c call
	v := c.t(t).t(o).outScalar(opEqual)
	return v.I != 0
}

// ---- reductions -------------------------------------------------------------------

// Sum adds every element.
func (t *Tensor) Sum() *Tensor {
	var c call
	return c.t(t).none().out1(opSum)
}

// SumDim adds along dims.
func (t *Tensor) SumDim(dims []int64, keepdim bool) *Tensor {
	var c call
	return c.t(t).ints(dims...).b(keepdim).out1(opSumDim)
}

// Mean averages every element.
func (t *Tensor) Mean() *Tensor {
	var c call
	return c.t(t).none().out1(opMean)
}

// MeanDim averages along dims.
func (t *Tensor) MeanDim(dims []int64, keepdim bool) *Tensor {
	var c call
	return c.t(t).ints(dims...).b(keepdim).out1(opMeanDim)
}

// Max returns the largest element.
func (t *Tensor) Max() *Tensor { return unary(opMax, t) }

// MaxDim returns the largest values along dim and their indices.
func (t *Tensor) MaxDim(dim int64, keepdim bool) (values, indices *Tensor) {
	var c call
	r := c.t(t).i(dim).b(keepdim).outN(opMaxDim, 2)
	return r[0], r[1]
}

// Min returns the smallest element.
func (t *Tensor) Min() *Tensor { return unary(opMin, t) }

// MinDim returns the smallest values along dim and their indices.
func (t *Tensor) MinDim(dim int64, keepdim bool) (values, indices *Tensor) {
	var c call
	r := c.t(t).i(dim).b(keepdim).outN(opMinDim, 2)
	return r[0], r[1]
}

// Argmax returns the index of the largest element along dim.
func (t *Tensor) Argmax(dim int64, keepdim bool) *Tensor {
	var c call
	return c.t(t).i(dim).b(keepdim).out1(opArgmax)
}

// Argmin returns the index of the smallest element along dim.
func (t *Tensor) Argmin(dim int64, keepdim bool) *Tensor {
	var c call
	return c.t(t).i(dim).b(keepdim).out1(opArgmin)
}

// Var returns the variance along dims (correction 1: unbiased, 0: biased).
func (t *Tensor) Var(dims []int64, correction int64, keepdim bool) *Tensor {
	var c call
	return c.t(t).ints(dims...).i(correction).b(keepdim).out1(opVar)
}

// Std returns the standard deviation along dims.
func (t *Tensor) Std(dims []int64, correction int64, keepdim bool) *Tensor {
	var c call
	return c.t(t).ints(dims...).i(correction).b(keepdim).out1(opStd)
}

// Norm returns the p-norm over all elements.
func (t *Tensor) Norm(p float64) *Tensor {
	var c call
	return c.t(t).f(p).out1(opNorm)
}

// NormDim returns the p-norm along dims.
func (t *Tensor) NormDim(p float64, dims []int64, keepdim bool) *Tensor {
	var c call
	return c.t(t).f(p).ints(dims...).b(keepdim).out1(opNorm)
}

// Logsumexp returns log Σ exp along dims, computed stably.
func (t *Tensor) Logsumexp(dims []int64, keepdim bool) *Tensor {
	var c call
	return c.t(t).ints(dims...).b(keepdim).out1(opLogsumexp)
}

// Cumsum returns running sums along dim.
func (t *Tensor) Cumsum(dim int64) *Tensor {
	var c call
	return c.t(t).i(dim).out1(opCumsum)
}

// Cumprod returns running products along dim.
func (t *Tensor) Cumprod(dim int64) *Tensor {
	var c call
	return c.t(t).i(dim).out1(opCumprod)
}

// Prod multiplies every element.
func (t *Tensor) Prod() *Tensor {
	var c call
	return c.t(t).none().out1(opProd)
}

// Any is true when any element is true (non-zero).
func (t *Tensor) Any() *Tensor { return unary(opAny, t) }

// All is true when every element is true (non-zero).
func (t *Tensor) All() *Tensor { return unary(opAll, t) }

// Topk returns the k largest (or smallest) values along dim and their indices.
func (t *Tensor) Topk(k, dim int64, largest bool) (values, indices *Tensor) {
	var c call
	r := c.t(t).i(k).i(dim).b(largest).b(true).outN(opTopk, 2)
	return r[0], r[1]
}

// Sort sorts along dim.
func (t *Tensor) Sort(dim int64, descending bool) (values, indices *Tensor) {
	var c call
	r := c.t(t).i(dim).b(descending).outN(opSort, 2)
	return r[0], r[1]
}

// Argsort returns the indices that sort t along dim.
func (t *Tensor) Argsort(dim int64, descending bool) *Tensor {
	var c call
	return c.t(t).i(dim).b(descending).out1(opArgsort)
}

// CountNonzero counts non-zero elements.
func (t *Tensor) CountNonzero() *Tensor {
	var c call
	return c.t(t).none().out1(opCountNZ)
}

// Nonzero returns the indices of non-zero elements (n × ndim, int64).
func (t *Tensor) Nonzero() *Tensor { return unary(opNonzero, t) }
