package ptfile

import (
	"fmt"

	"github.com/torchfit/torchfit/torch"
)

// Dict is an ordered mapping: Python's dict or collections.OrderedDict (a
// state dict). Keys are strings or int64 (optimizer state dicts use ints);
// float64, bool and nil keys load too. Order is kept as written.
type Dict struct {
	Entries []DictEntry
	// Ordered marks a collections.OrderedDict, which is what
	// module.state_dict() returns. Save writes one when set, a plain dict
	// otherwise; both load in Python as dicts with the same order.
	Ordered bool
	// Attrs holds an OrderedDict's instance attributes, as pickled by
	// Python (state_dict()'s "_metadata", which load_state_dict uses for
	// versioned modules). Load fills it; Save writes it back when set.
	Attrs *Dict
}

// DictEntry is one key/value pair of a Dict.
type DictEntry struct {
	Key   any
	Value any
}

// Tuple is a Python tuple (a list is []any).
type Tuple []any

// TensorInfo is a tensor of a file described, not read
// (DescribePartsFrom): its shape and dtype.
type TensorInfo struct {
	Shape []int64
	DType torch.DType
}

// NamedTensor is a tensor with its state-dict name (torch.Named).
type NamedTensor = torch.Named

// NewDict returns an empty dict; pairs, when given, are key, value, key, value...
func NewDict(pairs ...any) *Dict {
	d := &Dict{}
	for k := 0; k+1 < len(pairs); k += 2 {
		d.Set(pairs[k], pairs[k+1])
	}
	return d
}

// normKey turns Go integer kinds into int64 so 0 and int64(0) are the same key.
func normKey(k any) any {
	switch v := k.(type) {
	case int:
		return int64(v)
	case int32:
		return int64(v)
	case int16:
		return int64(v)
	case int8:
		return int64(v)
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	case float32:
		return float64(v)
	}
	return k
}

func keyEqual(a, b any) bool {
	a, b = normKey(a), normKey(b)
	switch a.(type) {
	case string, int64, float64, bool, nil:
		return a == b
	}
	return false
}

// Len returns the number of entries.
func (d *Dict) Len() int {
	if d == nil {
		return 0
	}
	return len(d.Entries)
}

// Get returns the value stored under key.
func (d *Dict) Get(key any) (any, bool) {
	if d == nil {
		return nil, false
	}
	for _, e := range d.Entries {
		if keyEqual(e.Key, key) {
			return e.Value, true
		}
	}
	return nil, false
}

// Set stores value under key: in place when the key exists, else at the end.
func (d *Dict) Set(key, value any) {
	key = normKey(key)
	for k := range d.Entries {
		if keyEqual(d.Entries[k].Key, key) {
			d.Entries[k].Value = value
			return
		}
	}
	d.Entries = append(d.Entries, DictEntry{key, value})
}

// Keys returns the keys in order.
func (d *Dict) Keys() []any {
	out := make([]any, d.Len())
	for k := range out {
		out[k] = d.Entries[k].Key
	}
	return out
}

// Tensor returns the tensor stored under key, or nil.
func (d *Dict) Tensor(key any) *torch.Tensor {
	v, _ := d.Get(key)
	t, _ := v.(*torch.Tensor)
	return t
}

// FreeAll releases every tensor inside v: a value Load returned (nested
// dicts, lists and tuples included), a torch.StateDict, []torch.Named or
// map[string]*torch.Tensor.
func FreeAll(v any) {
	seen := map[any]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case *torch.Tensor:
			x.Free()
		case *Dict:
			if x == nil || seen[x] {
				return
			}
			seen[x] = true
			for _, e := range x.Entries {
				walk(e.Value)
			}
			walk(x.Attrs)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case Tuple:
			for _, e := range x {
				walk(e)
			}
		case torch.StateDict:
			x.Free()
		case []torch.Named:
			torch.StateDict(x).Free()
		case map[string]*torch.Tensor:
			for _, e := range x {
				e.Free()
			}
		}
	}
	walk(v)
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case *torch.Tensor, *lazyTensor, *TensorInfo:
		return "a tensor"
	case *Dict:
		return "a dict"
	case []any:
		return "a list"
	case Tuple:
		return "a tuple"
	case int64:
		return "an int"
	case float64:
		return "a float"
	case string:
		return "a string"
	case bool:
		return "a bool"
	}
	return fmt.Sprintf("%T", v)
}
