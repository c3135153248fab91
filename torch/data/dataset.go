package data

import (
	"fmt"
	"sort"

	"github.com/torchfit/torchfit/torch"
)

// Dataset is an indexable collection of samples of type S.
//
// Get is called from several worker goroutines at once: it must be safe for
// concurrent use (reading shared tensors is). Tensors it creates are
// temporaries of the worker and are released once the batch is built; it may
// also return tensors it keeps (they are not released).
type Dataset[S any] interface {
	Len() int
	Get(i int) (S, error)
}

// DatasetFunc adapts a function to Dataset: N samples, the i-th from F(i).
type DatasetFunc[S any] struct {
	N int
	F func(i int) (S, error)
}

// Len returns N.
func (d DatasetFunc[S]) Len() int { return d.N }

// Get returns F(i).
func (d DatasetFunc[S]) Get(i int) (S, error) { return d.F(i) }

// Sample is one example as named tensors, e.g. {"audio": [T, 80], "text": [L]}.
type Sample map[string]*torch.Tensor

// TensorDataset serves the rows of tensors that share their first dimension:
// sample i holds, for each field, a view of row i (no copy). The dataset keeps
// owning the tensors; Free releases them.
type TensorDataset struct {
	fields map[string]*torch.Tensor
	n      int
}

// NewTensorDataset returns a dataset over the rows of fields (on the CPU: keep
// datasets in host memory and let the loader move batches).
func NewTensorDataset(fields map[string]*torch.Tensor) (*TensorDataset, error) {
	if len(fields) == 0 {
		return nil, fmt.Errorf("data: NewTensorDataset: no fields")
	}
	n := -1
	for _, name := range sortedKeys(fields) {
		t := fields[name]
		if t.Freed() || t.Dim() == 0 {
			return nil, fmt.Errorf("data: NewTensorDataset: field %q must be a tensor with at least one dimension", name)
		}
		if m := int(t.Size(0)); n < 0 {
			n = m
		} else if m != n {
			return nil, fmt.Errorf("data: NewTensorDataset: field %q has %d rows, others %d", name, m, n)
		}
	}
	return &TensorDataset{fields: fields, n: n}, nil
}

// Len returns the number of rows.
func (d *TensorDataset) Len() int { return d.n }

// Get returns views of row i of every field.
func (d *TensorDataset) Get(i int) (Sample, error) {
	if i < 0 || i >= d.n {
		return nil, fmt.Errorf("data: TensorDataset: index %d out of range [0, %d)", i, d.n)
	}
	s := make(Sample, len(d.fields))
	for name, t := range d.fields {
		s[name] = t.Select(0, int64(i))
	}
	return s, nil
}

// Free releases the dataset's tensors.
func (d *TensorDataset) Free() {
	for _, t := range d.fields {
		t.Free()
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
