package recipes

import (
	"slices"
	"sort"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
)

// Weights files: what --init, --pretrained and --vit-weights take. A
// torch.save file (.pt, .pth, .bin) or a safetensors file, told apart by
// the extension (.safetensors) or else by the first bytes
// (safetensors.IsFile), so a safetensors file under another name works too.

// LoadWeights reads a weights file as ptfile.Load reads a torch.save file
// (its value; ptfile.FreeAll releases its tensors), except that a dict
// with a "model" or "state_dict" part (a training checkpoint) is read as
// those parts and "meta" only (ptfile.LoadParts): its optimizer state is
// never allocated. A safetensors file is
// read as the ordered state dict it holds; when it has metadata, as
// {"model": state dict, "meta": metadata}, the layout of a torchfit
// checkpoint, so a checkpoint's description saved as metadata is read as
// one.
func LoadWeights(path string) (any, error) {
	if !safetensors.IsFile(path) {
		parts := []string{"model", "state_dict", "meta"}
		d, keys, err := ptfile.LoadParts(path, parts...)
		if err != nil || !slices.ContainsFunc(keys, func(k any) bool { return k == "model" || k == "state_dict" }) {
			if d != nil {
				ptfile.FreeAll(d)
			}
			return ptfile.Load(path) // a state dict, a tensor, or the file's error
		}
		return d, nil
	}
	f, err := safetensors.Load(path)
	if err != nil {
		return nil, err
	}
	sd := &ptfile.Dict{Ordered: true, Entries: make([]ptfile.DictEntry, len(f.Tensors))}
	for k, nt := range f.Tensors {
		sd.Entries[k] = ptfile.DictEntry{Key: nt.Name, Value: nt.T}
	}
	if len(f.Metadata) == 0 {
		return sd, nil
	}
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	meta := &ptfile.Dict{}
	for _, k := range keys {
		meta.Entries = append(meta.Entries, ptfile.DictEntry{Key: k, Value: f.Metadata[k]})
	}
	return ptfile.NewDict("model", sd, "meta", meta), nil
}

// LoadStateDict reads a state dict from a weights file (safetensors or
// torch.save), in file order, as ptfile.LoadTensors; Free releases it.
func LoadStateDict(path string) (torch.StateDict, error) {
	if safetensors.IsFile(path) {
		return safetensors.LoadTensors(path)
	}
	return ptfile.LoadTensors(path)
}
