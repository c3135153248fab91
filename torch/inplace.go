package torch

// In-place operations (PyTorch's trailing-underscore methods). They return
// t itself, so calls chain; autograd refuses them on leaves that require
// grad unless run under NoGrad, as in PyTorch.

var (
	opAdd_      = defOp("aten::add_", "Tensor")
	opAddS_     = defOp("aten::add_", "Scalar")
	opSub_      = defOp("aten::sub_", "Tensor")
	opMul_      = defOp("aten::mul_", "Tensor")
	opMulS_     = defOp("aten::mul_", "Scalar")
	opDiv_      = defOp("aten::div_", "Tensor")
	opDivS_     = defOp("aten::div_", "Scalar")
	opAddcmul_  = defOp("aten::addcmul_", "")
	opAddcdiv_  = defOp("aten::addcdiv_", "")
	opLerp_     = defOp("aten::lerp_", "Scalar")
	opCopy_     = defOp("aten::copy_", "")
	opZero_     = defOp("aten::zero_", "")
	opFill_     = defOp("aten::fill_", "Scalar")
	opClamp_    = defOp("aten::clamp_", "")
	opSqrt_     = defOp("aten::sqrt_", "")
	opUniform_  = defOp("aten::uniform_", "")
	opNormal_   = defOp("aten::normal_", "")
	opMaskFill_ = defOp("aten::masked_fill_", "Scalar")
	opRelu_     = defOp("aten::relu_", "")
	opNeg_      = defOp("aten::neg_", "")
	opExp_      = defOp("aten::exp_", "")
	opTruncN_   = defOp("aten::erfinv_", "")
)

// AddIn adds alpha·o to t in place.
func (t *Tensor) AddIn(o *Tensor, alpha float64) *Tensor {
	var c call
	return c.t(t).t(o).scalar(alpha).inplace(opAdd_, t)
}

// AddScalarIn adds s to t in place.
func (t *Tensor) AddScalarIn(s float64) *Tensor {
	var c call
	return c.t(t).scalar(s).inplace(opAddS_, t)
}

// SubIn subtracts alpha·o from t in place.
func (t *Tensor) SubIn(o *Tensor, alpha float64) *Tensor {
	var c call
	return c.t(t).t(o).scalar(alpha).inplace(opSub_, t)
}

// MulIn multiplies t by o in place.
func (t *Tensor) MulIn(o *Tensor) *Tensor {
	var c call
	return c.t(t).t(o).inplace(opMul_, t)
}

// MulScalarIn multiplies t by s in place.
func (t *Tensor) MulScalarIn(s float64) *Tensor {
	var c call
	return c.t(t).scalar(s).inplace(opMulS_, t)
}

// DivIn divides t by o in place.
func (t *Tensor) DivIn(o *Tensor) *Tensor {
	var c call
	return c.t(t).t(o).inplace(opDiv_, t)
}

// DivScalarIn divides t by s in place.
func (t *Tensor) DivScalarIn(s float64) *Tensor {
	var c call
	return c.t(t).f(s).inplace(opDivS_, t)
}

// AddcmulIn adds v·a·b to t in place.
func (t *Tensor) AddcmulIn(a, b *Tensor, v float64) *Tensor {
	var c call
	return c.t(t).t(a).t(b).scalar(v).inplace(opAddcmul_, t)
}

// AddcdivIn adds v·a/b to t in place.
func (t *Tensor) AddcdivIn(a, b *Tensor, v float64) *Tensor {
	var c call
	return c.t(t).t(a).t(b).scalar(v).inplace(opAddcdiv_, t)
}

// LerpIn moves t towards end by weight w in place.
func (t *Tensor) LerpIn(end *Tensor, w float64) *Tensor {
	var c call
	return c.t(t).t(end).scalar(w).inplace(opLerp_, t)
}

// CopyFrom copies src's values into t (broadcasting, converting dtype and device).
func (t *Tensor) CopyFrom(src *Tensor) *Tensor {
	var c call
	return c.t(t).t(src).b(false).inplace(opCopy_, t)
}

// CopyFromAsync is CopyFrom with non_blocking=true.
func (t *Tensor) CopyFromAsync(src *Tensor) *Tensor {
	var c call
	return c.t(t).t(src).b(true).inplace(opCopy_, t)
}

// ZeroIn sets every element to zero.
func (t *Tensor) ZeroIn() *Tensor {
	var c call
	return c.t(t).inplace(opZero_, t)
}

// FillIn sets every element to v.
func (t *Tensor) FillIn(v float64) *Tensor {
	var c call
	return c.t(t).scalar(v).inplace(opFill_, t)
}

// ClampIn limits t to [lo, hi] in place.
func (t *Tensor) ClampIn(lo, hi float64) *Tensor {
	var c call
	return c.t(t).scalar(lo).scalar(hi).inplace(opClamp_, t)
}

// SqrtIn takes the square root in place.
func (t *Tensor) SqrtIn() *Tensor {
	var c call
	return c.t(t).inplace(opSqrt_, t)
}

// UniformIn fills t with samples uniform in [lo, hi).
func (t *Tensor) UniformIn(lo, hi float64) *Tensor {
	var c call
	return c.t(t).f(lo).f(hi).inplace(opUniform_, t)
}

// NormalIn fills t with normal samples.
func (t *Tensor) NormalIn(mean, std float64) *Tensor {
	var c call
	return c.t(t).f(mean).f(std).inplace(opNormal_, t)
}

// MaskedFillIn writes v where mask is true.
func (t *Tensor) MaskedFillIn(mask *Tensor, v float64) *Tensor {
	var c call
	return c.t(t).t(mask).f(v).inplace(opMaskFill_, t)
}

// ReluIn applies relu in place.
func (t *Tensor) ReluIn() *Tensor {
	var c call
	return c.t(t).inplace(opRelu_, t)
}

// NegIn negates in place.
func (t *Tensor) NegIn() *Tensor {
	var c call
	return c.t(t).inplace(opNeg_, t)
}

// ExpIn exponentiates in place.
func (t *Tensor) ExpIn() *Tensor {
	var c call
	return c.t(t).inplace(opExp_, t)
}

// ErfinvIn applies the inverse error function in place.
func (t *Tensor) ErfinvIn() *Tensor {
	var c call
	return c.t(t).inplace(opTruncN_, t)
}

var (
	opAmpUnscale = defOp("aten::_amp_foreach_non_finite_check_and_unscale_", "")
	opAmpUpdate  = defOp("aten::_amp_update_scale_", "")
)

// AmpUnscale is libtorch's fused _amp_foreach_non_finite_check_and_unscale_
// (CUDA only in libtorch 1.13): grads *= inv, foundInf = 1 on inf/nan.
func AmpUnscale(grads []*Tensor, foundInf, inv *Tensor) {
	var c call
	c.tensors(grads).t(foundInf).t(inv).run(opAmpUnscale, nil)
}

// AmpUpdateScale is libtorch's fused _amp_update_scale_ (CUDA only in 1.13).
func AmpUpdateScale(scale, tracker, foundInf *Tensor, growth, backoff float64, interval int64) {
	var c call
	c.t(scale).t(tracker).t(foundInf).f(growth).f(backoff).i(interval).run(opAmpUpdate, nil)
}
