package audio

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"

	"github.com/torchfit/torchfit/atomicfile"
)

// MinRate and MaxRate bound the sample rates OpenWAV accepts.
const (
	MinRate = 1000
	MaxRate = 384000
)

// ErrFormat is wrapped by every error about the contents of a WAV file:
// not a RIFF/WAVE file, a truncated or inconsistent header, an encoding
// this package does not decode, no audio samples, or non-finite float
// samples.
var ErrFormat = errors.New("unsupported WAV file")

// Error is an audio file that cannot be used as input: missing or
// unreadable (errors.Is(err, fs.ErrNotExist) and the like), its contents
// (errors.Is(err, ErrFormat)), or, when a caller says so, too short. Every
// error OpenWAV, ReadWAV, ReadWAVInt16, ReadWAVInfo and a WAVReader return
// about a file is one; its message names the file and is meant for a
// command line as it is.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return e.Path + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// UserError marks it as the user's input (a command line exits 2).
func (*Error) UserError() {}

// formatError is a message that wraps ErrFormat without repeating it.
type formatError string

func (e formatError) Error() string        { return string(e) }
func (e formatError) Is(target error) bool { return target == ErrFormat }

func badWAV(format string, args ...any) error { return formatError(fmt.Sprintf(format, args...)) }

// fileErr wraps err as an *Error for path; an *fs.PathError is reduced to
// its cause (the path is in the message already).
func fileErr(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &Error{Path: path, Err: err}
}

// WAVInfo describes a WAV file's format.
type WAVInfo struct {
	SampleRate    int
	Channels      int
	BitsPerSample int
	Format        uint16 // 1 PCM, 3 IEEE float, 0xFFFE extensible (resolved to its subformat)
	Frames        int    // samples per channel
}

// Duration is the length in seconds.
func (w WAVInfo) Duration() float64 {
	if w.SampleRate == 0 {
		return 0
	}
	return float64(w.Frames) / float64(w.SampleRate)
}

// IsPCM16Mono reports whether the file is mono 16-bit PCM at rate.
func (w WAVInfo) IsPCM16Mono(rate int) bool {
	return w.Format == 1 && w.SampleRate == rate && w.Channels == 1 && w.BitsPerSample == 16
}

// wavHeader is a parsed header: the format and where the samples are.
type wavHeader struct {
	info    WAVInfo
	dataOff int64 // offset of the data chunk's body
	dataLen int64 // its length in bytes, clamped to the file
}

// maxFmtChunk bounds the fmt chunk read into memory (it is 16, 18 or 40
// bytes in practice).
const maxFmtChunk = 1 << 16

// readHeader reads the RIFF header and chunk headers up to the data chunk,
// seeking over other chunks. Sizes written as 0xFFFFFFFF or too large
// (streamed WAVs) are clamped to the bytes present.
func readHeader(r io.ReadSeeker, size int64) (wavHeader, error) {
	var h wavHeader
	var riff [12]byte
	if n, _ := io.ReadFull(r, riff[:]); n < 12 || string(riff[0:4]) != "RIFF" || string(riff[8:12]) != "WAVE" {
		return h, badWAV("not a RIFF/WAVE file")
	}
	gotFmt := false
	le := binary.LittleEndian
	for p := int64(12); p+8 <= size; {
		var ch [8]byte
		if _, err := r.Seek(p, io.SeekStart); err != nil {
			return h, err
		}
		if _, err := io.ReadFull(r, ch[:]); err != nil {
			return h, err
		}
		id := string(ch[0:4])
		body := p + 8
		n := int64(le.Uint32(ch[4:8]))
		if body+n > size {
			n = size - body
		}
		switch id {
		case "fmt ":
			if n < 16 {
				return h, badWAV("truncated fmt chunk (%d bytes, need 16)", n)
			}
			f := make([]byte, min(n, maxFmtChunk))
			if _, err := io.ReadFull(r, f); err != nil {
				return h, err
			}
			in := &h.info
			in.Format = le.Uint16(f[0:2])
			in.Channels = int(le.Uint16(f[2:4]))
			in.SampleRate = int(le.Uint32(f[4:8]))
			in.BitsPerSample = int(le.Uint16(f[14:16]))
			if in.Format == 0xFFFE {
				if len(f) < 26 {
					return h, badWAV("truncated WAVE_FORMAT_EXTENSIBLE fmt chunk (%d bytes, need 40)", len(f))
				}
				in.Format = le.Uint16(f[24:26]) // the subformat GUID's first bytes
			}
			gotFmt = true
		case "data":
			if !gotFmt {
				return h, badWAV("data chunk before fmt chunk")
			}
			h.dataOff, h.dataLen = body, n
			if fb := int64(h.info.Channels * ((h.info.BitsPerSample + 7) / 8)); fb > 0 {
				h.info.Frames = int(n / fb)
			}
			return h, nil
		}
		p = body + n + n%2
	}
	if !gotFmt {
		return h, badWAV("no fmt chunk (truncated header?)")
	}
	return h, badWAV("no data chunk (truncated header?)")
}

// formatName names WAV format codes for error messages.
func formatName(code uint16) string {
	switch code {
	case 2:
		return "ADPCM"
	case 6:
		return "A-law"
	case 7:
		return "µ-law"
	case 0x11:
		return "IMA ADPCM"
	case 0x55:
		return "MP3"
	}
	return "unknown"
}

// checkDecodable returns an error for a format OpenWAV does not decode.
func checkDecodable(path string, in WAVInfo) error {
	fix := fmt.Sprintf("convert with: sox %s -e signed-integer -b 16 out.wav", path)
	switch {
	case in.Format != 1 && in.Format != 3:
		return badWAV("WAV format code %d (%s); torchfit decodes PCM and IEEE float (%s)", in.Format, formatName(in.Format), fix)
	case in.Format == 1 && (in.BitsPerSample < 8 || in.BitsPerSample > 32 || in.BitsPerSample%8 != 0):
		return badWAV("%d-bit PCM; torchfit decodes 8-, 16-, 24- and 32-bit PCM (%s)", in.BitsPerSample, fix)
	case in.Format == 3 && in.BitsPerSample != 32 && in.BitsPerSample != 64:
		return badWAV("%d-bit float; torchfit decodes 32- and 64-bit float (%s)", in.BitsPerSample, fix)
	case in.Channels < 1:
		return badWAV("0 channels in the fmt chunk")
	case in.SampleRate < MinRate || in.SampleRate > MaxRate:
		return badWAV("sample rate %d Hz outside %d-%d Hz", in.SampleRate, MinRate, MaxRate)
	case in.Frames == 0:
		return badWAV("no audio samples (empty data chunk)")
	}
	return nil
}

// ReadWAVInfo parses a WAV file's header (any format); it reads the chunk
// headers only, not the samples.
func ReadWAVInfo(path string) (WAVInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return WAVInfo{}, fileErr(path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return WAVInfo{}, fileErr(path, err)
	}
	h, err := readHeader(f, st.Size())
	if err != nil {
		return WAVInfo{}, fileErr(path, err)
	}
	return h.info, nil
}

// WAVReader streams a WAV file's audio as mono float32 samples at the
// rate asked of OpenWAV, decoding as it reads: PCM of 8 (unsigned), 16, 24 or 32
// bits, 32- and 64-bit IEEE float, and WAVE_FORMAT_EXTENSIBLE with those
// subformats; channels are averaged, and a file at another rate in
// [MinRate, MaxRate] is resampled (see Resampler; NewResampler refuses a
// few pathological ratios). PCM is scaled to [-1, 1) by 2^(bits-1) of the
// container (8-bit: (v-128)/128). It holds a 64 KiB read buffer, a block
// of decoded frames and the resampler's filter state, never the whole
// file.
type WAVReader struct {
	Info WAVInfo // the file's format

	path   string
	f      *os.File
	r      *bufio.Reader
	left   int // frames not yet read
	frame  int // bytes per frame
	cont   int // bytes per sample
	raw    []byte
	block  []float32 // decoded source-rate frames
	rs     *Resampler
	total  int // output samples in all
	served int
	frameN int // frames decoded so far (for messages)
}

// readBlock is the most source frames decoded at a time, and maxRawBlock
// the most bytes read for them (files with many channels).
const (
	readBlock   = 4096
	maxRawBlock = 256 << 10
)

// OpenWAV opens a WAV file for streaming at rate samples a second.
// Every error is an *Error.
func OpenWAV(path string, rate int) (*WAVReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileErr(path, err)
	}
	w, err := openWAV(path, f, rate)
	if err != nil {
		f.Close()
		return nil, fileErr(path, err)
	}
	return w, nil
}

func openWAV(path string, f *os.File, rate int) (*WAVReader, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, errors.New("is a directory")
	}
	h, err := readHeader(f, st.Size())
	if err != nil {
		return nil, err
	}
	if err := checkDecodable(path, h.info); err != nil {
		return nil, err
	}
	if _, err := f.Seek(h.dataOff, io.SeekStart); err != nil {
		return nil, err
	}
	w := &WAVReader{Info: h.info, path: path, f: f, r: bufio.NewReaderSize(f, 64<<10), left: h.info.Frames}
	w.cont = (h.info.BitsPerSample + 7) / 8
	w.frame = w.cont * h.info.Channels
	w.total = h.info.Frames
	if h.info.SampleRate != rate {
		if w.rs, err = NewResampler(h.info.SampleRate, rate); err != nil {
			return nil, badWAV("%v (convert first with: sox %s -r %d out.wav)", err, path, rate)
		}
		w.total = w.rs.OutputLen(h.info.Frames)
	}
	return w, nil
}

// Len is the number of samples the reader yields in all: Frames, or
// ⌈Frames·rate/Info.SampleRate⌉ when resampled.
func (w *WAVReader) Len() int { return w.total }

// Close closes the file.
func (w *WAVReader) Close() error { return w.f.Close() }

// Read fills dst with the next mono samples. It returns fewer than
// len(dst) only with an error: io.EOF once all Len samples have been
// read, any other error an *Error.
func (w *WAVReader) Read(dst []float32) (int, error) {
	n := 0
	for n < len(dst) && w.served < w.total {
		if w.rs == nil {
			k, err := w.decode(dst[n:])
			if err != nil {
				return n, fileErr(w.path, err)
			}
			n += k
			w.served += k
			if k == 0 {
				break // cannot happen: Len is Frames
			}
			continue
		}
		k := w.rs.Drain(dst[n:])
		n += k
		w.served += k
		if k > 0 {
			continue
		}
		if w.left == 0 {
			if w.rs.flushed {
				break // cannot happen: Len counts what the flushed resampler yields
			}
			w.rs.Flush()
			continue
		}
		if w.block == nil {
			w.block = make([]float32, readBlock)
		}
		m, err := w.decode(w.block)
		if err != nil {
			return n, fileErr(w.path, err)
		}
		w.rs.Write(w.block[:m])
	}
	if n < len(dst) {
		return n, io.EOF
	}
	return n, nil
}

// decode reads and decodes up to len(dst) source frames (mono), at most
// readBlock frames or maxRawBlock bytes (but one frame) at a time.
func (w *WAVReader) decode(dst []float32) (int, error) {
	n := min(len(dst), w.left, readBlock, max(1, maxRawBlock/w.frame))
	if n == 0 {
		return 0, nil
	}
	need := n * w.frame
	if cap(w.raw) < need {
		w.raw = make([]byte, need)
	}
	raw := w.raw[:need]
	if _, err := io.ReadFull(w.r, raw); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, badWAV("file ends inside the data chunk (truncated while being read?)")
		}
		return 0, err
	}
	if err := decodeFrames(dst[:n], raw, w.Info.Format, w.cont, w.Info.Channels); err != nil {
		return 0, badWAV("frame %d: %v", w.frameN+badFrame(err), err)
	}
	w.left -= n
	w.frameN += n
	return n, nil
}

// nonFinite is a NaN or infinite float sample at frame index At.
type nonFinite struct {
	At int
	V  float64
}

func (e *nonFinite) Error() string { return fmt.Sprintf("non-finite sample %v", e.V) }

func badFrame(err error) int {
	var nf *nonFinite
	if errors.As(err, &nf) {
		return nf.At
	}
	return 0
}

// decodeFrames converts interleaved little-endian samples to mono float32:
// the one channel as is, or the mean of the channels.
func decodeFrames(dst []float32, raw []byte, format uint16, cont, channels int) error {
	le := binary.LittleEndian
	if channels == 1 && format == 1 && cont == 2 { // mono 16-bit PCM: v/32768 exactly
		for i := range dst {
			dst[i] = float32(int16(le.Uint16(raw[2*i:]))) / 32768
		}
		return nil
	}
	var sample func(b []byte) float64
	switch {
	case format == 3 && cont == 4:
		sample = func(b []byte) float64 { return float64(math.Float32frombits(le.Uint32(b))) }
	case format == 3:
		sample = func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }
	case cont == 1:
		sample = func(b []byte) float64 { return (float64(b[0]) - 128) / 128 }
	case cont == 2:
		sample = func(b []byte) float64 { return float64(int16(le.Uint16(b))) / (1 << 15) }
	case cont == 3:
		sample = func(b []byte) float64 {
			return float64(int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24)>>8) / (1 << 23)
		}
	default:
		sample = func(b []byte) float64 { return float64(int32(le.Uint32(b))) / (1 << 31) }
	}
	frame := cont * channels
	for i := range dst {
		b := raw[i*frame : (i+1)*frame]
		var s float64
		for c := 0; c < channels; c++ {
			s += sample(b[c*cont:])
		}
		if format == 3 && (math.IsNaN(s) || math.IsInf(s, 0)) {
			return &nonFinite{At: i, V: s}
		}
		if channels > 1 {
			s /= float64(channels)
		}
		dst[i] = float32(s)
	}
	return nil
}

// ReadWAV reads a whole WAV file as mono float32 samples at rate (see
// WAVReader for the formats). It holds the output samples and the reader's
// fixed buffers, not the file's bytes. A mono 16-bit file at rate decodes
// to v/32768 exactly. Every error is an *Error.
func ReadWAV(path string, rate int) ([]float32, error) {
	r, err := OpenWAV(path, rate)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := make([]float32, r.Len())
	n, err := r.Read(out)
	if errors.Is(err, io.EOF) {
		return nil, fileErr(path, fmt.Errorf("decoded %d of %d samples", n, len(out)))
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadWAVInt16 reads the raw samples of a mono 16-bit PCM WAV file at rate.
// Any other format is an *Error wrapping ErrFormat whose message says how
// to convert the file with sox.
func ReadWAVInt16(path string, rate int) ([]int16, error) {
	r, err := OpenWAV(path, rate)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if !r.Info.IsPCM16Mono(rate) {
		return nil, fileErr(path, badWAV("%d Hz, %d channel(s), %d-bit format %d; want %s kHz mono 16-bit PCM (convert with: sox %s -r %d -c 1 -b 16 -e signed-integer out.wav)",
			r.Info.SampleRate, r.Info.Channels, r.Info.BitsPerSample, r.Info.Format, strconv.FormatFloat(float64(rate)/1000, 'f', -1, 64), path, rate))
	}
	out := make([]int16, r.Info.Frames)
	raw := make([]byte, 2*readBlock)
	for p := 0; p < len(out); {
		n := min(len(out)-p, readBlock)
		if _, err := io.ReadFull(r.r, raw[:2*n]); err != nil {
			return nil, fileErr(path, badWAV("file ends inside the data chunk (truncated while being read?)"))
		}
		for i := range n {
			out[p+i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		p += n
	}
	return out, nil
}

// EncodeWAV returns a mono 16-bit PCM WAV file.
func EncodeWAV(samples []int16, rate int) []byte {
	var buf bytes.Buffer
	n := len(samples) * 2
	buf.Grow(44 + n)
	le := binary.LittleEndian
	buf.WriteString("RIFF")
	binary.Write(&buf, le, uint32(36+n))
	buf.WriteString("WAVEfmt ")
	binary.Write(&buf, le, uint32(16))
	binary.Write(&buf, le, uint16(1)) // PCM
	binary.Write(&buf, le, uint16(1)) // mono
	binary.Write(&buf, le, uint32(rate))
	binary.Write(&buf, le, uint32(rate*2))
	binary.Write(&buf, le, uint16(2))
	binary.Write(&buf, le, uint16(16))
	buf.WriteString("data")
	binary.Write(&buf, le, uint32(n))
	binary.Write(&buf, le, samples)
	return buf.Bytes()
}

// WriteWAV writes samples as a mono 16-bit PCM WAV file atomically: a
// temporary file in the same directory, renamed into place.
func WriteWAV(path string, samples []int16, rate int) error {
	return atomicfile.WriteFile(path, EncodeWAV(samples, rate))
}

// FloatToInt16 converts [-1, 1] floats to 16-bit samples, clipping.
func FloatToInt16(x []float32) []int16 {
	out := make([]int16, len(x))
	for i, v := range x {
		s := math.Round(float64(v) * 32768)
		out[i] = int16(max(-32768, min(32767, s)))
	}
	return out
}
