// Package pyref runs Python PyTorch (Debian's python3-torch, on the same
// libtorch) from tests, so torchfit's numbers are checked against PyTorch's
// own at test time.
//
// A script reads its input as the JSON value `inp` and reports with
// emit(value); helpers t2l (tensor to nested lists) and T (lists to tensor)
// are predefined, and torch, json, sys, math are imported.
package pyref

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Python is the interpreter with torch on the libtorch under test: Debian's
// python3-torch (make deps installs it), or TORCHFIT_PYTHON (make sets it
// to .venv/bin/python for the PyTorch 2.11 leg; the GPU machines' python3).
var Python = pythonFromEnv()

func pythonFromEnv() string {
	if p := os.Getenv("TORCHFIT_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

const prelude = `
import json, sys, math
import torch
torch.set_num_threads(1)
inp = json.loads(sys.stdin.read() or "null")
def emit(v):
    sys.stdout.write(json.dumps(v))
def t2l(t):
    return t.detach().double().tolist() if t.is_floating_point() else t.detach().tolist()
def T(x, dtype=torch.float32):
    return torch.tensor(x, dtype=dtype)
`

// Available reports whether Python PyTorch can be run.
func Available() bool {
	return exec.Command(Python, "-c", "import torch").Run() == nil
}

// Run executes script with in as `inp` and decodes what it emits into out.
// It fails the test when Python or torch is missing: make deps installs them.
func Run(t testing.TB, script string, in, out any) {
	t.Helper()
	if err := RunErr(script, in, out); err != nil {
		t.Fatalf("pyref: %v", err)
	}
}

// RunErr is Run returning an error.
func RunErr(script string, in, out any) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	cmd := exec.Command(Python, "-c", prelude+dedent(script))
	cmd.Stdin = bytes.NewReader(data)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return &Error{Err: err, Stderr: stderr.String()}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(stdout.Bytes(), out)
}

// Error is a failed Python run.
type Error struct {
	Err    error
	Stderr string
}

func (e *Error) Error() string {
	msg := e.Err.Error() + ": " + strings.TrimSpace(e.Stderr)
	if strings.Contains(e.Stderr, "No module named 'torch'") || strings.Contains(e.Err.Error(), "executable file not found") {
		msg += " (run 'make deps' to install python3-torch, or set TORCHFIT_PYTHON to a python with torch)"
	}
	return msg
}

// dedent removes the common leading indentation of a raw-string script.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for k, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[k] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// cpuGradScaler makes torch.cuda.amp.GradScaler run on CPU tensors, as
// the CUDA path would: the two fused kernels it calls are replaced by
// their documented semantics, the CUDA-only assertions are dropped, and
// GradScaler is imported.
const cpuGradScaler = `
import warnings; warnings.simplefilter("ignore")
if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 3):
    # PyTorch 2.3+ runs its own GradScaler on the CPU, with CPU kernels.
    import functools, torch.amp
    GradScaler = functools.partial(torch.amp.GradScaler, "cpu")
else:
    def _unscale(grads, found_inf, inv_scale):
        for g in grads:
            if not torch.isfinite(g).all():
                found_inf.fill_(1.0)
            g.mul_(inv_scale.item())
    def _update(scale, tracker, found_inf, growth, backoff, interval):
        if found_inf.item():
            scale.mul_(backoff); tracker.fill_(0)
        else:
            n = tracker.item() + 1
            if n == interval:
                if math.isfinite(scale.item() * growth):
                    scale.mul_(growth)
                tracker.fill_(0)
            else:
                tracker.fill_(n)
        return scale
    torch._amp_foreach_non_finite_check_and_unscale_ = _unscale
    torch._amp_update_scale_ = _update
    import torch.cuda.amp.grad_scaler as _gs
    def _replicator_init(self, master):  # drops the is_cuda assertion
        self.master = master
        self._per_device_tensors = {}
    _gs._MultiDeviceReplicator.__init__ = _replicator_init
    from torch.cuda.amp import GradScaler
    torch.cuda.is_available = lambda: True  # keeps the scaler enabled
    # GradScaler.scale without its is_cuda assertion: the rest of its body.
    GradScaler.scale = lambda self, out: out * self._scale.to(device=out.device, non_blocking=True)
`

// WithCPUGradScaler prefixes script with a set-up that makes PyTorch's
// GradScaler (as GradScaler) work on CPU tensors, for comparing torchfit's
// scaler with it on a machine without a GPU: on PyTorch 2.3+ its own
// torch.amp.GradScaler("cpu"); on 1.13 the CUDA scaler with its two
// CUDA-only kernels replaced by CPU equivalents written from their sources.
func WithCPUGradScaler(script string) string {
	return cpuGradScaler + dedent(script)
}

// HasModule reports whether Python can import torch and module (say
// "safetensors", which Debian's Python lacks and the PyTorch 2.11 leg's
// .venv has), so tests needing it can skip.
func HasModule(module string) bool {
	if v, ok := modules.Load(module); ok {
		return v.(bool)
	}
	ok := exec.Command(Python, "-c", "import torch, "+module).Run() == nil
	modules.Store(module, ok)
	return ok
}

var modules sync.Map

// SkipWithout skips t with one line when Python cannot import module: the
// reference models no one here wrote (open_clip, transformers, torchaudio)
// are in the PyTorch 2.11 leg's .venv (third_party/torch2/requirements.txt),
// not in Debian's Python with torch 1.13.
func SkipWithout(t testing.TB, module string) {
	t.Helper()
	if !HasModule(module) {
		t.Skipf("%s cannot import %s (the PyTorch 2.11 leg's .venv has it: make test-torch2)", Python, module)
	}
}
