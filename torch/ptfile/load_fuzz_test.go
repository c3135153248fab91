package ptfile_test

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// fuzzZip wraps pkl as data.pkl next to four 64-byte storage records, so
// mutations of the pickle reach the VM (a mutated zip mostly fails its
// checksum first).
func fuzzZip(pkl []byte) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	add := func(name string, data []byte) {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		w.Write(data)
	}
	add("archive/data.pkl", pkl)
	for _, k := range []string{"0", "1", "2", "3"} {
		data := make([]byte, 64)
		for i := range data {
			data[i] = byte(i * 37)
		}
		add("archive/data/"+k, data)
	}
	add("archive/version", []byte("3\n"))
	zw.Close()
	return b.Bytes()
}

// dataPkl extracts data.pkl from a torch.save file (for seeds).
func dataPkl(file []byte) []byte {
	zr, err := zip.NewReader(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		return nil
	}
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/data.pkl") {
			rc, _ := f.Open()
			b, _ := io.ReadAll(rc)
			return b
		}
	}
	return nil
}

// FuzzLoad feeds arbitrary bytes to LoadBytes (and LoadParts), both as a whole file and as
// the data.pkl of a well-formed zip: it must return a value or an error,
// never panic, crash, or leak tensors. Loaded values must save again.
func FuzzLoad(f *testing.F) {
	seeds := []any{
		torch.FromSlice([]float32{1, 2, 3, 4}, []int64{2, 2}),
		ptfile.NewDict("w", torch.FromSlice([]int64{1, 2}, nil), "step", 3, "lr", 0.5, "name", "x",
			"l", []any{true, nil, ptfile.Tuple{1, -70000}}, "k", ptfile.NewDict(0, int64(1)<<40)),
		torch.StateDict{{Name: "a", T: torch.FromSlice([]float32{1, 2}, nil, torch.BFloat16)}, {Name: "b", T: torch.FromSlice([]bool{true}, []int64{})}},
	}
	for _, s := range seeds {
		b, err := ptfile.SaveBytes(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(dataPkl(b))
		ptfile.FreeAll(s)
	}
	// Pickles using the fuzz storages (FloatStorage key "0" holds 16 floats).
	f.Add([]byte("\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x10tQK\x01K\x03K\x02\x86K\x04K\x02\x86\x89}tR."))
	f.Add([]byte("\x80\x02ccollections\nOrderedDict\n)R(X\x01\x00\x00\x00a]K\x01aX\x01\x00\x00\x00bG?\xf0\x00\x00\x00\x00\x00\x00u}X\x09\x00\x00\x00_metadata}sb."))

	path := filepath.Join(f.TempDir(), "fuzz.pt")
	f.Fuzz(func(t *testing.T, data []byte) {
		before := torch.LiveTensors()
		for _, in := range [][]byte{data, fuzzZip(data)} {
			// The same bytes read for two of their parts (LoadParts reads
			// only those parts' storages: the rest must fail or be left
			// alone as cleanly).
			if err := os.WriteFile(path, in, 0o644); err != nil {
				t.Fatal(err)
			}
			d, _, err := ptfile.LoadParts(path, "w", "a")
			if err == nil {
				ptfile.FreeAll(d)
			}
			// What DescribePartsFrom accepts, LoadParts reads.
			if _, _, derr := ptfile.DescribePartsFrom(bytes.NewReader(in), int64(len(in)), "w", "a"); derr == nil && err != nil {
				t.Fatalf("described, then not read: %v", err)
			}
			v, err := ptfile.LoadBytes(in)
			if err != nil {
				continue
			}
			// Stride-0 views (expand) can describe huge tensors over a
			// small storage; saving materializes them, so skip those.
			if elems(v) > 1<<20 {
				ptfile.FreeAll(v)
				continue
			}
			if _, err := ptfile.SaveBytes(v); err != nil && !strings.Contains(err.Error(), "cannot save") {
				t.Fatalf("loaded value does not save: %v", err)
			}
			ptfile.FreeAll(v)
		}
		if after := torch.LiveTensors(); after > before {
			t.Fatalf("leaked %d tensors", after-before)
		}
	})
}

// elems counts the tensor elements in a loaded value.
func elems(v any) int64 {
	var n int64
	switch x := v.(type) {
	case *torch.Tensor:
		n = x.Numel()
	case *ptfile.Dict:
		if x == nil {
			return 0
		}
		for _, e := range x.Entries {
			n += elems(e.Value)
		}
		n += elems(x.Attrs)
	case []any:
		for _, e := range x {
			n += elems(e)
		}
	case ptfile.Tuple:
		for _, e := range x {
			n += elems(e)
		}
	}
	return n
}
