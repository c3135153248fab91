package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The CUDA kernels' source (scan_cuda.cu), compiled for the host with the
// CUDA built-ins it uses emulated (testdata/cudaemu/emu.h: a thread per
// CUDA thread, barriers for __syncthreads and shuffles), equals a float64
// reference in y, the last state, the chunk starts and all six gradients
// within 1e-5 of each one's largest value, over shapes that take each
// kernel (1, 2, 4 and 8 states per lane), partial chunks and partial blocks
// of channels. The reference is checked against finite differences. This
// checks the kernels' arithmetic and indexing without a GPU; it does not
// check what only a GPU shows (warp scheduling, memory ordering, the
// launch). Needs a C++20 compiler ($CXX, else g++), no nvcc, no CUDA.
func TestCUDAKernelOnHost(t *testing.T) {
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		t.Skipf("no C++ compiler (%s): %v", cxx, err)
	}
	bin := filepath.Join(t.TempDir(), "emu")
	emu := filepath.Join("testdata", "cudaemu")
	cmd := exec.Command(cxx, "-std=c++20", "-O1", "-pthread", "-I.", "-I"+emu,
		"-x", "c++", "-include", filepath.Join(emu, "emu.h"), "scan_cuda.cu",
		"-x", "none", filepath.Join(emu, "main.cc"), "-o", bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	for _, shape := range []string{
		"2 30 20 16 8",   // 16 lanes × 1 state, 8 channels a block: 3 blocks, the last partial; 30 = 3·8 + 6
		"1 17 5 1 4",     // one state: 1 lane, 128 channels a block
		"2 25 11 3 7",    // 3 states in 4 lanes, one padding lane
		"1 20 9 64 8",    // 2 states per lane
		"1 12 4 200 5",   // 8 states per lane, 200 of 256
		"2 40 130 16 16", // 17 blocks of channels
		"1 9 3 8 64",     // one chunk longer than the sequence
	} {
		out, err := exec.Command(bin, strings.Fields(shape)...).CombinedOutput()
		t.Logf("%s", strings.TrimSpace(string(out)))
		if err != nil {
			t.Errorf("shape %s: %v", shape, err)
		}
	}
}
