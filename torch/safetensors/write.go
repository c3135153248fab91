package safetensors

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/torchfit/torchfit/atomicfile"
	"github.com/torchfit/torchfit/torch"
)

// ErrBadName is wrapped by Save's error for a name it cannot write: not
// UTF-8, "__metadata__", or given twice.
var ErrBadName = errors.New("a tensor name safetensors cannot hold")

func writeFile(path string, ts torch.StateDict, metadata map[string]string) error {
	// Checked before the temporary file is made, so a bad state dict
	// leaves nothing behind.
	if _, err := plan(ts); err != nil {
		return err
	}
	return atomicfile.Write(path, func(w io.Writer) error { return encode(w, ts, metadata) })
}

// out is one tensor to write, at its place in the file.
type out struct {
	name  string
	t     *torch.Tensor
	dtype string
	rank  int
	shape []int64
	size  uint64
}

// plan checks the tensors and orders them as the Rust library does: by
// dtype (the widest first), then by name.
func plan(ts torch.StateDict) ([]out, error) {
	outs := make([]out, 0, len(ts))
	seen := map[string]bool{}
	for _, nt := range ts {
		switch {
		case !utf8.ValidString(nt.Name):
			return nil, fmt.Errorf("%q: %w: not UTF-8", nt.Name, ErrBadName)
		case nt.Name == "__metadata__":
			return nil, fmt.Errorf("%q: %w: the metadata's key", nt.Name, ErrBadName)
		case seen[nt.Name]:
			return nil, fmt.Errorf("%q: %w: given twice", nt.Name, ErrBadName)
		case nt.T == nil:
			return nil, fmt.Errorf("%q: no tensor", nt.Name)
		}
		seen[nt.Name] = true
		o := out{name: nt.Name, t: nt.T}
		var dt torch.DType
		if err := torch.Try(func() { dt, o.shape = nt.T.DType(), nt.T.Shape() }); err != nil {
			return nil, fmt.Errorf("%q: %w", nt.Name, err)
		}
		var ok bool
		if o.dtype, o.rank, ok = nameOf(dt); !ok {
			return nil, fmt.Errorf("%q: %w: %v", nt.Name, ErrDType, dt)
		}
		numel := uint64(1)
		for _, d := range o.shape {
			numel *= uint64(d)
		}
		o.size = numel * uint64(dt.Size())
		outs = append(outs, o)
	}
	sort.SliceStable(outs, func(a, b int) bool {
		if outs[a].rank != outs[b].rank {
			return outs[a].rank < outs[b].rank
		}
		return outs[a].name < outs[b].name
	})
	return outs, nil
}

func encode(w io.Writer, ts torch.StateDict, metadata map[string]string) error {
	outs, err := plan(ts)
	if err != nil {
		return err
	}
	hdr, err := header(outs, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var lenBuf [8]byte
	for k, n := 0, uint64(len(hdr)); k < 8; k++ {
		lenBuf[k] = byte(n >> (8 * k))
	}
	bw.Write(lenBuf[:])
	bw.Write(hdr)
	for _, o := range outs {
		err := o.t.RawBytes(func(data []byte) error {
			if uint64(len(data)) != o.size {
				return fmt.Errorf("%q: %d bytes, %d expected", o.name, len(data), o.size)
			}
			_, err := bw.Write(data)
			return err
		})
		if err != nil {
			return fmt.Errorf("%q: %w", o.name, err)
		}
	}
	return bw.Flush()
}

// header returns the JSON header as serde_json writes it, padded with
// spaces to a multiple of 8 bytes.
func header(outs []out, metadata map[string]string) ([]byte, error) {
	b := []byte{'{'}
	if metadata != nil {
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fmt.Errorf("metadata %q: not UTF-8", k)
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, `"__metadata__":{`...)
		for k, key := range keys {
			if k > 0 {
				b = append(b, ',')
			}
			b = appendString(b, key)
			b = append(b, ':')
			b = appendString(b, metadata[key])
		}
		b = append(b, '}')
	}
	var at uint64
	for k, o := range outs {
		if k > 0 || metadata != nil {
			b = append(b, ',')
		}
		b = appendString(b, o.name)
		b = append(b, `:{"dtype":"`...)
		b = append(b, o.dtype...)
		b = append(b, `","shape":[`...)
		for k, d := range o.shape {
			if k > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendUint(b, at, 10)
		b = append(b, ',')
		at += o.size
		b = strconv.AppendUint(b, at, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	return b, nil
}

// appendString appends s as a JSON string escaped as serde_json escapes
// it: quote, backslash and control characters only.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for k := 0; k < len(s); k++ {
		c := s[k]
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}
