package asr

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// rawWAV builds a WAV header + data of the given format.
func rawWAV(format uint16, channels, rate, bits int, data []byte) []byte {
	le := binary.LittleEndian
	b := []byte("RIFF\x00\x00\x00\x00WAVEfmt ")
	b = le.AppendUint32(b, 16)
	b = le.AppendUint16(b, format)
	b = le.AppendUint16(b, uint16(channels))
	b = le.AppendUint32(b, uint32(rate))
	b = le.AppendUint32(b, uint32(rate*channels*bits/8))
	b = le.AppendUint16(b, uint16(channels*bits/8))
	b = le.AppendUint16(b, uint16(bits))
	b = append(b, "data"...)
	b = le.AppendUint32(b, uint32(len(data)))
	b = append(b, data...)
	le.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

func TestWAVRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.wav")
	in := []int16{0, 1, -1, 32767, -32768, 1234}
	require.NoError(t, WriteWAV(path, in, SampleRate))
	got, err := ReadWAVInt16(path)
	require.NoError(t, err)
	require.Equal(t, in, got)
	f, err := ReadWAV(path)
	require.NoError(t, err)
	require.Equal(t, float32(-1), f[4])
	require.InDelta(t, 1234.0/32768, f[5], 1e-7)
	info, err := ReadWAVInfo(path)
	require.NoError(t, err)
	require.Equal(t, WAVInfo{SampleRate: 16000, Channels: 1, BitsPerSample: 16, Format: 1, Frames: 6}, info)
	require.Equal(t, in, FloatToInt16(f))
}

func TestReadWAVErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"22050 Hz", rawWAV(1, 1, 22050, 16, make([]byte, 8)),
			"x.wav is 22050 Hz; torchfit asr expects 16 kHz mono (resample with: sox " + filepath.Join(dir, "x.wav") + " -r 16000 -c 1 out.wav)"},
		{"stereo", rawWAV(1, 2, 16000, 16, make([]byte, 8)), "has 2 channels; torchfit asr expects 16 kHz mono"},
		{"8-bit", rawWAV(1, 1, 16000, 8, make([]byte, 8)), "is 8-bit PCM; torchfit asr expects 16-bit PCM"},
		{"float", rawWAV(3, 1, 16000, 32, make([]byte, 8)), "is 32-bit float"},
		{"a-law", rawWAV(6, 1, 16000, 8, make([]byte, 8)), "format code 6 (not PCM)"},
		{"not riff", []byte("ID3\x03 not a wav file at all"), "not a RIFF/WAVE file"},
		{"no data", rawWAV(1, 1, 16000, 16, nil)[:36], "no data chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.wav")
			require.NoError(t, os.WriteFile(path, tc.data, 0o644))
			_, err := ReadWAV(path)
			require.ErrorContains(t, err, tc.want)
			require.True(t, errors.Is(err, ErrWAVFormat))
			if tc.name == "22050 Hz" {
				require.Equal(t, tc.want, err.Error()[len(dir)+1:], "the whole CLI message")
			}
		})
	}
	_, err := ReadWAV(filepath.Join(dir, "missing.wav"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestReadWAVStreamedSize(t *testing.T) {
	// espeak-ng writing to a pipe leaves 0xFFFFFFFF sizes: clamp to the file.
	b := rawWAV(1, 1, 16000, 16, []byte{1, 0, 2, 0})
	binary.LittleEndian.PutUint32(b[40:], 0xFFFFFFFF)
	path := filepath.Join(t.TempDir(), "s.wav")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	got, err := ReadWAVInt16(path)
	require.NoError(t, err)
	require.Equal(t, []int16{1, 2}, got)
}
