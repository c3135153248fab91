package safetensors_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/safetensors"
)

// A state dict saved as Python's safetensors.torch.save_file saves it,
// and read back.
func ExampleSave() {
	dir, _ := os.MkdirTemp("", "safetensors")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.safetensors")
	w := torch.Arange(0, 6, 1, torch.CPU).Reshape(2, 3)
	b := torch.FromSlice([]float32{0.5, -1}, nil, torch.BFloat16)
	defer w.Free()
	defer b.Free()
	sd := torch.StateDict{{Name: "layer.weight", T: w}, {Name: "layer.bias", T: b}}
	if err := safetensors.Save(path, sd, map[string]string{"format": "pt"}); err != nil {
		fmt.Println(err)
		return
	}
	f, err := safetensors.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Free()
	fmt.Println(f.Metadata)
	for _, nt := range f.Tensors {
		fmt.Println(nt.Name, nt.T.DType(), nt.T.Shape(), nt.T.Float64s())
	}
	// Output:
	// map[format:pt]
	// layer.weight int64 [2 3] [0 1 2 3 4 5]
	// layer.bias bfloat16 [2] [0.5 -1]
}
