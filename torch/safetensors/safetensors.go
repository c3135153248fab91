package safetensors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/torchfit/torchfit/torch"
)

// This file is the package's public face: the errors, Load and Save and
// their variants. read.go parses and checks the header, write.go writes it.

// MaxHeaderSize is the longest JSON header a file may have, as in the Rust
// library (safetensors' MAX_HEADER_SIZE).
const MaxHeaderSize = 100_000_000

// Ext is the files' usual extension.
const Ext = ".safetensors"

// ErrBadFile is matched by every error Load returns for input that is not
// a readable safetensors file.
var ErrBadFile = errors.New("not a readable safetensors file")

// What is wrong with a file: a *FormatError matches ErrBadFile and one of
// these.
var (
	// ErrHeader: the header length or the JSON (not an object, a tensor
	// entry without its fields, a duplicate name, metadata that is not
	// strings).
	ErrHeader = errors.New("bad header")
	// ErrDType: a dtype torchfit does not have (F8_E4M3, U16, C64, ...).
	ErrDType = errors.New("unsupported dtype")
	// ErrShape: a shape whose element count times the element size is not
	// its byte range's length, or with more dimensions than torch.MaxDims.
	ErrShape = errors.New("shape, dtype and byte count disagree")
	// ErrRange: data offsets past the buffer, reversed, overlapping,
	// leaving a gap, or bytes after the last tensor.
	ErrRange = errors.New("bad data offsets")
	// ErrTooLarge: a header longer than MaxHeaderSize, or a shape whose
	// sizes overflow.
	ErrTooLarge = errors.New("absurd size")
)

// FormatError is a file that is not a readable safetensors file.
type FormatError struct {
	Tensor string // the tensor entry at fault; "" for the header itself
	Kind   error  // ErrHeader, ErrDType, ErrShape, ErrRange or ErrTooLarge
	Detail string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("%v: %v: tensor %q: %s", ErrBadFile, e.Kind, e.Tensor, e.Detail)
	}
	return fmt.Sprintf("%v: %v: %s", ErrBadFile, e.Kind, e.Detail)
}

// Unwrap makes errors.Is match both ErrBadFile and Kind.
func (e *FormatError) Unwrap() []error { return []error{ErrBadFile, e.Kind} }

func bad(kind error, tensor, format string, args ...any) error {
	return &FormatError{Tensor: tensor, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// File is what a safetensors file holds: its tensors in file order (the
// header's, which for files written by Save or Python is the data's) and
// its metadata (nil when it has none).
type File struct {
	Tensors  torch.StateDict
	Metadata map[string]string
}

// Map returns the tensors by name (the same tensors, not copies).
func (f *File) Map() map[string]*torch.Tensor { return f.Tensors.Map() }

// Names returns the tensor names in file order.
func (f *File) Names() []string { return f.Tensors.Names() }

// Free releases the tensors.
func (f *File) Free() {
	if f == nil {
		return
	}
	f.Tensors.Free()
}

// Load reads a safetensors file. Its tensors are new contiguous CPU
// tensors that do not require grad; they follow the usual ownership rules
// (a torch.Tidy scope adopts them) and File.Free releases them.
func Load(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors.Load: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors.Load: %w", err)
	}
	f, err := decode(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("safetensors.Load %s: %w", path, err)
	}
	return f, nil
}

// LoadBytes is Load reading from memory (Python's safetensors.torch.load).
func LoadBytes(data []byte) (*File, error) {
	f, err := decode(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("safetensors.LoadBytes: %w", err)
	}
	return f, nil
}

// ReadFrom is Load reading from r, whose size is size.
func ReadFrom(r io.ReaderAt, size int64) (*File, error) {
	f, err := decode(r, size)
	if err != nil {
		return nil, fmt.Errorf("safetensors.ReadFrom: %w", err)
	}
	return f, nil
}

// LoadTensors reads a safetensors file as ptfile.LoadTensors reads a
// torch.save state dict: its tensors in file order (the metadata is
// dropped).
func LoadTensors(path string) (torch.StateDict, error) {
	f, err := Load(path)
	if err != nil {
		return nil, err
	}
	return f.Tensors, nil
}

// Save writes the state dict sd, with metadata (nil: none), to path, as
// Python's safetensors.torch.save_file(tensors, path, metadata) writes it.
// Names must be distinct, valid UTF-8 and not "__metadata__"; the dtypes
// are those of package torch (all of which the format has). The write is
// atomic (package atomicfile): a crash leaves the old file or the new one.
func Save(path string, sd torch.StateDict, metadata map[string]string) error {
	if err := writeFile(path, sd, metadata); err != nil {
		return fmt.Errorf("safetensors.Save %s: %w", path, err)
	}
	return nil
}

// WriteTo writes what Save would write to w.
func WriteTo(w io.Writer, sd torch.StateDict, metadata map[string]string) error {
	if err := encode(w, sd, metadata); err != nil {
		return fmt.Errorf("safetensors.WriteTo: %w", err)
	}
	return nil
}

// SaveBytes returns what Save would write (Python's safetensors.torch.save).
func SaveBytes(sd torch.StateDict, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	if err := encode(&b, sd, metadata); err != nil {
		return nil, fmt.Errorf("safetensors.SaveBytes: %w", err)
	}
	return b.Bytes(), nil
}

// Sniff reports whether head, a file's first bytes (at least 9), starts
// as a safetensors file does: a header length of at most MaxHeaderSize
// and a JSON object. A torch.save zip ("PK\x03\x04...") never does.
func Sniff(head []byte) bool {
	if len(head) < 9 {
		return false
	}
	n := le64(head)
	return n >= 2 && n <= MaxHeaderSize && head[8] == '{'
}

// IsFile reports whether path names a safetensors file: by its extension
// (.safetensors, any case), else by its first bytes (Sniff). A file that
// cannot be read is not one.
func IsFile(path string) bool {
	if strings.EqualFold(filepath.Ext(path), Ext) {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 9)
	if _, err := io.ReadFull(f, head); err != nil {
		return false
	}
	return Sniff(head)
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
