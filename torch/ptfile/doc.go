// Package ptfile reads and writes PyTorch's torch.save files (PyTorch 1.6
// and later): a zip archive holding a pickle, data.pkl, and one record per
// tensor storage. It is named after the files' usual extension (.pt, .pth),
// as archive/zip and image/png are named after theirs.
//
//	err := ptfile.Save("model.pt", ptfile.NewDict("model", stateDict, "step", 100))
//	v, err := ptfile.Load("model.pt") // *ptfile.Dict; ptfile.FreeAll(v) releases its tensors
//	d, err := ptfile.LoadParts("ckpt.pt", "model") // the model part alone: no optimizer state read
//	err = ptfile.SaveTensors("sd.pt", nn.StateDict(m)) // torch.save(m.state_dict(), "sd.pt")
//	sd, err := ptfile.LoadTensors("sd.pt")             // a torch.StateDict; sd.Free() releases it
//
// # Values
//
// Python's values map to Go ones: a tensor to *torch.Tensor, dict and
// collections.OrderedDict to *Dict (ordered, with Ordered set for an
// OrderedDict, and an OrderedDict's attributes, such as a state dict's
// _metadata, kept in Attrs), tuple to Tuple, list to []any, int to int64,
// float to float64, str to string, bool, None to nil, a dtype to
// torch.DType and a device to torch.Device. Save also takes Go maps, slices,
// any integer type and torch.StateDict (written as an OrderedDict).
//
// # Writing
//
// Save writes what Python's torch.load reads back as the same structure,
// also with weights_only=True (the default since PyTorch 2.6), in PyTorch
// 2.x's layout, which PyTorch 1.13 loads too: data.pkl, .format_version,
// .storage_alignment, byteorder, one record per storage, version and
// .data/serialization_id. The pickle is protocol 2 with the opcodes,
// batches and memo numbering of CPython's pickler, and the zip is laid out
// as PyTorch's writer (miniz) lays it out — records 64-byte aligned with
// the same padding, data descriptors, zip64 fields past 4 GiB, and the
// serialization id PyTorch derives from the record names and checksums —
// so for a state dict the file is byte-identical to the one PyTorch 2.x's
// torch.save writes (2.11 tested), and each record to the one 1.13 writes
// (which has no .format_version, .storage_alignment, byteorder or
// serialization id records). The layout is not cosmetic: a .format_version
// record lets PyTorch 2.x compute storage offsets from record sizes (mmap
// and meta-device loads). The folder inside the zip is named as PyTorch 2.x
// names it: the file's base name up to its last dot, "archive" for a
// non-ASCII path. A contiguous CPU tensor is written from libtorch's
// memory, without a Go copy; any other one (a view, a CUDA tensor) through
// a contiguous CPU copy.
//
// Writing a path is atomic, through package atomicfile: the data goes to a
// hidden temporary file in the same directory, .NAME.tmp-PID-RANDOM, which
// the writer holds under an exclusive flock while it writes; the file is
// synced, renamed over the path, and the directory synced. A crash or
// kill -9 leaves the old file or the new one, never a partial one — and at
// most a temporary file whose lock is free and whose writer's PID is gone,
// which the training loop's checkpoint writer removes.
//
// # Reading
//
// Load is safe on untrusted files. The pickle runs on a small VM that never
// executes code: globals come from an allow list (the tensor rebuild
// functions, OrderedDict, torch.device, dtypes and storage classes), as
// with torch.load(weights_only=True). Every storage size, tensor size,
// stride and offset is checked against the storage and the file before
// anything is allocated; record checksums are verified; container nesting
// is bounded. Storage bytes are read from the file straight into the
// tensors' memory. Tensors that share a storage in the file (views) are
// rebuilt over one storage with as_strided and share it after loading, as
// in Python. Storages are read only after the whole pickle has been
// checked, and LoadParts reads only those of the top-level parts asked for
// (a checkpoint's model without its optimizer state); DescribePartsFrom
// gives their tensors as *TensorInfo (shape and dtype), their records
// read through to verify them and nothing allocated. Files of PyTorch 1.6 to 2.x load alike: records Load does not
// need (.format_version, .storage_alignment, .data/serialization_id) are
// ignored, and a byteorder record must say little. Errors for bad input wrap ErrBadFile (ErrLegacyFormat for the
// pre-1.6 format; ErrDType too for a tensor of a dtype torchfit does not
// have, such as complex64 or float8), and a failed Load leaves no tensor
// allocated. FuzzLoad
// (make fuzz) feeds it arbitrary bytes.
//
// # What it needs from torch
//
// ptfile imports torch and uses only its exported API: tensor metadata
// (Shape, DType, Numel, NBytes, RequiresGrad), Empty, Try, ParseDType,
// ParseDevice and CallOp("aten::as_strided", ...) for views, plus three
// names torch keeps for codecs like this one:
//
//   - (*torch.Tensor).RawBytes: a tensor's elements as bytes, aliasing
//     libtorch's memory for a contiguous CPU tensor (saving without a copy);
//   - torch.FromReader: a new CPU tensor filled from an io.Reader straight
//     into its memory (loading without a copy);
//   - torch.MaxDims: the most dimensions a torchfit tensor may have.
//
// torch does not import ptfile, so there is no torch.Save or torch.Load:
// wrappers or type aliases in torch would need an import cycle. Callers
// use ptfile.Save and ptfile.Load.
package ptfile
