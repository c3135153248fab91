package data

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/torchfit/torchfit/torch"
)

// TensorBatch is what a loader's batches must be: something that lists its
// tensors, so the loader can pin them, move them to the device, and release
// batches the caller never received.
type TensorBatch interface {
	Tensors() []*torch.Tensor
}

// Batch is a collated batch of Samples.
type Batch struct {
	// Fields holds each field stacked along a new dimension 0: [B, ...].
	Fields map[string]*torch.Tensor
	// Lengths holds, for each padded field, the samples' lengths along the
	// padded dimension before padding: int64 [B].
	Lengths map[string]*torch.Tensor
	// PadDims holds, for each padded field, the padded dimension of the
	// batched tensor (the sample's dimension + 1).
	PadDims map[string]int
	// Multiples holds, for fields padded to a multiple (Pad.Multiple > 1),
	// that multiple; Slice keeps it when it trims.
	Multiples map[string]int

	// host holds the lengths Collate and SetLengths made, and Slice
	// sliced, on the host, for the tensor in Lengths they describe: a
	// batch moved to a device in place (the loader) still answers
	// HostLengths and slices without waiting for the device.
	host map[string]hostLengths
}

// hostLengths are a lengths tensor's values, kept on the host.
type hostLengths struct {
	of   *torch.Tensor
	vals []int64
}

// SetLengths sets the lengths of the padded field name to lens (an int64
// [B] tensor on the CPU, freeing the one it replaces), and keeps them on
// the host for HostLengths and Slice.
func (b *Batch) SetLengths(name string, lens []int64) {
	t := torch.FromSlice(lens, []int64{int64(len(lens))})
	if b.Lengths == nil {
		b.Lengths = map[string]*torch.Tensor{}
	}
	if old, ok := b.Lengths[name]; ok && old != nil {
		old.Free()
	}
	b.Lengths[name] = t
	b.keepHost(name, t, slices.Clone(lens))
}

func (b *Batch) keepHost(name string, t *torch.Tensor, vals []int64) {
	if b.host == nil {
		b.host = map[string]hostLengths{}
	}
	b.host[name] = hostLengths{of: t, vals: vals}
}

// HostLengths returns the lengths of the padded field name on the host.
// Batches from Collate and PadCollate, SetLengths and Slice keep them
// there, so a batch on a device answers without waiting for it (a read
// of a device tensor waits for every kernel queued before it, and cannot
// be captured in a CUDA graph); for another batch, or a Lengths tensor
// replaced since, the tensor is read. A field that has no lengths panics
// as Length does. The slice is the caller's.
func (b *Batch) HostLengths(name string) []int64 {
	t := b.Length(name)
	if vals := b.kept(name, t); vals != nil {
		return slices.Clone(vals)
	}
	return t.Int64s()
}

// kept returns the host copy of name's lengths while t, its lengths
// tensor, is the one it describes; else nil.
func (b *Batch) kept(name string, t *torch.Tensor) []int64 {
	if h, ok := b.host[name]; ok && h.of == t {
		return h.vals
	}
	return nil
}

// Size returns the number of samples (dimension 0 of the fields).
func (b *Batch) Size() int {
	for _, t := range b.Fields {
		return int(t.Size(0))
	}
	return 0
}

// ErrNoField is matched (errors.Is) by the error for a batch field that is
// not there: see Batch.Field.
var ErrNoField = errors.New("no such batch field")

// FieldError is the error for a field a batch does not have. Field and
// Length panic with a *torch.Error that wraps it (errors.As reaches it), as
// tensor math panics: a training step returns it as the step's error.
type FieldError struct {
	Name    string   // the field asked for
	Lengths bool     // asked for the field's lengths (Length), not the field
	Have    []string // what the batch has: its fields, or its padded fields for Length; sorted
}

func (e *FieldError) Error() string {
	what, have := "field", "its fields"
	if e.Lengths {
		what, have = "lengths for field", "it has lengths for"
	}
	list := "none"
	if len(e.Have) > 0 {
		q := make([]string, len(e.Have))
		for k, h := range e.Have {
			q[k] = fmt.Sprintf("%q", h)
		}
		list = strings.Join(q, ", ")
	}
	return fmt.Sprintf("batch has no %s %q (%s: %s)", what, e.Name, have, list)
}

// Is makes errors.Is(err, ErrNoField) true.
func (e *FieldError) Is(target error) bool { return target == ErrNoField }

// Field returns the batched field name. A field the batch does not have (a
// misspelt name in a loss function, say) panics with a *torch.Error wrapping
// a *FieldError that names it and lists the fields the batch has, where
// indexing Fields would give nil and a later operator would fail without
// saying which field was missing.
func (b *Batch) Field(name string) *torch.Tensor {
	var fields map[string]*torch.Tensor
	if b != nil {
		fields = b.Fields
	}
	t, ok := fields[name]
	if !ok {
		panic(torch.WrapError("Batch.Field", &FieldError{Name: name, Have: sortedKeys(fields)}))
	}
	return t
}

// Length returns the lengths of the padded field name (int64 [B]). A field
// that has none panics as Field does, listing the fields that have lengths.
func (b *Batch) Length(name string) *torch.Tensor {
	var lengths map[string]*torch.Tensor
	if b != nil {
		lengths = b.Lengths
	}
	t, ok := lengths[name]
	if !ok {
		panic(torch.WrapError("Batch.Length", &FieldError{Name: name, Lengths: true, Have: sortedKeys(lengths)}))
	}
	return t
}

// Slice returns samples [i, j) as a new batch on device. On the CPU its
// tensors are views of b's; elsewhere only the slice is copied to the
// device. Padded fields are trimmed to the longest sample of the slice, so
// a micro-batch of short utterances does not pay for the longest one of the
// whole batch. The caller owns the result (Free it, or slice inside Tidy).
func (b *Batch) Slice(i, j int, device torch.Device) *Batch {
	n := int64(j - i)
	out := &Batch{Fields: map[string]*torch.Tensor{}}
	for name, t := range b.Fields {
		x := t.Narrow(0, int64(i), n)
		if l, ok := b.Lengths[name]; ok {
			var vals []int64 // the slice's lengths on the host
			if kept := b.kept(name, l); kept != nil && 0 <= i && i <= j && j <= len(kept) {
				vals = slices.Clone(kept[i:j])
			}
			lens := l.Narrow(0, int64(i), n)
			if vals == nil {
				vals = lens.Int64s()
			}
			var longest int64
			for _, v := range vals {
				longest = max(longest, v)
			}
			if out.Lengths == nil {
				out.Lengths, out.PadDims = map[string]*torch.Tensor{}, map[string]int{}
			}
			d := b.PadDims[name]
			if m := b.Multiples[name]; m > 1 {
				longest = roundUp(longest, int64(m))
				if out.Multiples == nil {
					out.Multiples = map[string]int{}
				}
				out.Multiples[name] = m
			}
			if d > 0 && longest < x.Size(d) {
				trimmed := x.Narrow(int64(d), 0, longest)
				x.Free()
				x = trimmed
			}
			out.Lengths[name] = moveTo(lens, device)
			out.keepHost(name, out.Lengths[name], vals)
			out.PadDims[name] = d
		}
		out.Fields[name] = moveTo(x, device)
	}
	return out
}

func moveTo(t *torch.Tensor, device torch.Device) *torch.Tensor {
	if device == torch.CPU || t.Device() == device {
		return t
	}
	u := t.ToAsync(device, t.DType())
	t.Free()
	return u
}

// Tensors lists the fields then the lengths, each sorted by name.
func (b *Batch) Tensors() []*torch.Tensor {
	out := make([]*torch.Tensor, 0, len(b.Fields)+len(b.Lengths))
	for _, k := range sortedKeys(b.Fields) {
		out = append(out, b.Fields[k])
	}
	for _, k := range sortedKeys(b.Lengths) {
		out = append(out, b.Lengths[k])
	}
	return out
}

// Free releases every tensor of the batch.
func (b *Batch) Free() {
	if b == nil {
		return
	}
	for _, t := range b.Tensors() {
		t.Free()
	}
}

// StackTensors stacks tensors of equal shape along a new dimension 0.
func StackTensors(ts []*torch.Tensor) (*torch.Tensor, error) {
	if len(ts) == 0 {
		return nil, fmt.Errorf("data: stack: no tensors")
	}
	var shape0 []int64
	var out *torch.Tensor
	err := torch.Try(func() {
		shape0 = ts[0].Shape()
		for k, t := range ts[1:] {
			if s := t.Shape(); !equalShape(s, shape0) {
				panic(&torch.Error{Op: "stack", Msg: fmt.Sprintf(
					"sample %d has shape %v, sample 0 has %v (use a padding collate for variable-length data)", k+1, s, shape0)})
			}
		}
		out = torch.Stack(ts, 0)
	})
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	return out, nil
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// PadSequences pads every tensor along dim with value up to the longest one,
// and stacks them: padded is [B, ...] with dim's size the maximum length, and
// lengths (int64 [B]) holds each tensor's size along dim. The other
// dimensions must agree. dim may be negative (counted from the end).
func PadSequences(ts []*torch.Tensor, dim int, value float64) (padded, lengths *torch.Tensor, err error) {
	return PadSequencesTo(ts, dim, value, 1)
}

// PadSequencesTo is PadSequences with the padded length rounded up to a
// multiple of multiple (values below 2 mean none): batches then come in a
// few lengths, so the CPU backend compiles and caches kernels for a few
// shapes instead of one per length.
func PadSequencesTo(ts []*torch.Tensor, dim int, value float64, multiple int) (padded, lengths *torch.Tensor, err error) {
	padded, lengths, _, err = padSequences(ts, dim, value, multiple)
	return padded, lengths, err
}

// padSequences is PadSequencesTo, also returning the lengths on the host.
func padSequences(ts []*torch.Tensor, dim int, value float64, multiple int) (padded, lengths *torch.Tensor, lens []int64, err error) {
	if len(ts) == 0 {
		return nil, nil, nil, fmt.Errorf("data: pad: no tensors")
	}
	lens = make([]int64, len(ts))
	err = torch.Try(func() {
		shape0 := ts[0].Shape()
		nd := len(shape0)
		d := dim
		if d < 0 {
			d += nd
		}
		if d < 0 || d >= nd {
			panic(&torch.Error{Op: "pad", Msg: fmt.Sprintf("dimension %d out of range for %d-d samples", dim, nd)})
		}
		var longest int64
		for k, t := range ts {
			s := t.Shape()
			if len(s) != nd {
				panic(&torch.Error{Op: "pad", Msg: fmt.Sprintf("sample %d is %d-d, sample 0 is %d-d", k, len(s), nd)})
			}
			for j := range s {
				if j != d && s[j] != shape0[j] {
					panic(&torch.Error{Op: "pad", Msg: fmt.Sprintf(
						"sample %d has shape %v, sample 0 has %v: only dimension %d may differ", k, s, shape0, d)})
				}
			}
			lens[k] = s[d]
			longest = max(longest, s[d])
		}
		if multiple > 1 {
			longest = roundUp(longest, int64(multiple))
		}
		// Pad lists (left, right) pairs from the last dimension backwards.
		pads := make([]int64, 2*(nd-d))
		var tmp []*torch.Tensor
		defer func() {
			for _, t := range tmp {
				t.Free()
			}
		}()
		in := make([]*torch.Tensor, len(ts))
		for k, t := range ts {
			in[k] = t
			if lens[k] < longest {
				pads[len(pads)-1] = longest - lens[k]
				in[k] = t.Pad(pads, value)
				tmp = append(tmp, in[k])
			}
		}
		padded = torch.Stack(in, 0)
		lengths = torch.FromSlice(lens, nil)
	})
	if err != nil {
		padded.Free()
		return nil, nil, nil, fmt.Errorf("data: %w", err)
	}
	return padded, lengths, lens, nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Pad says how PadCollate pads a field: along Dim (of the sample, negative
// counts from the end) with Value, to the longest sample's length rounded
// up to a multiple of Multiple (0 or 1: no rounding).
type Pad struct {
	Dim      int
	Value    float64
	Multiple int
}

// Collate stacks every field of the samples along a new dimension 0. All
// samples must have the same fields, each of the same shape.
func Collate(samples []Sample) (*Batch, error) { return collate(samples, nil) }

// PadCollate returns a collate that pads the named fields to the longest
// sample (recording Batch.Lengths for them) and stacks the others.
func PadCollate(pad map[string]Pad) func([]Sample) (*Batch, error) {
	return func(samples []Sample) (*Batch, error) { return collate(samples, pad) }
}

func collate(samples []Sample, pad map[string]Pad) (_ *Batch, err error) {
	if len(samples) == 0 {
		// A rank's empty part of a short last batch (Shard).
		return &Batch{Fields: map[string]*torch.Tensor{}}, nil
	}
	names := sortedKeys(samples[0])
	if len(names) == 0 {
		return nil, fmt.Errorf("data: collate: sample 0 has no fields (a nil or empty Sample)")
	}
	for name := range pad {
		if _, ok := samples[0][name]; !ok {
			return nil, fmt.Errorf("data: collate: padded field %q is not in the samples (fields %v)", name, names)
		}
	}
	b := &Batch{Fields: map[string]*torch.Tensor{}}
	defer func() {
		if err != nil {
			b.Free()
		}
	}()
	col := make([]*torch.Tensor, len(samples))
	for _, name := range names {
		for k, s := range samples {
			t, ok := s[name]
			if !ok || len(s) != len(names) {
				return nil, fmt.Errorf("data: collate: sample %d has fields %v, sample 0 has %v", k, sortedKeys(s), names)
			}
			col[k] = t
		}
		if p, ok := pad[name]; ok {
			if p.Multiple < 0 {
				return nil, fmt.Errorf("data: collate: field %q: negative Pad.Multiple %d", name, p.Multiple)
			}
			x, l, vals, err := padSequences(col, p.Dim, p.Value, p.Multiple)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", name, err)
			}
			if p.Multiple > 1 {
				if b.Multiples == nil {
					b.Multiples = map[string]int{}
				}
				b.Multiples[name] = p.Multiple
			}
			b.Fields[name] = x
			if b.Lengths == nil {
				b.Lengths = map[string]*torch.Tensor{}
			}
			b.Lengths[name] = l
			b.keepHost(name, l, vals)
			if b.PadDims == nil {
				b.PadDims = map[string]int{}
			}
			d := p.Dim
			if d < 0 {
				d += col[0].Dim()
			}
			b.PadDims[name] = d + 1
			continue
		}
		x, err := StackTensors(col)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", name, err)
		}
		b.Fields[name] = x
	}
	return b, nil
}
