package audio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// speechRate is the rate the speech recipes read at, which most tests here
// read at too.
const speechRate = 16000

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

// toExtensible rewrites a WAV file whose first chunk is fmt as
// WAVE_FORMAT_EXTENSIBLE, with the old format code as its subformat.
func toExtensible(t *testing.T, b []byte) []byte {
	t.Helper()
	le := binary.LittleEndian
	require.Equal(t, "fmt ", string(b[12:16]))
	n := int(le.Uint32(b[16:20]))
	f := append([]byte(nil), b[20:36]...)
	sub := le.Uint16(f[0:2])
	le.PutUint16(f[0:2], 0xFFFE)
	f = le.AppendUint16(f, 22)                  // cbSize
	f = le.AppendUint16(f, le.Uint16(f[14:16])) // valid bits
	f = le.AppendUint32(f, 0)                   // channel mask
	f = le.AppendUint16(f, sub)                 // subformat GUID: the code, then KSDATAFORMAT_SUBTYPE's tail
	f = append(f, "\x00\x00\x00\x00\x10\x00\x80\x00\x00\xAA\x00\x38\x9B\x71"...)
	out := []byte("RIFF\x00\x00\x00\x00WAVEfmt ")
	out = le.AppendUint32(out, uint32(len(f)))
	out = append(out, f...)
	out = append(out, b[20+n+n%2:]...) // fact, data, ...
	le.PutUint32(out[4:], uint32(len(out)-8))
	return out
}

// sox runs sox, failing the test on error.
func sox(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("sox"); err != nil {
		t.Skip("sox missing: run 'make deps'")
	}
	out, err := exec.Command("sox", append([]string{"-D", "-V1"}, args...)...).CombinedOutput()
	require.NoError(t, err, "sox %s: %s", strings.Join(args, " "), out)
}

// testTone is 0.5·sin(2π·440t) + 0.25·sin(2π·3000t) at rate, n samples.
func testTone(rate, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		s := float64(i) / float64(rate)
		x[i] = 0.5*math.Sin(2*math.Pi*440*s) + 0.25*math.Sin(2*math.Pi*3000*s)
	}
	return x
}

// writeRaw writes float64 samples as a headerless little-endian file.
func writeRaw(t *testing.T, path string, x []float64) {
	t.Helper()
	b := make([]byte, 0, 8*len(x))
	for _, v := range x {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

func TestWAVRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.wav")
	in := []int16{0, 1, -1, 32767, -32768, 1234}
	require.NoError(t, WriteWAV(path, in, speechRate))
	got, err := ReadWAVInt16(path, speechRate)
	require.NoError(t, err)
	require.Equal(t, in, got)
	f, err := ReadWAV(path, speechRate)
	require.NoError(t, err)
	require.Equal(t, float32(-1), f[4])
	require.InDelta(t, 1234.0/32768, f[5], 1e-7)
	info, err := ReadWAVInfo(path)
	require.NoError(t, err)
	require.Equal(t, WAVInfo{SampleRate: 16000, Channels: 1, BitsPerSample: 16, Format: 1, Frames: 6}, info)
	require.Equal(t, in, FloatToInt16(f))
}

// TestReadWAVCorpusFormatBitIdentical: the format `torchfit asr data` writes
// decodes to exactly float32(v)/32768, as before other formats were read.
func TestReadWAVCorpusFormatBitIdentical(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.wav")
	in := make([]int16, 50_000) // more than one read block
	for i := range in {
		in[i] = int16(i*7919 + i*i)
	}
	require.NoError(t, WriteWAV(path, in, speechRate))
	got, err := ReadWAV(path, speechRate)
	require.NoError(t, err)
	require.Len(t, got, len(in))
	for i, v := range in {
		if got[i] != float32(v)/32768 {
			t.Fatalf("sample %d: %v, want %v", i, got[i], float32(v)/32768)
		}
	}
}

// TestReadWAVFormats decodes a two-tone signal written by sox in each
// format and rate to the same tone at 16 kHz.
func TestReadWAVFormats(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		rate, ch int
		enc      []string // sox output options
		ext      bool     // rewrite as WAVE_FORMAT_EXTENSIBLE
		format   uint16   // expected format code after parsing
		tol      float64
	}{
		{"8-bit unsigned PCM", 16000, 1, []string{"-b", "8", "-e", "unsigned-integer"}, false, 1, 5e-3},
		{"16-bit PCM", 16000, 1, []string{"-b", "16", "-e", "signed-integer"}, false, 1, 5e-5},
		{"24-bit PCM (sox: extensible)", 16000, 1, []string{"-b", "24", "-e", "signed-integer"}, false, 1, 1e-6},
		{"32-bit PCM (sox: extensible)", 16000, 1, []string{"-b", "32", "-e", "signed-integer"}, false, 1, 1e-6},
		{"32-bit float", 16000, 1, []string{"-b", "32", "-e", "floating-point"}, false, 3, 1e-7},
		{"64-bit float", 16000, 1, []string{"-b", "64", "-e", "floating-point"}, false, 3, 1e-7},
		{"extensible 16-bit PCM", 16000, 1, []string{"-t", "wavpcm", "-b", "16", "-e", "signed-integer"}, true, 1, 5e-5},
		{"extensible 32-bit float", 16000, 1, []string{"-b", "32", "-e", "floating-point"}, true, 3, 1e-7},
		{"extensible 3 channels 24-bit", 16000, 3, []string{"-b", "24", "-e", "signed-integer"}, false, 1, 1e-6},
		{"44.1 kHz stereo 16-bit", 44100, 2, []string{"-b", "16", "-e", "signed-integer"}, false, 1, 2e-4},
		{"8 kHz mono 16-bit", 8000, 1, []string{"-b", "16", "-e", "signed-integer"}, false, 1, 2e-4},
		{"48 kHz mono 24-bit (sox: extensible)", 48000, 1, []string{"-b", "24", "-e", "signed-integer"}, false, 1, 2e-4},
		{"22.05 kHz mono float", 22050, 1, []string{"-b", "32", "-e", "floating-point"}, false, 3, 2e-4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := filepath.Join(dir, "tone.f64")
			writeRaw(t, raw, testTone(tc.rate, tc.rate*7/10))
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".wav")
			sox(t, append(append([]string{"-t", "f64", "-r", fmt.Sprint(tc.rate), "-c", "1", raw, "-c", fmt.Sprint(tc.ch)}, tc.enc...), path)...)
			if tc.ext {
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, toExtensible(t, b), 0o644))
			}
			head, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, strings.Contains(tc.name, "extensible"), binary.LittleEndian.Uint16(head[20:22]) == 0xFFFE, "format code in the file")
			info, err := ReadWAVInfo(path)
			require.NoError(t, err)
			require.Equal(t, tc.format, info.Format)
			require.Equal(t, tc.ch, info.Channels)
			got, err := ReadWAV(path, speechRate)
			require.NoError(t, err)
			require.Len(t, got, (tc.rate*7/10*speechRate+tc.rate-1)/tc.rate)
			want := testTone(speechRate, len(got))
			var worst float64
			at := 0
			for i := 200; i < len(got)-200; i++ { // the filter's edges see zeros
				if d := math.Abs(float64(got[i]) - want[i]); d > worst {
					worst, at = d, i
				}
			}
			t.Logf("%s: max |error| %.2e at %d", tc.name, worst, at)
			require.Less(t, worst, tc.tol)
		})
	}
}

// TestReadWAVMixesChannels: channels are averaged.
func TestReadWAVMixesChannels(t *testing.T) {
	le := binary.LittleEndian
	var data []byte
	for _, lr := range [][2]int16{{1000, 3000}, {-32768, -32768}, {32767, -32768}, {-7, 8}} {
		data = le.AppendUint16(data, uint16(lr[0]))
		data = le.AppendUint16(data, uint16(lr[1]))
	}
	path := filepath.Join(t.TempDir(), "st.wav")
	require.NoError(t, os.WriteFile(path, rawWAV(1, 2, 16000, 16, data), 0o644))
	got, err := ReadWAV(path, speechRate)
	require.NoError(t, err)
	require.Equal(t, []float32{2000.0 / 32768, -1, -0.5 / 32768, 0.5 / 32768}, got)
}

func TestReadWAVErrors(t *testing.T) {
	dir := t.TempDir()
	good := rawWAV(1, 1, 16000, 16, make([]byte, 3200))
	nan := rawWAV(3, 1, 16000, 32, binary.LittleEndian.AppendUint32(make([]byte, 400), math.Float32bits(float32(math.NaN()))))
	for _, tc := range []struct {
		name   string
		data   []byte
		want   string
		format bool // errors.Is(err, ErrFormat)
	}{
		{"not riff", []byte("ID3\x03 not a wav file at all"), "not a RIFF/WAVE file", true},
		{"empty file", nil, "not a RIFF/WAVE file", true},
		{"truncated in fmt", good[:30], "truncated fmt chunk", true},
		{"truncated before data", good[:38], "no data chunk", true},
		{"no data", rawWAV(1, 1, 16000, 16, nil)[:36], "no data chunk", true},
		{"empty audio", rawWAV(1, 1, 16000, 16, nil), "no audio samples", true},
		{"a-law", rawWAV(6, 1, 16000, 8, make([]byte, 8)), "format code 6 (A-law); torchfit decodes PCM and IEEE float (convert with: sox", true},
		{"16-bit float", rawWAV(3, 1, 16000, 16, make([]byte, 8)), "16-bit float", true},
		{"7-bit PCM", rawWAV(1, 1, 16000, 7, make([]byte, 8)), "7-bit PCM", true},
		{"12-bit PCM", rawWAV(1, 1, 16000, 12, make([]byte, 8)), "12-bit PCM", true},
		{"40-bit PCM", rawWAV(1, 1, 16000, 40, make([]byte, 10)), "40-bit PCM", true},
		{"zero channels", rawWAV(1, 0, 16000, 16, make([]byte, 8)), "0 channels", true},
		{"500 Hz", rawWAV(1, 1, 500, 16, make([]byte, 8)), "sample rate 500 Hz outside", true},
		{"ratio needs huge tables", rawWAV(1, 1, 96001, 16, make([]byte, 8)), "MiB of filter tables", true},
		{"NaN sample", nan, "frame 100: non-finite sample NaN", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "x.wav")
			require.NoError(t, os.WriteFile(path, tc.data, 0o644))
			_, err := ReadWAV(path, speechRate)
			require.ErrorContains(t, err, tc.want)
			var ae *Error
			require.ErrorAs(t, err, &ae)
			require.Equal(t, path, ae.Path)
			require.True(t, strings.HasPrefix(err.Error(), path+": "), err.Error())
			require.Equal(t, tc.format, errors.Is(err, ErrFormat))
			require.NotContains(t, err.Error(), "\n")
		})
	}
	for name, path := range map[string]string{"missing": filepath.Join(dir, "missing.wav"), "directory": dir} {
		_, err := ReadWAV(path, speechRate)
		var ae *Error
		require.ErrorAs(t, err, &ae, name)
		require.Equal(t, path+": ", err.Error()[:len(path)+2], name)
		if name == "missing" {
			require.ErrorIs(t, err, fs.ErrNotExist)
			require.Equal(t, path+": no such file or directory", err.Error())
		}
	}
	// ReadWAVInt16 reads mono 16-bit PCM at the rate asked for only.
	path := filepath.Join(dir, "f.wav")
	require.NoError(t, os.WriteFile(path, rawWAV(3, 1, 16000, 32, make([]byte, 8)), 0o644))
	_, err := ReadWAVInt16(path, speechRate)
	require.ErrorIs(t, err, ErrFormat)
	require.ErrorContains(t, err, "want 16 kHz mono 16-bit PCM (convert with: sox "+path+" -r 16000 -c 1 -b 16 -e signed-integer out.wav)")
}

// TestReadWAVAtAnotherRate: files are read at the rate asked for (the
// music recipe's 22.05 kHz): a file at that rate as it is, channels
// averaged exactly; another rate resampled to it.
func TestReadWAVAtAnotherRate(t *testing.T) {
	const rate = 22050
	dir := t.TempDir()
	le := binary.LittleEndian
	var data []byte
	frames := [][2]int16{{0, 0}, {16384, 16384}, {-32768, 32767}, {32767, 32767}, {100, -7}}
	for _, lr := range frames {
		data = le.AppendUint16(data, uint16(lr[0]))
		data = le.AppendUint16(data, uint16(lr[1]))
	}
	path := filepath.Join(dir, "st.wav")
	require.NoError(t, os.WriteFile(path, rawWAV(1, 2, rate, 16, data), 0o644))
	got, err := ReadWAV(path, rate)
	require.NoError(t, err)
	for i, lr := range frames {
		require.Equal(t, float32(int32(lr[0])+int32(lr[1]))/float32(2*32768), got[i], "frame %d", i)
	}
	_, err = ReadWAVInt16(path, rate)
	require.ErrorIs(t, err, ErrFormat)
	require.ErrorContains(t, err, "want 22.05 kHz mono 16-bit PCM (convert with: sox "+path+" -r 22050 -c 1")

	other := filepath.Join(dir, "16k.wav")
	require.NoError(t, WriteWAV(other, make([]int16, 1600), speechRate))
	got, err = ReadWAV(other, rate)
	require.NoError(t, err)
	require.Len(t, got, (1600*rate+speechRate-1)/speechRate)
}

func TestReadWAVStreamedSize(t *testing.T) {
	// espeak-ng writing to a pipe leaves 0xFFFFFFFF sizes: clamp to the file.
	b := rawWAV(1, 1, 16000, 16, []byte{1, 0, 2, 0})
	binary.LittleEndian.PutUint32(b[40:], 0xFFFFFFFF)
	path := filepath.Join(t.TempDir(), "s.wav")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	got, err := ReadWAVInt16(path, speechRate)
	require.NoError(t, err)
	require.Equal(t, []int16{1, 2}, got)
}

// TestReadWAVHoldsOnlyTheSamples: reading a whole file allocates the output
// samples and fixed-size buffers, not the file's bytes as well.
func TestReadWAVHoldsOnlyTheSamples(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"16 kHz mono 16-bit", []string{"-r", "16000", "-c", "1", "-b", "16"}},
		{"48 kHz stereo float", []string{"-r", "48000", "-c", "2", "-b", "32", "-e", "floating-point"}},
	} {
		path := filepath.Join(dir, "long.wav")
		sox(t, append(append([]string{"-n"}, tc.args...), path, "synth", "60", "pinknoise", "vol", "0.3")...)
		st, err := os.Stat(path)
		require.NoError(t, err)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x, err := ReadWAV(path, speechRate)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		out := int64(4 * len(x))
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s: file %d bytes, samples %d bytes, allocated %d bytes", tc.name, st.Size(), out, alloc)
		require.Less(t, alloc, out+512<<10, "%s: only the samples and fixed buffers", tc.name)
	}
}

// TestReadWAVManyChannels: 300 channels decode (in small blocks) to their mean.
func TestReadWAVManyChannels(t *testing.T) {
	const ch, frames = 300, 5000
	le := binary.LittleEndian
	data := make([]byte, 0, ch*frames*4)
	for i := range frames {
		for c := range ch {
			data = le.AppendUint32(data, math.Float32bits(float32(c%2)*0.5+float32(i%10)/100)) // mean: 0.25 + i%10/100
		}
	}
	path := filepath.Join(t.TempDir(), "many.wav")
	require.NoError(t, os.WriteFile(path, rawWAV(3, ch, 16000, 32, data), 0o644))
	got, err := ReadWAV(path, speechRate)
	require.NoError(t, err)
	require.Len(t, got, frames)
	for i, v := range got {
		require.InDelta(t, 0.25+float64(i%10)/100, v, 1e-6, "frame %d", i)
	}
}
