package asr

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// SampleRate is the rate torchfit's ASR recipe works at.
const SampleRate = 16000

// ErrWAVFormat is wrapped by every error about a WAV file that is readable
// but not 16 kHz mono 16-bit PCM, or not a WAV file at all.
var ErrWAVFormat = errors.New("unsupported WAV format")

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

type wavFile struct {
	info WAVInfo
	data []byte
}

// parseWAV reads the RIFF header and the data chunk. Sizes written as
// 0xFFFFFFFF or too large (streamed WAVs) are clamped to the bytes present.
func parseWAV(b []byte) (wavFile, error) {
	var w wavFile
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return w, fmt.Errorf("not a RIFF/WAVE file: %w", ErrWAVFormat)
	}
	gotFmt := false
	for p := 12; p+8 <= len(b); {
		id := string(b[p : p+4])
		size := int(binary.LittleEndian.Uint32(b[p+4 : p+8]))
		body := p + 8
		if size < 0 || body+size > len(b) {
			size = len(b) - body
		}
		switch id {
		case "fmt ":
			if size < 16 {
				return w, fmt.Errorf("fmt chunk of %d bytes: %w", size, ErrWAVFormat)
			}
			f := b[body : body+size]
			w.info.Format = binary.LittleEndian.Uint16(f[0:2])
			w.info.Channels = int(binary.LittleEndian.Uint16(f[2:4]))
			w.info.SampleRate = int(binary.LittleEndian.Uint32(f[4:8]))
			w.info.BitsPerSample = int(binary.LittleEndian.Uint16(f[14:16]))
			if w.info.Format == 0xFFFE && size >= 26 {
				w.info.Format = binary.LittleEndian.Uint16(f[24:26]) // subformat GUID's first bytes
			}
			gotFmt = true
		case "data":
			if !gotFmt {
				return w, fmt.Errorf("data chunk before fmt chunk: %w", ErrWAVFormat)
			}
			w.data = b[body : body+size]
			if bps := w.info.Channels * w.info.BitsPerSample / 8; bps > 0 {
				w.info.Frames = len(w.data) / bps
			}
			return w, nil
		}
		p = body + size + size%2
	}
	if !gotFmt {
		return w, fmt.Errorf("no fmt chunk: %w", ErrWAVFormat)
	}
	return w, fmt.Errorf("no data chunk: %w", ErrWAVFormat)
}

// FormatError is a WAV file in a format other than 16 kHz mono 16-bit PCM.
// Its message is meant for the command line as it is; errors.Is(err,
// ErrWAVFormat) holds.
type FormatError struct {
	Path string
	Info WAVInfo
	msg  string
}

func (e *FormatError) Error() string { return e.msg }

// Unwrap returns ErrWAVFormat.
func (e *FormatError) Unwrap() error { return ErrWAVFormat }

// checkFormat returns the user-facing error for anything but 16 kHz mono
// 16-bit PCM, naming the file and the sox command that fixes it, e.g.
// "a.wav is 22050 Hz; torchfit asr expects 16 kHz mono (resample with: sox
// a.wav -r 16000 -c 1 out.wav)".
func checkFormat(path string, in WAVInfo) error {
	fix := fmt.Sprintf("torchfit asr expects 16 kHz mono (resample with: sox %s -r 16000 -c 1 out.wav)", path)
	var msg string
	switch {
	case in.Format != 1 && in.Format != 3:
		msg = fmt.Sprintf("%s has WAV format code %d (not PCM); %s", path, in.Format, fix)
	case in.SampleRate != SampleRate:
		msg = fmt.Sprintf("%s is %d Hz; %s", path, in.SampleRate, fix)
	case in.Channels != 1:
		msg = fmt.Sprintf("%s has %d channels; %s", path, in.Channels, fix)
	case in.Format != 1 || in.BitsPerSample != 16:
		kind := "PCM"
		if in.Format == 3 {
			kind = "float"
		}
		msg = fmt.Sprintf("%s is %d-bit %s; torchfit asr expects 16-bit PCM (convert with: sox %s -r 16000 -c 1 -b 16 -e signed-integer out.wav)",
			path, in.BitsPerSample, kind, path)
	default:
		return nil
	}
	return &FormatError{Path: path, Info: in, msg: msg}
}

// ReadWAVInfo parses a WAV file's header (any format) and checks that its
// data chunk is present.
func ReadWAVInfo(path string) (WAVInfo, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return WAVInfo{}, fmt.Errorf("read wav: %w", err)
	}
	w, err := parseWAV(b)
	if err != nil {
		return WAVInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	return w.info, nil
}

// ReadWAV reads a 16 kHz mono 16-bit PCM WAV file as float32 samples in
// [-1, 1). Any other format is an error (wrapping ErrWAVFormat) whose message
// says how to convert the file with sox.
func ReadWAV(path string) ([]float32, error) {
	raw, err := ReadWAVInt16(path)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(raw))
	for i, v := range raw {
		out[i] = float32(v) / 32768
	}
	return out, nil
}

// ReadWAVInt16 is ReadWAV returning raw 16-bit samples.
func ReadWAVInt16(path string) ([]int16, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read wav: %w", err)
	}
	w, err := parseWAV(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkFormat(path, w.info); err != nil {
		return nil, err
	}
	out := make([]int16, len(w.data)/2)
	for i := range out {
		out[i] = int16(binary.LittleEndian.Uint16(w.data[2*i:]))
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

// WriteWAV writes samples as a mono 16-bit PCM WAV file atomically (a
// temporary file renamed into place).
func WriteWAV(path string, samples []int16, rate int) error {
	return writeAtomic(path, EncodeWAV(samples, rate))
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

func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	if _, err = f.Write(data); err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
