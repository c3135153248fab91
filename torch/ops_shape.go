package torch

// Shape, layout and indexing operations. Dimensions may be negative (counted
// from the end), as in PyTorch. Views share storage with their input.

var (
	opView        = defOp("aten::view", "")
	opReshape     = defOp("aten::reshape", "")
	opPermute     = defOp("aten::permute", "")
	opTranspose   = defOp("aten::transpose", "int")
	opContiguous  = defOp("aten::contiguous", "")
	opExpand      = defOp("aten::expand", "")
	opSqueeze     = defOp("aten::squeeze", "")
	opSqueezeDim  = defOp("aten::squeeze", "dim")
	opUnsqueeze   = defOp("aten::unsqueeze", "")
	opFlatten     = defOp("aten::flatten", "using_ints")
	opCat         = defOp("aten::cat", "")
	opStack       = defOp("aten::stack", "")
	opChunk       = defOp("aten::chunk", "")
	opSplit       = defOp("aten::split_with_sizes", "")
	opSplitSize   = defOp("aten::split", "Tensor")
	opNarrow      = defOp("aten::narrow", "")
	opSelect      = defOp("aten::select", "int")
	opIndexSelect = defOp("aten::index_select", "")
	opGather      = defOp("aten::gather", "")
	opScatter     = defOp("aten::scatter", "src")
	opScatterAdd  = defOp("aten::scatter_add", "")
	opMaskedFill  = defOp("aten::masked_fill", "Scalar")
	opMaskedFillT = defOp("aten::masked_fill", "Tensor")
	opWhere       = defOp("aten::where", "self")
	opTril        = defOp("aten::tril", "")
	opTriu        = defOp("aten::triu", "")
	opPad         = defOp("aten::constant_pad_nd", "")
	opReflPad1d   = defOp("aten::reflection_pad1d", "")
	opReplPad1d   = defOp("aten::replication_pad1d", "")
	opSlice       = defOp("aten::slice", "Tensor")
	opIndex       = defOp("aten::index", "Tensor")
	opIndexPut    = defOp("aten::index_put", "")
	opRepeat      = defOp("aten::repeat", "")
	opRepeatIntl  = defOp("aten::repeat_interleave", "self_int")
	opFlip        = defOp("aten::flip", "")
	opRoll        = defOp("aten::roll", "")
	opUnfold      = defOp("aten::unfold", "")
	opExpandAs    = defOp("aten::expand_as", "")
	opViewAs      = defOp("aten::view_as", "")
	opMovedim     = defOp("aten::movedim", "intlist")
	opClone       = defOp("aten::clone", "")
	opDetach      = defOp("aten::detach", "")
	opTo          = defOp("aten::to", "device")
	opOneHot      = defOp("aten::one_hot", "")
)

// View returns a view with a new shape (one dimension may be -1).
func (t *Tensor) View(shape ...int64) *Tensor {
	var c call
	return c.t(t).ints(shape...).out1(opView)
}

// Reshape returns t with a new shape, a view when possible.
func (t *Tensor) Reshape(shape ...int64) *Tensor {
	var c call
	return c.t(t).ints(shape...).out1(opReshape)
}

// Permute reorders dimensions.
func (t *Tensor) Permute(dims ...int64) *Tensor {
	var c call
	return c.t(t).ints(dims...).out1(opPermute)
}

// Transpose swaps two dimensions.
func (t *Tensor) Transpose(d0, d1 int64) *Tensor {
	var c call
	return c.t(t).i(d0).i(d1).out1(opTranspose)
}

// T swaps the last two dimensions (matrix transpose for 2-d).
func (t *Tensor) T() *Tensor { return t.Transpose(-2, -1) }

// Contiguous returns t laid out contiguously (t's data when already so).
func (t *Tensor) Contiguous() *Tensor {
	var c call
	return c.t(t).out1(opContiguous)
}

// Expand broadcasts size-1 dimensions to shape (-1 keeps a size).
func (t *Tensor) Expand(shape ...int64) *Tensor {
	var c call
	return c.t(t).ints(shape...).out1(opExpand)
}

// ExpandAs broadcasts t to o's shape.
func (t *Tensor) ExpandAs(o *Tensor) *Tensor {
	var c call
	return c.t(t).t(o).out1(opExpandAs)
}

// ViewAs views t with o's shape.
func (t *Tensor) ViewAs(o *Tensor) *Tensor {
	var c call
	return c.t(t).t(o).out1(opViewAs)
}

// Squeeze removes every size-1 dimension.
func (t *Tensor) Squeeze() *Tensor {
	var c call
	return c.t(t).out1(opSqueeze)
}

// SqueezeDim removes dimension d if it has size 1.
func (t *Tensor) SqueezeDim(d int64) *Tensor {
	var c call
	return c.t(t).i(d).out1(opSqueezeDim)
}

// Unsqueeze inserts a size-1 dimension at d.
func (t *Tensor) Unsqueeze(d int64) *Tensor {
	var c call
	return c.t(t).i(d).out1(opUnsqueeze)
}

// Flatten merges dimensions start..end (inclusive).
func (t *Tensor) Flatten(start, end int64) *Tensor {
	var c call
	return c.t(t).i(start).i(end).out1(opFlatten)
}

// Movedim moves dimensions src to positions dst.
func (t *Tensor) Movedim(src, dst []int64) *Tensor {
	var c call
	return c.t(t).ints(src...).ints(dst...).out1(opMovedim)
}

// Cat concatenates tensors along dim.
func Cat(ts []*Tensor, dim int64) *Tensor {
	var c call
	return c.tensors(ts).i(dim).out1(opCat)
}

// Stack stacks tensors along a new dimension dim.
func Stack(ts []*Tensor, dim int64) *Tensor {
	var c call
	return c.tensors(ts).i(dim).out1(opStack)
}

// Chunk splits t into n nearly equal views along dim.
func (t *Tensor) Chunk(n, dim int64) []*Tensor {
	var c call
	return c.t(t).i(n).i(dim).outList(opChunk)
}

// Split splits t along dim into views of the given sizes.
func (t *Tensor) Split(sizes []int64, dim int64) []*Tensor {
	var c call
	return c.t(t).ints(sizes...).i(dim).outList(opSplit)
}

// SplitEvery splits t along dim into views of size n (the last may be smaller).
func (t *Tensor) SplitEvery(n, dim int64) []*Tensor {
	var c call
	return c.t(t).i(n).i(dim).outList(opSplitSize)
}

// Narrow returns the view t[..., start:start+length, ...] along dim.
func (t *Tensor) Narrow(dim, start, length int64) *Tensor {
	var c call
	return c.t(t).i(dim).i(start).i(length).out1(opNarrow)
}

// Slice returns the view t[..., start:end:step, ...] along dim (end may
// exceed the size; negative start/end count from the end).
func (t *Tensor) Slice(dim, start, end, step int64) *Tensor {
	var c call
	return c.t(t).i(dim).i(start).i(end).i(step).out1(opSlice)
}

// Select returns the view t[..., index, ...] along dim, removing dim.
func (t *Tensor) Select(dim, index int64) *Tensor {
	var c call
	return c.t(t).i(dim).i(index).out1(opSelect)
}

// IndexSelect picks entries index (int64, 1-d) along dim.
func (t *Tensor) IndexSelect(dim int64, index *Tensor) *Tensor {
	var c call
	return c.t(t).i(dim).t(index).out1(opIndexSelect)
}

// Index is advanced indexing t[i0, i1, ...]; nil entries stand for ":".
func (t *Tensor) Index(indices ...*Tensor) *Tensor {
	var c call
	return c.t(t).tensors(indices).out1(opIndex)
}

// IndexPut returns a copy of t with t[indices] = v (accumulating when asked).
func (t *Tensor) IndexPut(indices []*Tensor, v *Tensor, accumulate bool) *Tensor {
	var c call
	return c.t(t).tensors(indices).t(v).b(accumulate).out1(opIndexPut)
}

// Gather picks t[..., index[i], ...] along dim.
func (t *Tensor) Gather(dim int64, index *Tensor) *Tensor {
	var c call
	return c.t(t).i(dim).t(index).out1(opGather)
}

// Scatter returns a copy of t with src written at index along dim.
func (t *Tensor) Scatter(dim int64, index, src *Tensor) *Tensor {
	var c call
	return c.t(t).i(dim).t(index).t(src).out1(opScatter)
}

// ScatterAdd returns a copy of t with src added at index along dim.
func (t *Tensor) ScatterAdd(dim int64, index, src *Tensor) *Tensor {
	var c call
	return c.t(t).i(dim).t(index).t(src).out1(opScatterAdd)
}

// MaskedFill returns t with v where mask (bool, broadcastable) is true.
func (t *Tensor) MaskedFill(mask *Tensor, v float64) *Tensor {
	var c call
	return c.t(t).t(mask).f(v).out1(opMaskedFill)
}

// MaskedFillTensor is MaskedFill with a 0-d tensor value.
func (t *Tensor) MaskedFillTensor(mask, v *Tensor) *Tensor {
	var c call
	return c.t(t).t(mask).t(v).out1(opMaskedFillT)
}

// Where picks a where cond is true and b elsewhere (broadcasting).
func Where(cond, a, b *Tensor) *Tensor {
	var c call
	return c.t(cond).t(a).t(b).out1(opWhere)
}

// Tril keeps the lower triangle (diagonal offset k).
func (t *Tensor) Tril(k int64) *Tensor {
	var c call
	return c.t(t).i(k).out1(opTril)
}

// Triu keeps the upper triangle (diagonal offset k).
func (t *Tensor) Triu(k int64) *Tensor {
	var c call
	return c.t(t).i(k).out1(opTriu)
}

// Pad pads with a constant, as F.pad: pads lists (left, right) pairs from the
// last dimension backwards.
func (t *Tensor) Pad(pads []int64, value float64) *Tensor {
	var c call
	return c.t(t).ints(pads...).scalar(value).out1(opPad)
}

// PadMode pads the last dimension of a 2-d/3-d tensor with "reflect" or "replicate".
func (t *Tensor) PadMode(pads []int64, mode string) *Tensor {
	var c call
	switch mode {
	case "reflect":
		return c.t(t).ints(pads...).out1(opReflPad1d)
	case "replicate":
		return c.t(t).ints(pads...).out1(opReplPad1d)
	case "constant":
		return t.Pad(pads, 0)
	}
	throwf("PadMode", "unknown mode %q (want constant, reflect or replicate)", mode)
	return nil
}

// Repeat tiles t (as torch.Tensor.repeat).
func (t *Tensor) Repeat(times ...int64) *Tensor {
	var c call
	return c.t(t).ints(times...).out1(opRepeat)
}

// RepeatInterleave repeats each element n times along dim.
func (t *Tensor) RepeatInterleave(n, dim int64) *Tensor {
	var c call
	return c.t(t).i(n).i(dim).out1(opRepeatIntl)
}

// Flip reverses the given dimensions.
func (t *Tensor) Flip(dims ...int64) *Tensor {
	var c call
	return c.t(t).ints(dims...).out1(opFlip)
}

// Roll shifts elements along dims, wrapping around.
func (t *Tensor) Roll(shifts, dims []int64) *Tensor {
	var c call
	return c.t(t).ints(shifts...).ints(dims...).out1(opRoll)
}

// Unfold returns sliding windows of size along dim, with the given step.
func (t *Tensor) Unfold(dim, size, step int64) *Tensor {
	var c call
	return c.t(t).i(dim).i(size).i(step).out1(opUnfold)
}

// OneHot encodes an int64 tensor of class indices (numClasses -1: infer).
func (t *Tensor) OneHot(numClasses int64) *Tensor {
	var c call
	return c.t(t).i(numClasses).out1(opOneHot)
}

// Clone copies t (the copy stays in the autograd graph).
func (t *Tensor) Clone() *Tensor {
	var c call
	return c.t(t).out1(opClone)
}

// Detach returns a view of t outside the autograd graph.
func (t *Tensor) Detach() *Tensor {
	var c call
	return c.t(t).out1(opDetach)
}

// To converts t to a device and dtype (t's data when nothing changes).
func (t *Tensor) To(d Device, dt DType) *Tensor { return t.to(d, dt, false, false) }

// ToAsync is To with non_blocking=true: with pinned host memory and a CUDA
// target the copy overlaps with compute; elsewhere it is synchronous.
func (t *Tensor) ToAsync(d Device, dt DType) *Tensor { return t.to(d, dt, true, false) }

// ToDevice moves t to d keeping its dtype.
func (t *Tensor) ToDevice(d Device) *Tensor { return t.to(d, t.DType(), false, false) }

// ToDType converts t's dtype keeping its device.
func (t *Tensor) ToDType(dt DType) *Tensor { return t.to(t.Device(), dt, false, false) }

func (t *Tensor) to(d Device, dt DType, nonBlocking, copy bool) *Tensor {
	var c call
	return c.t(t).device(d).dtype(dt).b(nonBlocking).b(copy).out1(opTo)
}
