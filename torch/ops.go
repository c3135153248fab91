package torch

// The op wrappers whose body is the one call of an ATen operator are
// generated from ops.list (one line per wrapper: its Go name and
// parameters, the schema as libtorch prints it, its doc comment) into
// ops_gen.go. Add an op by adding a line, then run go generate ./torch.
// The wrappers whose signature needs care are hand-written in ops_nn.go,
// ops_shape.go and create.go.

//go:generate go run ./internal/opgen -list ops.list -out ops_gen.go
