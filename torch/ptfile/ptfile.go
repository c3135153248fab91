package ptfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/torch"
)

// This file is the package's public face: Save and Load and their
// variants, and the atomic write. pickle.go writes PyTorch's pickle,
// zipwrite.go the zip container around it, unpickle.go reads them, value.go
// holds the Go values.

// ErrBadFile is wrapped by every error Load returns for input that is not a
// readable torch.save file (corrupt, truncated, or using a feature torchfit
// does not load).
var ErrBadFile = errors.New("not a readable torch.save file")

// ErrDType is wrapped, with ErrBadFile, by the error for a file holding a
// tensor of a dtype torchfit has no tensors of (complex, float8, uint16,
// uint32, uint64, ...): the file is a torch.save file, its tensors are not
// loadable here.
var ErrDType = errors.New("a tensor of a dtype torchfit does not have")

// ErrLegacyFormat is wrapped by the error for files in PyTorch's pre-1.6
// (non-zip) format.
var ErrLegacyFormat = errors.New("legacy (pre-1.6, non-zip) torch.save format: re-save it in Python with a newer torch.save (the default zip format, _use_new_zipfile_serialization=True)")

// Save writes v to path in PyTorch's torch.save format (zip, pickle
// protocol 2), so that Python's torch.load(path) — with weights_only=True
// too — returns the same structure.
//
// v may be a *torch.Tensor, *Dict (ordered), torch.StateDict or
// []torch.Named (written as an OrderedDict), map[string]*torch.Tensor, map[string]any (Go maps are
// written with sorted keys), []any, Tuple, []*torch.Tensor, or a scalar:
// any Go integer, float32/float64, string, bool, nil, torch.DType.
// Containers nest. Tensors are written as contiguous CPU copies (views and
// CUDA tensors included).
//
// The write is atomic (package atomicfile): the data goes to a temporary
// file in the same directory, which is synced and renamed over path; a
// crash leaves either the old file or the new one, never a partial one.
func Save(path string, v any) error {
	return saveFile(path, v, false)
}

// SaveTensors writes an ordered state dict, as Python's
// torch.save(model.state_dict(), path): an OrderedDict of tensors that do
// not require grad.
func SaveTensors(path string, sd torch.StateDict) error {
	return saveFile(path, sd, true)
}

// WriteTo writes v in torch.save format to w (see Save). archive is the
// folder name inside the zip ("archive" when empty).
func WriteTo(w io.Writer, archive string, v any) error {
	return encode(w, archive, v, false)
}

// SaveBytes returns what Save would write.
func SaveBytes(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := encode(&b, "archive", v, false); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func saveFile(path string, v any, stateDict bool) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("ptfile.Save %s: %w", path, err)
		}
	}()
	return atomicfile.Write(path, func(w io.Writer) error {
		return encode(w, archiveName(path), v, stateDict)
	})
}

// Load reads a file written by Python's torch.save (or Save). It returns
// *torch.Tensor, *Dict (dict and OrderedDict, in file order), []any
// (list), Tuple, int64, float64, string, bool, nil, []byte, torch.DType or
// torch.Device values, nested as in the file. Tensors are loaded on the
// CPU; views sharing a storage in the file share it after loading. They
// follow the usual ownership rules: a torch.Tidy scope adopts them, and
// FreeAll releases them all.
//
// Only the pickle subset torch.save produces is accepted: any other global
// (arbitrary Python code) is refused with an error, as with
// torch.load(weights_only=True).
func Load(path string) (v any, err error) {
	v, _, err = decodeFile("ptfile.Load", path, nil)
	return v, err
}

// decodeFile is decode of the file at path; fn names the caller in errors.
func decodeFile(fn, path string, parts []string) (any, []any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", fn, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", fn, err)
	}
	v, keys, err := decode(f, st.Size(), parts, false)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", fn, path, err)
	}
	return v, keys, nil
}

// LoadParts is Load for a file whose value is a dict of parts, such as a
// training checkpoint ({"model": ..., "optimizer": ..., "step": ...}): it
// returns the dict with only the entries whose keys are in parts, in file
// order, and reads only their tensors' storages from the file — a part
// not asked for is parsed (the pickle) but never allocated, and its
// storage records are not read, so their checksums are not verified. A
// storage shared by a part asked for and one not is read once. With the
// model alone, loading a checkpoint for inference holds its weights, not
// the optimizer's moments as well (what torch.load(path, mmap=True) avoids
// in Python by mapping the file). keys are all the dict's keys, in file
// order, those not read included. A part the file lacks is absent from d;
// a file that is not a dict is ErrBadFile.
func LoadParts(path string, parts ...string) (d *Dict, keys []any, err error) {
	if parts == nil {
		parts = []string{}
	}
	v, keys, err := decodeFile("ptfile.LoadParts", path, parts)
	if err != nil {
		return nil, nil, err
	}
	return v.(*Dict), keys, nil
}

// LoadPartsFrom is LoadParts reading from r, whose size is size: a
// caller that reads a file in several calls (ckpt.Reader) reads the same
// file in each, whatever happens to its path meanwhile.
func LoadPartsFrom(r io.ReaderAt, size int64, parts ...string) (d *Dict, keys []any, err error) {
	return partsFrom("ptfile.LoadPartsFrom", r, size, parts, false)
}

// DescribePartsFrom is LoadPartsFrom with every tensor of the parts a
// *TensorInfo, its shape and dtype: nothing is allocated. The storage
// records of those tensors are read through to their ends, so that a
// record that is short, missing or fails its checksum is ErrBadFile here,
// as LoadPartsFrom would find it: what is described can then be read.
// Checking a checkpoint against a model this way, before reading its
// tensors, lets a resume hold one part of the file at a time.
func DescribePartsFrom(r io.ReaderAt, size int64, parts ...string) (d *Dict, keys []any, err error) {
	return partsFrom("ptfile.DescribePartsFrom", r, size, parts, true)
}

func partsFrom(fn string, r io.ReaderAt, size int64, parts []string, describe bool) (*Dict, []any, error) {
	if parts == nil {
		parts = []string{}
	}
	v, keys, err := decode(r, size, parts, describe)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", fn, err)
	}
	return v.(*Dict), keys, nil
}

// LoadBytes is Load reading from memory.
func LoadBytes(data []byte) (any, error) {
	v, _, err := decode(bytes.NewReader(data), int64(len(data)), nil, false)
	if err != nil {
		return nil, fmt.Errorf("ptfile.LoadBytes: %w", err)
	}
	return v, nil
}

// ReadFrom is Load reading from r, whose size is size.
func ReadFrom(r io.ReaderAt, size int64) (any, error) {
	v, _, err := decode(r, size, nil, false)
	if err != nil {
		return nil, fmt.Errorf("ptfile.ReadFrom: %w", err)
	}
	return v, nil
}

// LoadTensors reads a state dict (a dict of tensors, as written by
// torch.save(model.state_dict()) or SaveTensors), in file order; Free
// releases it. A non-tensor value or a non-string key is an error (and
// nothing stays allocated).
func LoadTensors(path string) (torch.StateDict, error) {
	v, err := Load(path)
	if err != nil {
		return nil, err
	}
	sd, err := tensorsOf(v)
	if err != nil {
		FreeAll(v)
		return nil, fmt.Errorf("ptfile.LoadTensors %s: %w", path, err)
	}
	return sd, nil
}

func tensorsOf(v any) (torch.StateDict, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("the file holds %s, not a dict of tensors", typeName(v))
	}
	sd := make(torch.StateDict, 0, d.Len())
	at := make(map[string]int, d.Len())
	for _, e := range d.Entries {
		k, ok := e.Key.(string)
		if !ok {
			return nil, fmt.Errorf("key %v is %s, not a string", e.Key, typeName(e.Key))
		}
		t, ok := e.Value.(*torch.Tensor)
		if !ok {
			return nil, fmt.Errorf("%q is %s, not a tensor", k, typeName(e.Value))
		}
		if i, dup := at[k]; dup { // as a Python dict: the first place, the last value
			sd[i].T = t
			continue
		}
		at[k] = len(sd)
		sd = append(sd, torch.Named{Name: k, T: t})
	}
	return sd, nil
}
