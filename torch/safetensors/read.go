package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/torchfit/torchfit/torch"
)

// info is one tensor entry of the header, checked.
type info struct {
	name       string
	dt         torch.DType
	shape      []int64
	begin, end uint64 // in the byte buffer
}

// decode reads a whole file: the header, checked, then the tensors.
func decode(r io.ReaderAt, size int64) (*File, error) {
	if size < 8 {
		return nil, bad(ErrHeader, "", "%d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, readError("", err)
	}
	n := le64(lenBuf[:])
	switch {
	case n > MaxHeaderSize && bytes.HasPrefix(lenBuf[:], []byte("PK\x03\x04")):
		return nil, bad(ErrHeader, "", "a zip archive, as torch.save writes, not a safetensors file")
	case n > MaxHeaderSize:
		return nil, bad(ErrTooLarge, "", "a header of %d bytes (at most %d)", n, MaxHeaderSize)
	case n > uint64(size-8):
		return nil, bad(ErrHeader, "", "a header of %d bytes in a file of %d", n, size)
	case n < 2:
		return nil, bad(ErrHeader, "", "a header of %d bytes, too short for a JSON object", n)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, readError("", err)
	}
	infos, meta, err := parseHeader(hdr)
	if err != nil {
		return nil, err
	}
	base := 8 + int64(n)
	if err := checkRanges(infos, uint64(size-base)); err != nil {
		return nil, err
	}
	f := &File{Metadata: meta, Tensors: make(torch.StateDict, 0, len(infos))}
	for _, in := range infos {
		t, err := torch.FromReader(io.NewSectionReader(r, base+int64(in.begin), int64(in.end-in.begin)), in.shape, in.dt)
		if err != nil {
			f.Free()
			return nil, readError(in.name, err)
		}
		f.Tensors = append(f.Tensors, torch.Named{Name: in.name, T: t})
	}
	return f, nil
}

// readError reports a failed read: a file shorter than its size says is a
// bad file; anything else (an I/O error, out of memory) is itself.
func readError(tensor string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return bad(ErrRange, tensor, "the file ends early")
	}
	if tensor != "" {
		return fmt.Errorf("tensor %q: %w", tensor, err)
	}
	return err
}

// parseHeader reads the JSON header in order: tensor entries in file order
// and the metadata. It decodes token by token, so a long shape or a deep
// value is refused without being held.
func parseHeader(hdr []byte) ([]info, map[string]string, error) {
	if !utf8.Valid(hdr) {
		return nil, nil, bad(ErrHeader, "", "the header is not UTF-8")
	}
	if t := bytes.TrimLeft(hdr, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, nil, bad(ErrHeader, "", "the header is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	syntax := func(err error) error { return bad(ErrHeader, "", "bad JSON: %v", err) }
	if _, err := dec.Token(); err != nil {
		return nil, nil, syntax(err)
	}
	var (
		infos []info
		meta  map[string]string
		seen  = map[string]bool{}
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, syntax(err)
		}
		name := tok.(string) // object keys are strings
		if seen[name] {
			return nil, nil, bad(ErrHeader, name, "named twice")
		}
		seen[name] = true
		if name == "__metadata__" {
			if meta, err = parseMetadata(dec); err != nil {
				return nil, nil, err
			}
			continue
		}
		in, err := parseEntry(dec, name)
		if err != nil {
			return nil, nil, err
		}
		infos = append(infos, in)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, nil, syntax(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, bad(ErrHeader, "", "more than one JSON value (only spaces may pad the header)")
	}
	return infos, meta, nil
}

// parseMetadata reads "__metadata__": an object of strings, or null.
func parseMetadata(dec *json.Decoder) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, bad(ErrHeader, "", "bad JSON: %v", err)
	}
	if tok == nil {
		return nil, nil
	}
	if tok != json.Delim('{') {
		return nil, bad(ErrHeader, "", "__metadata__ is not an object of strings")
	}
	meta := map[string]string{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, bad(ErrHeader, "", "bad JSON: %v", err)
		}
		v, err := dec.Token()
		if err != nil {
			return nil, bad(ErrHeader, "", "bad JSON: %v", err)
		}
		s, ok := v.(string)
		if !ok {
			return nil, bad(ErrHeader, "", "__metadata__[%q] is not a string", k)
		}
		meta[k.(string)] = s
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad(ErrHeader, "", "bad JSON: %v", err)
	}
	return meta, nil
}

// parseEntry reads one tensor's {"dtype", "shape", "data_offsets"} and
// checks that its shape, dtype and byte range agree. Other keys are
// ignored, as the Rust library ignores them.
func parseEntry(dec *json.Decoder, name string) (info, error) {
	in := info{name: name}
	fail := func(kind error, format string, args ...any) (info, error) {
		return info{}, bad(kind, name, format, args...)
	}
	tok, err := dec.Token()
	if err != nil {
		return fail(ErrHeader, "bad JSON: %v", err)
	}
	if tok != json.Delim('{') {
		return fail(ErrHeader, "its entry is not an object")
	}
	var dtype string
	var shape, offsets []uint64
	var haveShape, haveOffsets bool
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return fail(ErrHeader, "bad JSON: %v", err)
		}
		switch k {
		case "dtype":
			v, err := dec.Token()
			if err != nil {
				return fail(ErrHeader, "bad JSON: %v", err)
			}
			s, ok := v.(string)
			if !ok {
				return fail(ErrHeader, "dtype %v is not a string", v)
			}
			dtype = s
		case "shape":
			if shape, err = uintList(dec, torch.MaxDims); err != nil {
				return fail(errKind(err), "shape: %v", err)
			}
			haveShape = true
		case "data_offsets":
			if offsets, err = uintList(dec, 2); err != nil {
				return fail(errKind(err), "data_offsets: %v", err)
			}
			haveOffsets = true
		default:
			if err := skipValue(dec); err != nil {
				return fail(ErrHeader, "bad JSON: %v", err)
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return fail(ErrHeader, "bad JSON: %v", err)
	}
	switch {
	case dtype == "":
		return fail(ErrHeader, "no dtype")
	case !haveShape:
		return fail(ErrHeader, "no shape")
	case !haveOffsets || len(offsets) != 2:
		return fail(ErrHeader, "data_offsets is not [begin, end]")
	}
	dt, ok := dtypeOf(dtype)
	if !ok {
		if otherDTypes[dtype] {
			return fail(ErrDType, "%s, which torchfit has no tensors of", dtype)
		}
		return fail(ErrDType, "unknown dtype %q", dtype)
	}
	// The element count, with every dimension counted even past a zero,
	// so that libtorch never sees sizes whose product overflows.
	in.dt, in.shape = dt, make([]int64, len(shape))
	numel, product := uint64(1), uint64(1)
	for k, d := range shape {
		if d > math.MaxInt64 {
			return fail(ErrTooLarge, "dimension %d is %d", k, d)
		}
		in.shape[k] = int64(d)
		numel *= d
		if d == 0 {
			continue
		}
		hi, lo := bits.Mul64(product, d)
		if hi != 0 || lo > math.MaxInt64/8 {
			return fail(ErrTooLarge, "shape %v overflows", shape)
		}
		product = lo
	}
	in.begin, in.end = offsets[0], offsets[1]
	if in.begin > in.end {
		return fail(ErrRange, "data_offsets [%d, %d] end before they begin", in.begin, in.end)
	}
	if nb := numel * uint64(dt.Size()); nb != in.end-in.begin {
		return fail(ErrShape, "%s %v is %d bytes, data_offsets [%d, %d] hold %d", dtype, shape, nb, in.begin, in.end, in.end-in.begin)
	}
	return in, nil
}

// errTooLarge marks a number that does not fit 64 bits.
var errTooLarge = errors.New("too large")

func errKind(err error) error {
	if errors.Is(err, errTooLarge) {
		return ErrTooLarge
	}
	return ErrHeader
}

// uintList reads a JSON array of at most max non-negative integers.
func uintList(dec *json.Decoder, max int) ([]uint64, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf("%v is not a list", tok)
	}
	var out []uint64
	for dec.More() {
		if len(out) == max {
			return nil, fmt.Errorf("more than %d numbers", max)
		}
		v, err := dec.Token()
		if err != nil {
			return nil, err
		}
		num, ok := v.(json.Number)
		if !ok {
			return nil, fmt.Errorf("%v is not a number", v)
		}
		u, err := strconv.ParseUint(string(num), 10, 64)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return nil, fmt.Errorf("%s: %w", num, errTooLarge)
			}
			return nil, fmt.Errorf("%s is not a non-negative integer", num)
		}
		out = append(out, u)
	}
	_, err = dec.Token()
	return out, err
}

// skipValue consumes one JSON value.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// checkRanges checks that the tensors' byte ranges tile the buffer of
// size bytes: within it, no overlap, no gap, nothing after the last.
func checkRanges(infos []info, size uint64) error {
	order := make([]int, len(infos))
	for k := range order {
		order[k] = k
		if in := infos[k]; in.end > size {
			return bad(ErrRange, in.name, "data_offsets [%d, %d] past the %d-byte buffer", in.begin, in.end, size)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := infos[order[a]], infos[order[b]]
		return x.begin < y.begin || x.begin == y.begin && x.end < y.end
	})
	at, prev := uint64(0), ""
	for _, k := range order {
		in := infos[k]
		switch {
		case in.begin < at:
			return bad(ErrRange, in.name, "data_offsets [%d, %d] overlap %q's, which end at %d", in.begin, in.end, prev, at)
		case in.begin > at:
			return bad(ErrRange, in.name, "data_offsets [%d, %d] leave a gap after byte %d", in.begin, in.end, at)
		}
		at, prev = in.end, in.name
	}
	if at != size {
		return bad(ErrRange, "", "the tensors hold %d bytes of the %d-byte buffer", at, size)
	}
	return nil
}
