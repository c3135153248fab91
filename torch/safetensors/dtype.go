package safetensors

import "github.com/torchfit/torchfit/torch"

// dtypes are the format's dtype names torchfit has, in the order Save
// writes them (the Rust library's Dtype enum, descending: the widest
// first, so that every tensor is aligned to its element size).
var dtypes = []struct {
	name string
	dt   torch.DType
}{
	{"I64", torch.Int64},
	{"F64", torch.Float64},
	{"F32", torch.Float32},
	{"I32", torch.Int32},
	{"BF16", torch.BFloat16},
	{"F16", torch.Float16},
	{"I16", torch.Int16},
	{"I8", torch.Int8},
	{"U8", torch.Uint8},
	{"BOOL", torch.Bool},
}

// otherDTypes are the format's dtypes torchfit has no tensors of.
var otherDTypes = map[string]bool{
	"F8_E5M2": true, "F8_E4M3": true, "F8_E8M0": true, "F4": true, "F6_E2M3": true, "F6_E3M2": true,
	"U16": true, "U32": true, "U64": true, "C64": true,
}

// dtypeOf returns the torch dtype of a format name.
func dtypeOf(name string) (torch.DType, bool) {
	for _, d := range dtypes {
		if d.name == name {
			return d.dt, true
		}
	}
	return 0, false
}

// nameOf returns the format name of a torch dtype and its place in the
// write order.
func nameOf(dt torch.DType) (string, int, bool) {
	for k, d := range dtypes {
		if d.dt == dt {
			return d.name, k, true
		}
	}
	return "", 0, false
}
