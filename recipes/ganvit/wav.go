package ganvit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// SampleRate is the clips' rate: the seed's 22.05 kHz (librosa's default).
const SampleRate = 22050

// ErrBadClip marks a clip file that cannot be decoded (errors.Is).
var ErrBadClip = errors.New("bad clip")

// ClipError is a clip that cannot be read: missing, not a RIFF/WAVE file,
// truncated, or in a format the recipe does not decode. A command line
// reports it in one line with exit status 2.
type ClipError struct {
	Path string
	Err  error
}

func (e *ClipError) Error() string { return "clip " + e.Path + ": " + e.Err.Error() }
func (e *ClipError) Unwrap() error { return e.Err }

// UserError marks it as the user's input.
func (*ClipError) UserError() {}

type clipFormatError string

func (e clipFormatError) Error() string        { return string(e) }
func (e clipFormatError) Is(target error) bool { return target == ErrBadClip }

func badClip(format string, args ...any) error { return clipFormatError(fmt.Sprintf(format, args...)) }

// ReadClip reads a clip: a 16-bit PCM WAV file at 22.05 kHz, mono or with
// channels to average (what `ganvit data` writes). Anything else is a
// *ClipError wrapping ErrBadClip that says how to convert it with sox.
func ReadClip(path string) ([]float32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &ClipError{path, err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &ClipError{path, err}
	}
	x, err := decodeWAV(f, st.Size())
	if err != nil {
		return nil, &ClipError{path, err}
	}
	return x, nil
}

// decodeWAV reads a 16-bit PCM WAV of size bytes.
func decodeWAV(r io.ReaderAt, size int64) ([]float32, error) {
	convert := fmt.Sprintf("(convert with: sox in.wav -r %d -b 16 -e signed-integer out.wav)", SampleRate)
	var hdr [12]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return nil, badClip("not a WAV file: %d bytes, shorter than a RIFF header", size)
	}
	if string(hdr[0:4]) != "RIFF" || string(hdr[8:12]) != "WAVE" {
		return nil, badClip("not a RIFF/WAVE file")
	}
	var (
		haveFmt            bool
		channels, bits     uint16
		format             uint16
		rate               uint32
		dataOff, dataBytes int64 = -1, 0
	)
	for off := int64(12); off+8 <= size; {
		var ch [8]byte
		if _, err := r.ReadAt(ch[:], off); err != nil {
			return nil, badClip("truncated chunk header at byte %d", off)
		}
		id := string(ch[0:4])
		n := int64(binary.LittleEndian.Uint32(ch[4:8]))
		body := off + 8
		switch id {
		case "fmt ":
			if n < 16 || body+16 > size {
				return nil, badClip("truncated fmt chunk")
			}
			var fm [16]byte
			if _, err := r.ReadAt(fm[:], body); err != nil {
				return nil, badClip("truncated fmt chunk")
			}
			format = binary.LittleEndian.Uint16(fm[0:2])
			channels = binary.LittleEndian.Uint16(fm[2:4])
			rate = binary.LittleEndian.Uint32(fm[4:8])
			bits = binary.LittleEndian.Uint16(fm[14:16])
			if format == 0xFFFE && n >= 40 { // WAVE_FORMAT_EXTENSIBLE: the subformat's code
				var sub [2]byte
				if _, err := r.ReadAt(sub[:], body+24); err == nil {
					format = binary.LittleEndian.Uint16(sub[:])
				}
			}
			haveFmt = true
		case "data":
			dataOff, dataBytes = body, n
			if body+n > size {
				return nil, badClip("truncated: the data chunk declares %d bytes, the file holds %d", n, size-body)
			}
		}
		if dataOff >= 0 && haveFmt {
			break
		}
		off = body + n + n%2
	}
	switch {
	case !haveFmt:
		return nil, badClip("no fmt chunk")
	case dataOff < 0:
		return nil, badClip("no data chunk")
	case format != 1 || bits != 16:
		return nil, badClip("format %d with %d-bit samples; want 16-bit PCM %s", format, bits, convert)
	case channels == 0:
		return nil, badClip("0 channels")
	case rate != SampleRate:
		return nil, badClip("sample rate %d Hz; want %d %s", rate, SampleRate, convert)
	}
	frame := int64(channels) * 2
	n := dataBytes / frame
	if n == 0 {
		return nil, badClip("no samples")
	}
	raw := make([]byte, n*frame)
	if _, err := r.ReadAt(raw, dataOff); err != nil {
		return nil, badClip("truncated data: %v", err)
	}
	out := make([]float32, n)
	c := int(channels)
	for i := range out {
		var s int32
		for k := 0; k < c; k++ {
			s += int32(int16(binary.LittleEndian.Uint16(raw[(i*c+k)*2:])))
		}
		out[i] = float32(s) / float32(32768*c)
	}
	return out, nil
}

// encodeWAV returns a 16-bit PCM mono WAV file of samples at rate.
func encodeWAV(samples []int16, rate int) []byte {
	b := make([]byte, 44+2*len(samples))
	copy(b[0:], "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+2*len(samples)))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1)
	binary.LittleEndian.PutUint16(b[22:], 1)
	binary.LittleEndian.PutUint32(b[24:], uint32(rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(rate*2))
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(2*len(samples)))
	for i, s := range samples {
		binary.LittleEndian.PutUint16(b[44+2*i:], uint16(s))
	}
	return b
}
