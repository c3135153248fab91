package torch

// Named is a tensor with its state-dict name.
type Named struct {
	Name string
	T    *Tensor
}

// StateDict is a state dict: named tensors in order (PyTorch's
// state_dict() order for a module's, file order for one read from a
// file). nn.StateDict returns one and nn.LoadStateDict takes one;
// ptfile.SaveTensors and safetensors.Save write one and their LoadTensors
// read one. Names are expected to be distinct.
type StateDict []Named

// Get returns the tensor named name (the last, should two share it, as
// Map keeps it) and whether there is one. It scans the list; for many
// lookups use Map.
func (sd StateDict) Get(name string) (*Tensor, bool) {
	for k := len(sd) - 1; k >= 0; k-- {
		if sd[k].Name == name {
			return sd[k].T, true
		}
	}
	return nil, false
}

// Map returns the tensors by name (the same tensors, not copies; of a
// repeated name, the last).
func (sd StateDict) Map() map[string]*Tensor {
	m := make(map[string]*Tensor, len(sd))
	for _, n := range sd {
		m[n.Name] = n.T
	}
	return m
}

// Names returns the names in order.
func (sd StateDict) Names() []string {
	names := make([]string, len(sd))
	for k, n := range sd {
		names[k] = n.Name
	}
	return names
}

// Free releases the tensors. Only for a state dict that owns them (one
// loaded from a file): nn.StateDict's are the module's own.
func (sd StateDict) Free() {
	for _, n := range sd {
		n.T.Free()
	}
}
