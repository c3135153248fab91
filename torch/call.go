package torch

import (
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/torchfit/torchfit/torch/internal/capi"
	"github.com/torchfit/torchfit/torch/internal/schema"
)

// opDef is an ATen operator, resolved on first use.
type opDef struct {
	name, overload string
	once           sync.Once
	op             capi.Op
	err            error
	// args are the schema's arguments, parsed on the first call that
	// passes a nil *Tensor (see checkNils).
	argsOnce sync.Once
	args     []schema.Arg
}

func defOp(name, overload string) *opDef { return &opDef{name: name, overload: overload} }

func (d *opDef) resolve() capi.Op {
	d.once.Do(func() { d.op, d.err = capi.FindOp(d.name, d.overload) })
	if d.err != nil {
		panic(wrapErr(d.name, d.err))
	}
	return d.op
}

const (
	// maxArgs is the most arguments a call passes: 16 holds the longest
	// schema torchfit calls, _fused_adamw_'s 13 without its optional
	// grad_scale and found_inf (15 with them).
	maxArgs   = 16
	arenaSize = 32
	maxOuts   = 4
)

// call collects an operator's arguments on the stack.
type call struct {
	args  [maxArgs]capi.Val
	arena [arenaSize]int64
	ext   []int64 // arena overflow
	ts    [maxArgs]*Tensor
	lists [][]*Tensor
	na    int
	nar   int
	nils  uint32 // positions where t was given a nil *Tensor
}

func (c *call) push(v capi.Val) *call {
	if c.na == maxArgs {
		throwf("call", "too many arguments")
	}
	c.args[c.na] = v
	c.na++
	return c
}

// t adds a tensor argument; nil passes None.
func (c *call) t(x *Tensor) *call {
	if x == nil {
		if c.na < maxArgs {
			c.nils |= 1 << c.na
		}
		return c.push(capi.Val{Kind: capi.KNone})
	}
	c.ts[c.na] = x
	return c.push(capi.TensorVal(x.handle("argument")))
}

func (c *call) i(v int64) *call   { return c.push(capi.Val{Kind: capi.KInt, I: v}) }
func (c *call) f(v float64) *call { return c.push(capi.Val{Kind: capi.KDouble, D: v}) }
func (c *call) b(v bool) *call {
	var i int64
	if v {
		i = 1
	}
	return c.push(capi.Val{Kind: capi.KBool, I: i})
}
func (c *call) none() *call { return c.push(capi.Val{Kind: capi.KNone}) }
func (c *call) def() *call  { return c.push(capi.Val{Kind: capi.KDefault}) }
func (c *call) dtype(d DType) *call {
	checkDType("dtype", d)
	return c.push(capi.Val{Kind: capi.KInt, I: int64(d)})
}
func (c *call) device(d Device) *call {
	mustDevice("device "+d.String(), d)
	return c.push(capi.Val{Kind: capi.KDevice, I: int64(d.Type), N: int32(d.Index)})
}

// scalar passes a Scalar: integral values as int (keeps integer dtypes).
func (c *call) scalar(v float64) *call {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return c.i(int64(v))
	}
	return c.f(v)
}

// reserve returns the arena offset for n more words.
func (c *call) reserve(n int) int {
	off := c.nar
	if c.ext == nil && off+n <= arenaSize {
		c.nar += n
		return off
	}
	if c.ext == nil {
		c.ext = make([]int64, off, off+n+arenaSize)
		copy(c.ext, c.arena[:off])
	}
	c.ext = append(c.ext, make([]int64, n)...)
	c.nar += n
	return off
}

func (c *call) word(k int) *int64 {
	if c.ext != nil {
		return &c.ext[k]
	}
	return &c.arena[k]
}

func (c *call) ints(xs ...int64) *call {
	off := c.reserve(len(xs))
	for k, x := range xs {
		*c.word(off + k) = x
	}
	return c.push(capi.Val{Kind: capi.KInts, I: int64(off), N: int32(len(xs))})
}

func (c *call) floats(xs ...float64) *call {
	off := c.reserve(len(xs))
	for k, x := range xs {
		*c.word(off + k) = int64(math.Float64bits(x))
	}
	return c.push(capi.Val{Kind: capi.KDoubles, I: int64(off), N: int32(len(xs))})
}

func (c *call) tensors(xs []*Tensor) *call {
	off := c.reserve(len(xs))
	for k, x := range xs {
		var h uintptr
		if x != nil {
			h = uintptr(unsafe.Pointer(x.handle("argument")))
		}
		*c.word(off + k) = int64(h)
	}
	c.lists = append(c.lists, xs)
	return c.push(capi.Val{Kind: capi.KTensors, I: int64(off), N: int32(len(xs))})
}

func (c *call) str(s string) *call {
	words := (len(s) + 7) / 8
	off := c.reserve(words)
	for k := 0; k < len(s); k++ {
		w := c.word(off + k/8)
		*w |= int64(s[k]) << (8 * (k % 8))
	}
	return c.push(capi.Val{Kind: capi.KString, I: int64(off), N: int32(len(s))})
}

// run calls the operator and returns its raw outputs.
func (c *call) run(d *opDef, outs []capi.Val) (int, uint64) {
	op := d.resolve()
	if c.nils != 0 {
		d.checkNils(op, c.nils)
	}
	var arena []int64
	if c.ext != nil {
		arena = c.ext // the arguments outgrew the inline arena
	} else {
		arena = c.arena[:c.nar]
	}
	n, scope, err := capi.Call(op, c.args[:c.na], arena, outs)
	for k := 0; k < c.na; k++ {
		runtime.KeepAlive(c.ts[k])
	}
	runtime.KeepAlive(c.lists)
	if err != nil {
		panic(wrapErr(d.name, err))
	}
	return n, scope
}

// out1 runs an operator returning one tensor.
func (c *call) out1(d *opDef) *Tensor {
	var outs [1]capi.Val
	n, scope := c.run(d, outs[:])
	if n < 1 || outs[0].Kind != capi.KTensor {
		return nil
	}
	return newTensor(outs[0].Tensor(), scope)
}

// outN runs an operator returning several tensors (a tuple).
func (c *call) outN(d *opDef, want int) []*Tensor {
	var outs [maxOuts]capi.Val
	n, scope := c.run(d, outs[:want])
	res := make([]*Tensor, want)
	for k := 0; k < want && k < n; k++ {
		if outs[k].Kind == capi.KTensor {
			res[k] = newTensor(outs[k].Tensor(), scope)
		}
	}
	return res
}

// outList runs an operator returning a list of tensors.
func (c *call) outList(d *opDef) []*Tensor {
	var outs [1]capi.Val
	n, scope := c.run(d, outs[:])
	if n < 1 || outs[0].Kind != capi.KTensors {
		return nil
	}
	hs := capi.TensorList(outs[0])
	res := make([]*Tensor, len(hs))
	for k, h := range hs {
		res[k] = newTensor(h, scope)
	}
	return res
}

// inplace runs an in-place operator on self and returns self.
func (c *call) inplace(d *opDef, self *Tensor) *Tensor {
	c.run(d, nil)
	return self
}

// outScalar runs an operator returning a number.
func (c *call) outScalar(d *opDef) capi.Val {
	var outs [1]capi.Val
	c.run(d, outs[:])
	return outs[0]
}
