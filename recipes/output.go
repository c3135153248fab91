package recipes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Kinds of file a command writes, known by their first bytes.
var (
	PNG = OutputKind{Name: "PNG image", Magic: func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) }}
	WAV = OutputKind{Name: "WAV file", Magic: func(b []byte) bool {
		return len(b) >= 12 && (string(b[:4]) == "RIFF" || string(b[:4]) == "RIFX") && string(b[8:12]) == "WAVE"
	}}
)

// OutputKind is a kind of file a command writes.
type OutputKind struct {
	Name  string
	Magic func(head []byte) bool // whether a file's first bytes are of the kind
}

// CheckOutput refuses (a user error naming the flag) an output path that
// holds something else than the kind of file the command writes there: a
// directory, or a file of another kind (a metrics file, a checkpoint) that
// writing would destroy. A new path, or a file of the same kind, which the
// command replaces, is fine.
func CheckOutput(flag, path string, kind OutputKind) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return Usagef("--%s %s: %v", flag, path, err)
	}
	if st.IsDir() {
		return Usagef("--%s %s is a directory: name the %s to write", flag, path, kind.Name)
	}
	f, err := os.Open(path)
	if err != nil {
		return Usagef("--%s %s: %v", flag, path, err)
	}
	defer f.Close()
	head := make([]byte, 16)
	n, _ := io.ReadFull(f, head)
	if st.Size() > 0 && !kind.Magic(head[:n]) {
		return Usagef("--%s %s holds something else than a %s (writing would destroy it): name another file", flag, path, kind.Name)
	}
	return nil
}

// CheckDataOut refuses (a user error) to write a data set into dir when
// one is there already — any of its files named by markers (a manifest,
// meta.json) — unless overwrite: a data command never silently replaces
// a set, its hand-edited captions or transcripts included. With
// overwrite it returns the line that says what is replaced ("" when
// nothing is).
func CheckDataOut(dir string, overwrite bool, markers ...string) (string, error) {
	var found []string
	for _, m := range markers {
		if _, err := os.Stat(filepath.Join(dir, m)); err == nil {
			found = append(found, m)
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	if !overwrite {
		return "", Usagef("--out %s already holds a data set (%s): pass --overwrite to replace it, or choose another --out", dir, strings.Join(found, ", "))
	}
	return fmt.Sprintf("--overwrite: replacing the data set in %s (%s)", dir, strings.Join(found, ", ")), nil
}
