// Package safetensors reads and writes state dicts in Hugging Face's
// safetensors format (https://github.com/huggingface/safetensors), the
// files Python's safetensors.torch.save_file writes and load_file reads.
//
//	err := safetensors.Save("model.safetensors", nn.StateDict(m), map[string]string{"format": "pt"})
//	f, err := safetensors.Load("model.safetensors") // f.Tensors, a torch.StateDict in file order; f.Free() releases them
//	sd, err := safetensors.LoadTensors("model.safetensors") // the tensors only
//
// # The format
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
//
//	{"__metadata__": {"key": "value", ...},
//	 "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//
// and then the byte buffer the offsets index: each tensor's elements in
// row-major order, little-endian. There is no pickle, so nothing in a file
// can run code.
//
// # Writing
//
// Save writes what safetensors 0.8 (the Rust library under the Python
// package) writes for the same tensors, byte for byte: tensors ordered by
// dtype (the widest first, so every tensor is aligned to its element size:
// I64, F64, F32, I32, BF16, F16, I16, I8, U8, BOOL) and within a dtype by
// name, the header compact JSON escaped as serde_json escapes it, padded
// with spaces to a multiple of 8 bytes. Metadata is written with sorted
// keys (the Rust library writes them in hash order, so with two or more
// keys only the order differs). A state dict is a torch.StateDict
// (nn.StateDict's, ptfile.LoadTensors'); a contiguous CPU tensor is
// written from libtorch's memory, any other through a contiguous CPU
// copy. Writing a path is atomic (package atomicfile).
//
// # Reading
//
// Load is safe on untrusted files and checks what the Rust library checks
// before anything is allocated: the header length (at least 2, at most
// 100,000,000 bytes, within the file), that the header is a JSON object
// of tensor entries and string metadata, every dtype, that each shape's
// element count times the element size is its byte range's length, and
// that the ranges tile the byte buffer exactly — in range, no overlap, no
// gap, nothing after the last one. It reads what the Rust library reads,
// except a header naming a tensor twice (which the Rust library resolves
// by keeping the last), refused as ambiguous. Tensors are then read straight into
// their memory (torch.FromReader), so what is allocated is at most the
// file's size. Every error for bad input is a *FormatError, which matches
// ErrBadFile and one of ErrHeader, ErrDType, ErrShape, ErrRange and
// ErrTooLarge with errors.Is; a failed Load leaves no tensor allocated.
// FuzzLoad (make fuzz) feeds it arbitrary bytes.
//
// Sniff and IsFile tell a safetensors file from a torch.save zip by its
// first bytes, for commands that take either (the recipes' --init and
// --vit-weights).
package safetensors
