package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/torch/safetensors"
)

// fuzzFile wraps header as the JSON header of a file whose buffer is 64
// bytes, so mutations of the JSON reach the parser and the range checks.
func fuzzFile(header []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	for k := 0; k < 64; k++ {
		b = append(b, byte(k*37))
	}
	return b
}

// FuzzLoad feeds arbitrary bytes to LoadBytes, both as a whole file and as
// the header of a file with a 64-byte buffer: it must return a file or a
// *FormatError, never panic, crash, allocate more than the input, or leak
// tensors. A loaded file saves again, and what it saves loads back to the
// same bytes.
func FuzzLoad(f *testing.F) {
	for _, ts := range []torch.StateDict{
		{{Name: "w", T: torch.FromSlice([]float32{1, 2, 3, 4}, []int64{2, 2})}},
		{{Name: "a", T: torch.FromSlice([]float32{1, 2}, nil, torch.BFloat16)}, {Name: "b", T: torch.FromSlice([]bool{true}, []int64{})},
			{Name: "c", T: torch.FromSlice([]int64{1, -2}, nil)}, {Name: "d", T: torch.FromSlice([]uint8{}, []int64{0, 4})}},
	} {
		b, err := safetensors.SaveBytes(ts, map[string]string{"format": "pt"})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		n := binary.LittleEndian.Uint64(b)
		f.Add(b[8 : 8+n])
		ptfile.FreeAll(ts)
	}
	// Headers over the 64-byte fuzz buffer.
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}}`))
	f.Add([]byte(`{"__metadata__":{"k":"v"},"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"F16","shape":[2,12],"data_offsets":[16,64]}}`))
	f.Add([]byte(`{"a":{"dtype":"BOOL","shape":[],"data_offsets":[63,64]},"b":{"dtype":"I8","shape":[63],"data_offsets":[0,63]},"c":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		before := torch.LiveTensors()
		for _, in := range [][]byte{data, fuzzFile(data)} {
			file, err := safetensors.LoadBytes(in)
			if err != nil {
				continue
			}
			var size int64
			for _, nt := range file.Tensors {
				size += nt.T.NBytes()
			}
			if size > int64(len(in)) {
				t.Fatalf("loaded %d bytes of tensors from a %d-byte file", size, len(in))
			}
			saved, err := safetensors.SaveBytes(file.Tensors, file.Metadata)
			if err != nil {
				t.Fatalf("a loaded file does not save: %v", err)
			}
			file.Free()
			again, err := safetensors.LoadBytes(saved)
			if err != nil {
				t.Fatalf("a saved file does not load: %v", err)
			}
			resaved, err := safetensors.SaveBytes(again.Tensors, again.Metadata)
			again.Free()
			if err != nil || !bytes.Equal(saved, resaved) {
				t.Fatalf("save, load, save changed the file (%v)", err)
			}
		}
		if after := torch.LiveTensors(); after > before {
			t.Fatalf("leaked %d tensors", after-before)
		}
	})
}
