package torch

import (
	"sync"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// defaultArg is the type of Default.
type defaultArg struct{}

// Default, as a CallOp argument, takes the schema's default for that
// position (useful to reach a later argument).
var Default = defaultArg{}

var callOps sync.Map // "name.overload" -> *opDef

// OpSchema returns the schema of the operator name.overload registered
// with libtorch's dispatcher (overload "" for the default), or an error
// when this libtorch has none: what torchfit's own operators (the fused
// scan, dropout and attention) use to report that their registration ran.
func OpSchema(name, overload string) (string, error) {
	op, err := capi.FindOp(name, overload)
	if err != nil {
		return "", wrapErr(name, err)
	}
	return capi.Schema(op), nil
}

// CallOp calls any ATen operator through libtorch's dispatcher (autograd
// included), by name and overload as in its schema, e.g.
//
//	CallOp("aten::add", "Tensor", a, b, 2)        // a + 2·b
//	CallOp("aten::max", "dim", a, 1, false)       // values, indices
//	CallOp("aten::zeros", "", []int64{2, 3}, torch.Float64, nil, torch.CPU)
//
// Arguments are positional; missing trailing ones take the schema's
// defaults. Accepted: *Tensor (nil: None), []*Tensor, int, int32, int64,
// float32, float64, bool, string, []int, []int64, []float64, DType, Device,
// nil (None) and Default. Results come back in order as *Tensor (nil for an
// undefined tensor), []*Tensor, int64, float64, bool or nil; returned
// tensors belong to the enclosing Tidy scope as with any op. Errors panic
// with *Error, as every op does.
func CallOp(name, overload string, args ...any) []any {
	key := name + "." + overload
	d, ok := callOps.Load(key)
	if !ok {
		d, _ = callOps.LoadOrStore(key, defOp(name, overload))
	}
	op := d.(*opDef)
	var c call
	for k, a := range args {
		switch v := a.(type) {
		case nil:
			c.none()
		case defaultArg:
			c.def()
		case *Tensor:
			c.t(v)
		case []*Tensor:
			c.tensors(v)
		case int:
			c.i(int64(v))
		case int32:
			c.i(int64(v))
		case int64:
			c.i(v)
		case float32:
			c.f(float64(v))
		case float64:
			c.f(v)
		case bool:
			c.b(v)
		case string:
			c.str(v)
		case []int64:
			c.ints(v...)
		case []int:
			xs := make([]int64, len(v))
			for j, x := range v {
				xs[j] = int64(x)
			}
			c.ints(xs...)
		case []float64:
			c.floats(v...)
		case DType:
			c.dtype(v)
		case Device:
			c.device(v)
		case Reduction:
			c.i(int64(v))
		default:
			throwf(name, "CallOp argument %d: unsupported type %T", k, a)
		}
	}
	var outs [8]capi.Val
	n, scope := c.run(op, outs[:])
	res := make([]any, 0, min(n, len(outs)))
	for k := 0; k < n && k < len(outs); k++ {
		v := outs[k]
		switch v.Kind {
		case capi.KTensor:
			res = append(res, newTensor(v.Tensor(), scope))
		case capi.KTensors:
			hs := capi.TensorList(v)
			ts := make([]*Tensor, len(hs))
			for j, h := range hs {
				ts[j] = newTensor(h, scope)
			}
			res = append(res, ts)
		case capi.KInt:
			res = append(res, v.I)
		case capi.KDouble:
			res = append(res, v.D)
		case capi.KBool:
			res = append(res, v.I != 0)
		default:
			res = append(res, nil)
		}
	}
	return res
}
