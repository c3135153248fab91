package ckpt_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// A checkpoint of two networks (a GAN's), each under its own name, read
// back into new modules; a module of another shape is refused.
func Example() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	torch.ManualSeed(0)
	gen, disc := nn.NewLinear(4, 8, true), nn.NewLinear(8, 1, true)
	w := ckpt.NewWriter()
	w.Module("generator", gen)
	w.Module("discriminator", disc)
	w.Int("step", 100)
	path := ckpt.StepPath(dir, 100)
	if err := w.Save(path); err != nil {
		fmt.Println(err)
		return
	}
	f, err := ckpt.Read(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Free()
	gen2 := nn.NewLinear(4, 8, true)
	step, _ := f.Int("step")
	fmt.Println(filepath.Base(path), step, f.Module("generator", gen2))
	fmt.Println(gen.Weight.Equal(gen2.Weight))
	wrong := nn.NewLinear(8, 2, true)
	fmt.Println(f.CheckModule("discriminator", wrong) != nil)
	// Output:
	// checkpoint_step_000100.pt 100 <nil>
	// true
	// true
}
