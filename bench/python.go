package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/torchfit/torchfit/internal/pyref"
)

// Python is the Python side: scripts/twins/run.py in a process of its
// own, answering one request at a time.
type Python struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr strings.Builder
	root   string
}

// ErrPython is a failed request to the Python side.
var ErrPython = errors.New("bench: python")

// RemoteError is an error the Python side replied (it wraps ErrPython).
type RemoteError struct {
	Op    string // the request's op
	Msg   string // the error (Python's exception: its class and message)
	Trace string // Python's traceback, when it sent one
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("%v: %s: %s\n%s", ErrPython, e.Op, e.Msg, e.Trace)
}

// Unwrap makes a RemoteError an ErrPython.
func (e *RemoteError) Unwrap() error { return ErrPython }

// PyInfo is what the Python side runs on.
type PyInfo struct {
	Torch   string `json:"torch"`   // torch.__version__
	Compile bool   `json:"compile"` // torch.compile exists (PyTorch 2.x)
}

// Info asks the Python side for its torch.
func (p *Python) Info() (PyInfo, error) {
	var in PyInfo
	err := p.Do(map[string]any{"op": "info"}, &in)
	return in, err
}

// StartPython starts the server with env added to this process's
// environment. root is the repository root.
func StartPython(root string, env ...string) (*Python, error) {
	p := &Python{root: root}
	p.cmd = exec.Command(pyref.Python, filepath.Join(root, "scripts", "twins", "run.py"))
	p.cmd.Dir = root
	p.cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = &p.stderr
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReaderSize(out, 1<<20)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: start %s: %v (make deps installs python3-torch)", ErrPython, pyref.Python, err)
	}
	return p, nil
}

// Do sends one request and decodes the reply into out.
func (p *Python) Do(req map[string]any, out any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%w: %v: %s", ErrPython, err, p.stderr.String())
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("%w: %s: no reply (%v): %s", ErrPython, req["op"], err, strings.TrimSpace(p.stderr.String()))
	}
	var e struct {
		Error string `json:"error"`
		Trace string `json:"trace"`
	}
	if json.Unmarshal(line, &e) == nil && e.Error != "" {
		return &RemoteError{Op: fmt.Sprint(req["op"]), Msg: e.Error, Trace: e.Trace}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(line, out)
}

// Close stops the process.
func (p *Python) Close() error {
	io.WriteString(p.in, "{\"op\": \"quit\"}\n")
	p.in.Close()
	return p.cmd.Wait()
}

// RepoRoot finds the repository root (the directory holding go.mod) from
// the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("bench: no go.mod above the working directory")
		}
		dir = parent
	}
}
