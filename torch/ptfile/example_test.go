package ptfile_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// A checkpoint saved in Go and loaded by Python's torch.load.
func ExampleSave() {
	dir, _ := os.MkdirTemp("", "ptfile")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ck.pt")
	w := torch.Arange(0, 6, 1, torch.CPU).Reshape(2, 3)
	defer w.Free()
	sd := &ptfile.Dict{Ordered: true}
	sd.Set("layer.weight", w)
	if err := ptfile.Save(path, ptfile.NewDict("model", sd, "step", int64(12))); err != nil {
		fmt.Println(err)
		return
	}
	out, err := exec.Command(pyref.Python, "-c",
		`import sys, torch; ck = torch.load(sys.argv[1]); print(ck["step"], list(ck["model"]), ck["model"]["layer.weight"].tolist())`, path).Output()
	fmt.Print(string(out), err)
	// Output:
	// 12 ['layer.weight'] [[0, 1, 2], [3, 4, 5]]
	// <nil>
}
