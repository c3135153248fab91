package nn

import (
	"fmt"
	"sort"
	"strings"

	"github.com/torchfit/torchfit/torch"
)

// Module is anything that embeds Base.
type Module interface {
	base() *Base
}

// Layer is a module with one tensor in and one tensor out.
type Layer interface {
	Module
	Forward(x *torch.Tensor) *torch.Tensor
}

// Named is a tensor with its state-dict name (torch.Named).
type Named = torch.Named

type child struct {
	name string
	m    Module
}

// Base holds a module's parameters, buffers and children in registration
// order, and its training flag. Embed it in every module.
type Base struct {
	params   []Named
	buffers  []Named
	children []child
	eval     bool
	// persistent is false for buffers left out of the state dict.
	nonPersistent map[string]bool
}

func (b *Base) base() *Base { return b }

// RegisterParam adds a parameter (made a leaf that requires grad). The
// tensor is kept out of any enclosing torch.Tidy scope.
func (b *Base) RegisterParam(name string, t *torch.Tensor) *torch.Tensor {
	b.checkName(name)
	if t != nil {
		t.Keep()
		if !t.RequiresGrad() {
			t.SetRequiresGrad(true)
		}
	}
	b.params = append(b.params, Named{Name: name, T: t})
	return t
}

// RegisterBuffer adds a buffer (state that is not trained, e.g. running
// statistics). Non-persistent buffers stay out of the state dict.
func (b *Base) RegisterBuffer(name string, t *torch.Tensor, persistent bool) *torch.Tensor {
	b.checkName(name)
	if t != nil {
		t.Keep()
	}
	b.buffers = append(b.buffers, Named{Name: name, T: t})
	if !persistent {
		if b.nonPersistent == nil {
			b.nonPersistent = map[string]bool{}
		}
		b.nonPersistent[name] = true
	}
	return t
}

// RegisterModule adds a child module under name and returns it.
func RegisterModule[M Module](b *Base, name string, m M) M {
	b.checkName(name)
	b.children = append(b.children, child{name, m})
	return m
}

func (b *Base) checkName(name string) {
	if name == "" || strings.Contains(name, ".") {
		panic(invalid("bad name %q (non-empty, no dots)", name))
	}
	for _, p := range b.params {
		if p.Name == name {
			panic(invalid("%q registered twice", name))
		}
	}
	for _, p := range b.buffers {
		if p.Name == name {
			panic(invalid("%q registered twice", name))
		}
	}
	for _, c := range b.children {
		if c.name == name {
			panic(invalid("%q registered twice", name))
		}
	}
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// walk visits m and its descendants depth-first in registration order.
func walk(prefix string, m Module, fn func(prefix string, b *Base)) {
	b := m.base()
	fn(prefix, b)
	for _, c := range b.children {
		if c.m != nil {
			walk(join(prefix, c.name), c.m, fn)
		}
	}
}

// Parameters returns m's parameters (and its descendants') with
// state-dict names, in PyTorch's order.
func Parameters(m Module) []Named {
	var out []Named
	seen := map[*torch.Tensor]bool{}
	walk("", m, func(prefix string, b *Base) {
		for _, p := range b.params {
			if p.T != nil && !seen[p.T] {
				seen[p.T] = true
				out = append(out, Named{Name: join(prefix, p.Name), T: p.T})
			}
		}
	})
	return out
}

// Tensors returns just the parameter tensors of m.
func Tensors(ps []Named) []*torch.Tensor {
	out := make([]*torch.Tensor, len(ps))
	for k, p := range ps {
		out[k] = p.T
	}
	return out
}

// Buffers returns m's buffers with state-dict names (persistent or not).
func Buffers(m Module) []Named {
	var out []Named
	walk("", m, func(prefix string, b *Base) {
		for _, p := range b.buffers {
			if p.T != nil {
				out = append(out, Named{Name: join(prefix, p.Name), T: p.T})
			}
		}
	})
	return out
}

// StateDict returns parameters and persistent buffers by name, in
// PyTorch's order (per module: parameters, then buffers, then children).
// The tensors are m's own (not copies): do not Free it.
func StateDict(m Module) torch.StateDict {
	var out torch.StateDict
	var rec func(prefix string, m Module)
	rec = func(prefix string, m Module) {
		b := m.base()
		for _, p := range b.params {
			if p.T != nil {
				out = append(out, Named{Name: join(prefix, p.Name), T: p.T})
			}
		}
		for _, p := range b.buffers {
			if p.T != nil && !b.nonPersistent[p.Name] {
				out = append(out, Named{Name: join(prefix, p.Name), T: p.T})
			}
		}
		for _, c := range b.children {
			if c.m != nil {
				rec(join(prefix, c.name), c.m)
			}
		}
	}
	rec("", m)
	return out
}

// LoadReport lists the keys that did not line up.
type LoadReport struct {
	Missing    []string // in the model, not in the state dict
	Unexpected []string // in the state dict, not in the model
}

// LoadStateDict copies values from sd into m's parameters and buffers (in
// place, under NoGrad); sd's tensors stay the caller's. Shape mismatches
// are errors. With strict, missing or unexpected keys are errors too;
// otherwise they are reported.
func LoadStateDict(m Module, state torch.StateDict, strict bool) (LoadReport, error) {
	var rep LoadReport
	own := StateDict(m)
	sd := state.Map()
	have := map[string]bool{}
	for _, p := range own {
		have[p.Name] = true
		src, ok := sd[p.Name]
		if !ok {
			rep.Missing = append(rep.Missing, p.Name)
			continue
		}
		if !sameShape(src.Shape(), p.T.Shape()) {
			return rep, fmt.Errorf("nn: size mismatch for %s: the checkpoint has shape %v, the model %v", p.Name, src.Shape(), p.T.Shape())
		}
	}
	for k := range sd {
		if !have[k] {
			rep.Unexpected = append(rep.Unexpected, k)
		}
	}
	sort.Strings(rep.Unexpected)
	if strict && (len(rep.Missing) > 0 || len(rep.Unexpected) > 0) {
		return rep, fmt.Errorf("nn: error loading state dict: missing keys %v, unexpected keys %v", rep.Missing, rep.Unexpected)
	}
	err := torch.Try(func() {
		torch.NoGrad(func() {
			for _, p := range own {
				if src, ok := sd[p.Name]; ok {
					p.T.CopyFrom(src)
				}
			}
		})
	})
	return rep, err
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// SetTraining puts m and its descendants in training mode (on: dropout
// active, batch norm updating its running statistics) or in evaluation
// mode (off), as PyTorch's m.train(on) / m.eval().
func SetTraining(m Module, on bool) {
	walk("", m, func(_ string, b *Base) { b.eval = !on })
}

// Training reports whether m is in training mode.
func (b *Base) Training() bool { return !b.eval }

// NumParams returns the number of parameter elements.
func NumParams(m Module) int64 {
	var n int64
	for _, p := range Parameters(m) {
		n += p.T.Numel()
	}
	return n
}

// ParamBytes returns the bytes held by parameters.
func ParamBytes(m Module) int64 {
	var n int64
	for _, p := range Parameters(m) {
		n += p.T.NBytes()
	}
	return n
}

// Freeze turns requires_grad off for parameters whose name starts with one
// of prefixes ("" matches all). It returns how many it froze.
func Freeze(m Module, prefixes ...string) int {
	return setTrainable(m, false, prefixes)
}

// Unfreeze turns requires_grad back on.
func Unfreeze(m Module, prefixes ...string) int {
	return setTrainable(m, true, prefixes)
}

func setTrainable(m Module, on bool, prefixes []string) int {
	n := 0
	for _, p := range Parameters(m) {
		for _, pre := range prefixes {
			if strings.HasPrefix(p.Name, pre) {
				p.T.SetRequiresGrad(on)
				n++
				break
			}
		}
	}
	return n
}

// To moves (and converts floating-point) parameters and buffers in place.
// The module's tensor pointers stay valid (see torch.Tensor.Assign);
// integer buffers keep their dtype.
func To(m Module, d torch.Device, dt torch.DType) {
	convert := func(t *torch.Tensor, param bool) {
		target := dt
		if !t.DType().IsFloat() {
			target = t.DType()
		}
		var nt *torch.Tensor
		// In a scope: To's result, a tensor of its own, would otherwise
		// live (and hold the storage) until Go's GC finalised it.
		torch.NoGrad(func() { torch.Tidy(func() { nt = t.To(d, target).Detach().Keep() }) })
		grad := param && t.RequiresGrad()
		t.Assign(nt)
		if grad {
			t.SetRequiresGrad(true)
		}
	}
	walk("", m, func(_ string, b *Base) {
		for _, p := range b.params {
			if p.T != nil {
				convert(p.T, true)
			}
		}
		for _, p := range b.buffers {
			if p.T != nil {
				convert(p.T, false)
			}
		}
	})
}

// Free releases m's parameters and buffers (and their gradients). m must
// not be used afterwards. Like torch.Tensor.Free it is idempotent: tensors
// already released are skipped.
func Free(m Module) {
	for _, p := range Parameters(m) {
		if p.T.Freed() {
			continue
		}
		p.T.SetGrad(nil)
		p.T.Free()
	}
	for _, b := range Buffers(m) {
		b.T.Free()
	}
}
