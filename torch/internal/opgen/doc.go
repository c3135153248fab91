// Opgen generates torch's op wrappers (torch/ops_gen.go) from the list
// torch/ops.list. It runs from torch's go:generate line:
//
//	go generate ./torch    (go run ./internal/opgen -list ops.list -out ops_gen.go)
//
// -check reports, with exit status 1, an output that is out of date
// instead of writing it; the package's tests do the same on every
// go test ./..., and check each listed schema against the libtorch they
// link.
//
// # The list
//
// "#" lines are comments about the list. "//" lines are the doc comment of
// the wrapper that follows them, copied as they are (an exported wrapper
// needs one, starting with its name). Every other line is a wrapper:
//
//	t.AddScaled(o, alpha)   aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
//
// first the Go name and parameters, then the operator's schema exactly as
// libtorch prints it (torch._C._jit_get_schemas_for_operator in Python
// prints the same text). "t." makes a method on *Tensor whose receiver is
// the schema's first argument; without it the wrapper is a function.
//
// Parameters bind to the schema's arguments in order, and their Go types
// follow from the schema:
//
//	Tensor, Tensor?          *Tensor (nil passes None)
//	Tensor[], Tensor?[]      []*Tensor
//	int, SymInt, int?        int64; Reduction for "int reduction"
//	int[N], SymInt[], int[]? []int64
//	float                    float64
//	Scalar                   float64 (integral values pass as int, keeping integer dtypes)
//	bool, str                bool, string
//	ScalarType, Device       DType, Device
//
// A parameter may be written
//
//	name...       variadic (...int64, ...*Tensor); on a factory's
//	              "ScalarType? dtype, Layout? layout, Device? device,
//	              bool? pin_memory" it is opts ...Opt: a DType, a Device,
//	              RequiresGrad (float32 on the CPU unless set; on an op that
//	              takes a tensor, a *_like, what is not set is the input's)
//	name:float    a Scalar passed as a double (-0.0 stays negative)
//	arg=literal   not a Go parameter: a constant for schema argument arg,
//	              "string", True, False, None or a number
//
// Arguments after the last one bound take the schema's defaults (libtorch
// fills them in); one left out before a bound one passes its default
// explicitly. An argument without a default must be bound.
//
// Results: a tensor (*Tensor), a list ([]*Tensor), a tuple of tensors
// (named from the schema: (values, indices *Tensor)), bool, int or float.
// An in-place op (-> Tensor(a!)) returns its receiver as a method, so calls
// chain, and nothing as a function; "-> ()" returns nothing. Everything
// else (an optional or Scalar result, an options struct, a default that
// depends on other arguments, several ops) is hand-written in torch.
//
// Each distinct schema gets one opDef variable, named after the operator
// (aten::add_.Tensor: opAdd_Tensor), preceded by its schema; a list entry
// becomes a function with its doc comment and a body of one builder chain
// (call.go).
package main
