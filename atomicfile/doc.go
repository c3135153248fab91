// Package atomicfile writes files atomically: a reader of the path, or
// whatever is left after a crash, a power cut or kill -9, sees the old file
// or the complete new one, never a partial one.
//
//	err := atomicfile.WriteFile("meta.json", b)
//	err = atomicfile.Write("model.pt", func(w io.Writer) error { ... })
//
// Create, Commit and Close are the steps for a writer that streams a file
// and may give up on it:
//
//	f, err := atomicfile.Create(path)
//	if err != nil { ... }
//	defer f.Close() // abandons the write unless Commit ran
//	... write to f ...
//	return f.Commit()
//
// The data goes to a hidden temporary file in the path's directory,
// .NAME.tmp-PID-RANDOM, which the writer holds under an exclusive flock
// until it is closed. Commit gives the file mode 0644, syncs it, closes
// it, renames it over the path and syncs the directory, so that the rename
// itself survives a crash. A write that fails or is abandoned removes its
// temporary file and leaves the old file as it was.
//
// A writer killed mid-write leaves its temporary file behind. The name and
// the lock tell such a file from a write in progress: its lock is free and
// the process of the PID in its name is gone. The training loop's
// checkpoint writer (package train) removes such files on that evidence,
// so the name and the lock are this package's contract with it: keep them.
//
// Errors are package os's (*fs.PathError, *os.LinkError), naming the
// temporary file or the directory they concern, or a write function's own,
// returned as they are.
package atomicfile
