package pyref

import "os/exec"

// HasModule reports whether Python can import module (tensorboard, say:
// the PyTorch 2.11 venv has it, Debian's python3 may not). A test that
// needs it skips, in one line, where it is missing.
func HasModule(module string) bool {
	return exec.Command(Python, "-c", "import "+module).Run() == nil
}
