package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFile writes data to path atomically, with mode 0644.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write writes path atomically with what write writes to w: if write
// returns an error, path is left as it was and that error is returned.
func Write(path string, write func(w io.Writer) error) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := write(f); err != nil {
		return err
	}
	return f.Commit()
}

// File is a write in progress that replaces a path on Commit. It is an
// io.Writer; it is not safe for concurrent use. After Commit or Close,
// Write and Commit return os.ErrClosed.
type File struct {
	f    *os.File
	path string
	done bool // committed or abandoned
}

// Create starts writing path: it creates the temporary file in path's
// directory and takes its lock.
func Create(path string) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf(".%s.tmp-%d-*", base, os.Getpid()))
	if err != nil {
		return nil, err
	}
	// Best effort: where the file system has no flock, a cleaner cannot
	// take the lock either and leaves the file alone.
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	return &File{f: f, path: path}, nil
}

// Write writes p to the temporary file.
func (f *File) Write(p []byte) (int, error) {
	if f.done {
		return 0, os.ErrClosed
	}
	return f.f.Write(p)
}

// Commit makes the written data the file at path: it sets mode 0644,
// syncs and closes the temporary file, renames it over path and syncs the
// directory (where the directory can be opened). If a step up to the
// rename fails, the temporary file is removed and path is left as it was;
// if syncing the directory fails, the new file is in place but the rename
// may not survive a crash.
func (f *File) Commit() error {
	if f.done {
		return os.ErrClosed
	}
	f.done = true
	tmp := f.f.Name()
	err := f.f.Chmod(0o644)
	if err == nil {
		err = f.f.Sync()
	}
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(f.path))
	if err != nil {
		return nil
	}
	defer d.Close()
	return d.Sync()
}

// Close abandons the write unless it was committed: it closes and removes
// the temporary file, leaving path as it was. After Commit it does
// nothing, so a deferred Close is the way to clean up on every path.
func (f *File) Close() error {
	if f.done {
		return nil
	}
	f.done = true
	// Removed before it is closed, under the lock: a cleaner never sees
	// the file unlocked.
	rerr := os.Remove(f.f.Name())
	if err := f.f.Close(); rerr == nil {
		rerr = err
	}
	return rerr
}
