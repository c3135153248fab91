package torch

import (
	"errors"
	"fmt"
	"strings"

	"github.com/torchfit/torchfit/torch/internal/capi"
)

// ErrNilTensor is wrapped by the error raised when a nil *Tensor is used
// where a tensor is required: as the receiver of a method that reads it, or
// as an operator's argument that its schema does not let be None (a batch
// field that is not there, say). The error names the operator's argument.
var ErrNilTensor = errors.New("nil *Tensor")

// schemaArg is one argument of an operator's schema.
type schemaArg struct {
	typ, name string
}

// required says whether the argument must be a tensor: "Tensor" or an
// aliased "Tensor(a!)", not "Tensor?" nor a list.
func (a schemaArg) required() bool {
	t := a.typ
	if i := strings.IndexByte(t, '('); i >= 0 {
		t = t[:i]
	}
	return t == "Tensor"
}

// checkNils panics with an *Error wrapping ErrNilTensor when a position in
// nils (a nil *Tensor passed, which goes to libtorch as None) is one where
// the operator's schema requires a tensor: libtorch would say only
// "Expected Tensor but got None", without the argument.
func (d *opDef) checkNils(op capi.Op, nils uint32) {
	d.argsOnce.Do(func() { d.args = parseSchemaArgs(capi.Schema(op)) })
	for k, a := range d.args {
		if k >= maxArgs {
			break
		}
		if nils&(1<<k) != 0 && a.required() {
			panic(&Error{Op: d.name, Msg: fmt.Sprintf("argument %d (%s) is a nil *Tensor; the operator needs a tensor there (a missing batch field or an unset parameter?)", k, a.name),
				wrapped: ErrNilTensor})
		}
	}
}

// parseSchemaArgs returns the arguments of a schema such as
// "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"
// in order, without the "*" that starts keyword-only ones. A schema it
// cannot read gives nil.
func parseSchemaArgs(schema string) []schemaArg {
	open := strings.IndexByte(schema, '(')
	if open < 0 {
		return nil
	}
	var args []schemaArg
	add := func(s string) {
		s = strings.TrimSpace(s)
		if i := strings.IndexByte(s, '='); i >= 0 {
			s = s[:i]
		}
		s = strings.TrimSpace(s)
		if s == "" || s == "*" {
			return
		}
		i := strings.LastIndexByte(s, ' ')
		if i < 0 {
			args = append(args, schemaArg{typ: s})
			return
		}
		args = append(args, schemaArg{typ: strings.TrimSpace(s[:i]), name: s[i+1:]})
	}
	depth, start := 0, open+1
	quote := byte(0)
	for i := open + 1; i < len(schema); i++ {
		ch := schema[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '(' || ch == '[':
			depth++
		case ch == ')' && depth == 0:
			add(schema[start:i])
			return args
		case ch == ')' || ch == ']':
			depth--
		case ch == ',' && depth == 0:
			add(schema[start:i])
			start = i + 1
		}
	}
	return nil
}
