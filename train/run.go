package train

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train/ckpt"
)

// Kind is one series of checkpoint files a run writes: their name, with
// one %d verb for the number (a step, an epoch), and whether the run keeps
// only the newest RunConfig.KeepLast of them.
type Kind struct {
	Name  string // "checkpoint_step_%06d.pt"
	Prune bool

	re *regexp.Regexp
}

// The kinds Fit writes.
var (
	StepKind  = Kind{Name: "checkpoint_step_%06d.pt", Prune: true}
	EpochKind = Kind{Name: "checkpoint_epoch_%d.pt"}
)

// File names the kind's file number n.
func (k Kind) File(n int) string { return fmt.Sprintf(k.Name, n) }

var verb = regexp.MustCompile(`%0?[0-9]*d`)

func (k *Kind) compile() {
	parts := verb.Split(k.Name, 2)
	if len(parts) != 2 {
		panic(fmt.Sprintf("train: checkpoint kind %q has no %%d", k.Name))
	}
	k.re = regexp.MustCompile(regexp.QuoteMeta(parts[0]) + `(\d+)` + regexp.QuoteMeta(parts[1]))
}

// parse returns the number of a file of the kind.
func (k Kind) parse(name string) (int, bool) {
	m := k.re.FindStringSubmatch(name)
	if m == nil || m[0] != name {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// RunConfig configures StartRun.
type RunConfig struct {
	Dir       string // the checkpoint directory (made at the first save)
	Kinds     []Kind // the series of files the run writes
	KeepLast  int    // newest files kept of each pruned kind (0: 3; negative: all)
	Overwrite bool   // the run may replace other runs' files of its names
	// Resume is the file the run continues from ("": a new run); ResumeID
	// and ResumeFiles are its run_id and run_checkpoints (ckpt.File.Run).
	Resume      string
	ResumeID    string
	ResumeFiles []string
	// Logf, when set, receives what the run did to the directory (removed
	// temporary files, files of other runs left alone).
	Logf func(format string, args ...any)
}

// Run owns a training run's checkpoints in one directory, for any number
// of models, optimizers, schedules and scalers (Register), as HF
// Accelerate's save_state does: the run's identity (run_id in every file),
// the files it may overwrite and prune — its own, never another run's —,
// the temporary files that killed writes left behind, and the refusal to
// start where it would overwrite another run's files. Fit trains one model
// under a Run; a loop of several models (a GAN, then a classifier) uses
// its own Run.
//
// A file is the run's when this process wrote it, or when it continues
// from a file in the same directory (RunConfig.Resume): that file, the
// run's files listed in it that were not changed since, and, in the way
// of the resumed run, later files carrying its run_id.
type Run struct {
	ID    string
	cfg   RunConfig
	owned map[string]bool
	nums  [][]int // per kind: the numbers of the run's files, ascending
	parts []part
}

// StartRun starts a run in cfg.Dir: a new run_id, or the resumed file's,
// and its files adopted. Temporary files of checkpoint writes that a kill
// interrupted in the directory are removed first.
func StartRun(cfg RunConfig) (*Run, error) {
	if cfg.KeepLast == 0 {
		cfg.KeepLast = 3
	}
	cfg.Kinds = slices.Clone(cfg.Kinds)
	for i := range cfg.Kinds {
		cfg.Kinds[i].compile()
	}
	r := &Run{ID: cfg.ResumeID, cfg: cfg, owned: map[string]bool{}, nums: make([][]int, len(cfg.Kinds))}
	if r.ID == "" {
		r.ID = newRunID()
	}
	if cfg.Dir == "" {
		return r, nil
	}
	removed, err := r.removeOrphanTemps()
	if len(removed) > 0 {
		r.logf("removed %d temporary file(s) of interrupted checkpoint writes in %s: %s", len(removed), cfg.Dir, nameList(removed))
	}
	if err != nil {
		return nil, &DirError{Dir: cfg.Dir, Err: err} // not a directory, not readable
	}
	if cfg.Resume != "" {
		if err := r.adopt(); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
	}
	return r, nil
}

func (r *Run) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf(format, args...)
	}
}

func newRunID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// kind returns the index of the kind a base name is a file of, and its number.
func (r *Run) kind(name string) (int, int, bool) {
	for i, k := range r.cfg.Kinds {
		if n, ok := k.parse(name); ok {
			return i, n, true
		}
	}
	return 0, 0, false
}

// adopt makes the file the run resumes from, and the run's files listed
// in it, the run's when they are in its directory. A listed file changed
// after the resumed one was written is no longer the run's (another run
// replaced it) and stays out.
func (r *Run) adopt() error {
	same, err := sameDir(filepath.Dir(r.cfg.Resume), r.cfg.Dir)
	if err != nil || !same {
		return err
	}
	st, err := os.Stat(r.cfg.Resume)
	if err != nil {
		return err
	}
	r.own(filepath.Base(r.cfg.Resume))
	if r.cfg.ResumeID == "" {
		return nil
	}
	for _, name := range r.cfg.ResumeFiles {
		if fi, err := os.Stat(filepath.Join(r.cfg.Dir, name)); err == nil && !fi.ModTime().After(st.ModTime()) {
			r.own(name)
		}
	}
	return nil
}

func sameDir(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}

// own records a file of the directory as the run's.
func (r *Run) own(name string) {
	r.owned[name] = true
	if k, n, ok := r.kind(name); ok {
		if i, found := slices.BinarySearch(r.nums[k], n); !found {
			r.nums[k] = slices.Insert(r.nums[k], i, n)
		}
	}
}

// Owns reports whether a base name in the directory is the run's file.
func (r *Run) Owns(name string) bool { return r.owned[name] }

// Files returns the base names of the run's files of pruned kinds once
// name is written too, before the oldest are pruned (what a checkpoint
// stores as run_checkpoints: a run killed between the write and the
// pruning still knows them when it resumes from the new file).
func (r *Run) Files(name string) []string {
	var out []string
	for k, kind := range r.cfg.Kinds {
		if !kind.Prune {
			continue
		}
		nums := slices.Clone(r.nums[k])
		if n, ok := kind.parse(name); ok {
			if i, found := slices.BinarySearch(nums, n); !found {
				nums = slices.Insert(nums, i, n)
			}
		}
		for _, n := range nums {
			out = append(out, kind.File(n))
		}
	}
	return out
}

// Check refuses, before the first step, a directory the run cannot write
// in (or make; a *DirError) or where the run could write over
// another run's files (a *ConflictError, unless Overwrite):
// could says whether the run may write file n of kind k from here to its
// end. Resuming, the files in the way that carry the run's id are the
// run's (written after the file it resumes from).
func (r *Run) Check(could func(k Kind, n int) bool) error {
	if r.cfg.Dir == "" {
		return nil
	}
	if err := writable(r.cfg.Dir); err != nil {
		return &DirError{Dir: r.cfg.Dir, Err: err}
	}
	entries, err := os.ReadDir(r.cfg.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	var clash []string
	others := 0
	for _, e := range entries {
		name := e.Name()
		k, n, ok := r.kind(name)
		if !ok || r.owned[name] {
			continue
		}
		if !could(r.cfg.Kinds[k], n) {
			// Out of the run's way; the message counts another run's only
			// (a resumed run's earlier files that it no longer lists, such
			// as pruned-kind files past KeepLast or unpruned ones, are
			// its own).
			if r.cfg.Resume == "" || runIDOf(filepath.Join(r.cfg.Dir, name)) != r.ID {
				others++
			}
			continue
		}
		if r.cfg.Resume != "" && runIDOf(filepath.Join(r.cfg.Dir, name)) == r.ID {
			r.own(name)
			continue
		}
		clash = append(clash, name)
	}
	if len(clash) > 0 && !r.cfg.Overwrite {
		return &ConflictError{Dir: r.cfg.Dir, Files: clash}
	}
	if len(clash) > 0 {
		r.logf("%s of another run in %s may be overwritten, as asked (Overwrite)", nameList(clash), r.cfg.Dir)
	}
	if others > 0 {
		r.logf("%s also holds %d checkpoint(s) that are not this run's (%s): it leaves them alone", r.cfg.Dir, others, r.ID)
	}
	return nil
}

// Claim returns the path of name in the directory, refusing (a
// *ConflictError) a file that another run wrote there since Check, unless
// Overwrite.
func (r *Run) Claim(name string) (string, error) {
	path := filepath.Join(r.cfg.Dir, name)
	if !r.owned[name] && !r.cfg.Overwrite {
		if _, err := os.Lstat(path); err == nil {
			return "", &ConflictError{Dir: r.cfg.Dir, Files: []string{name}}
		}
	}
	return path, nil
}

// Wrote records name as written by the run and prunes the oldest files of
// its kind beyond KeepLast; it returns the paths pruned.
func (r *Run) Wrote(name string) (pruned []string, err error) {
	r.own(name)
	k, _, ok := r.kind(name)
	if !ok || !r.cfg.Kinds[k].Prune || r.cfg.KeepLast < 0 {
		return nil, nil
	}
	var errs []error
	for len(r.nums[k]) > r.cfg.KeepLast {
		old := r.cfg.Kinds[k].File(r.nums[k][0])
		path := filepath.Join(r.cfg.Dir, old)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		} else {
			pruned = append(pruned, path)
		}
		delete(r.owned, old)
		r.nums[k] = r.nums[k][1:]
	}
	return pruned, errors.Join(errs...)
}

// part is a registered piece of state.
type part struct {
	key string
	v   any
}

// Register adds a named part to the run's checkpoints (Save): an
// nn.Module (its state dict), an nn.Optimizer, an *nn.Schedule or an
// *amp.GradScaler. A key registered again is replaced; Drop removes it.
func (r *Run) Register(key string, v any) {
	switch v.(type) {
	case nn.Module, nn.Optimizer, *nn.Schedule, *amp.GradScaler:
	default:
		panic(fmt.Sprintf("train: Register(%q): %T is not a module, optimizer, schedule or scaler", key, v))
	}
	r.Drop(key)
	r.parts = append(r.parts, part{key, v})
}

// Drop removes registered parts (a network the run has freed).
func (r *Run) Drop(keys ...string) {
	r.parts = slices.DeleteFunc(r.parts, func(p part) bool { return slices.Contains(keys, p.key) })
}

// Save writes checkpoint file name of the run, atomically: the registered
// parts, the CPU generator's state, what extra adds (meta, loader
// position), and the run (run_id, run_checkpoints); then prunes. The
// event says what was written and pruned.
func (r *Run) Save(name string, extra func(w *ckpt.Writer)) (CheckpointEvent, error) {
	path, err := r.Claim(name)
	if err != nil {
		return CheckpointEvent{}, err
	}
	if err := os.MkdirAll(r.cfg.Dir, 0o755); err != nil {
		return CheckpointEvent{}, fmt.Errorf("train: %w", err)
	}
	// In a scope: the tensors the writer makes of its own (the RNG
	// snapshot, the scalers' and schedule's values) are released after.
	err = torch.TidyErr(func() error {
		w := ckpt.NewWriter()
		for _, p := range r.parts {
			switch v := p.v.(type) {
			case nn.Module:
				w.Module(p.key, v)
			case nn.Optimizer:
				w.Optimizer(p.key, v)
			case *nn.Schedule:
				w.Schedule(p.key, v)
			case *amp.GradScaler:
				w.Scaler(p.key, v)
			}
		}
		w.RNG()
		if extra != nil {
			extra(w)
		}
		w.Run(r.ID, r.Files(name))
		return w.Save(path)
	})
	if err != nil {
		return CheckpointEvent{}, fmt.Errorf("train: saving %s: %w", path, err)
	}
	pruned, err := r.Wrote(name)
	return CheckpointEvent{Path: path, Pruned: pruned}, err
}

// Load restores the registered parts named by keys (all registered parts
// when none) from f; every one is checked against the file before any
// changes (a *ckpt.Error names the first missing or mismatched one).
func (r *Run) Load(f *ckpt.File, keys ...string) error {
	var sel []part
	for _, p := range r.parts {
		if len(keys) == 0 || slices.Contains(keys, p.key) {
			sel = append(sel, p)
		}
	}
	for _, k := range keys {
		if !slices.ContainsFunc(sel, func(p part) bool { return p.key == k }) {
			panic(fmt.Sprintf("train: Load(%q): not registered", k))
		}
	}
	for _, p := range sel {
		var err error
		switch v := p.v.(type) {
		case nn.Module:
			err = f.CheckModule(p.key, v)
		case nn.Optimizer:
			err = f.CheckOptimizer(p.key, v)
		default:
			if !f.Has(p.key) {
				_, err = f.Tensors(p.key) // the file's own error for a missing key
			}
		}
		if err != nil {
			return err
		}
	}
	for _, p := range sel {
		var err error
		switch v := p.v.(type) {
		case nn.Module:
			err = f.Module(p.key, v)
		case nn.Optimizer:
			err = f.Optimizer(p.key, v)
		case *nn.Schedule:
			err = f.Schedule(p.key, v)
		case *amp.GradScaler:
			err = f.Scaler(p.key, v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// DirError is the refusal, before the first step, of a checkpoint
// directory the run cannot write in (a file, a read-only place): found at
// the start, not after the steps it would have saved.
type DirError struct {
	Dir string
	Err error
}

// UserError marks it as the user's choice of directory (exit status 2).
func (*DirError) UserError() {}

func (e *DirError) Error() string {
	return fmt.Sprintf("train: checkpoint directory %s: %v", e.Dir, e.Err)
}

func (e *DirError) Unwrap() error { return e.Err }

// writable checks that the run can make dir (when it is missing) and
// files in it, leaving nothing behind: a file is made and removed in dir,
// or in its nearest existing ancestor, which must be a directory.
func writable(dir string) error {
	at := dir
	for {
		st, err := os.Stat(at)
		if err == nil {
			if !st.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: at, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(at)
		if parent == at {
			return err
		}
		at = parent
	}
	f, err := os.CreateTemp(at, ".torchfit-write-check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// ConflictError is the refusal, before the first step, to write
// checkpoints over files that another run wrote in the same directory
// (Overwrite allows it; resuming that run makes them this run's).
type ConflictError struct {
	Dir   string
	Files []string // base names, in name order
}

// UserError marks it as the user's choice of directory (exit status 2).
func (*ConflictError) UserError() {}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("train: %s holds %s written by another run, which this run would overwrite", e.Dir, nameList(e.Files))
}

func nameList(names []string) string {
	switch len(names) {
	case 1:
		return names[0]
	case 2, 3:
		return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
	return fmt.Sprintf("%s, %s and %d more", names[0], names[1], len(names)-2)
}

// runIDOf returns the run id stored in a checkpoint ("" when there is
// none or the file does not load).
func runIDOf(path string) string {
	d, _, err := ptfile.LoadParts(path, "run_id") // a string: no tensor is read
	if err != nil {
		return ""
	}
	defer ptfile.FreeAll(d)
	id, _ := d.Get("run_id")
	s, _ := id.(string)
	return s
}

// removeOrphanTemps deletes the temporary files of checkpoint writes that
// a kill (or a crash) interrupted in the directory: the hidden
// .NAME.tmp-PID-RANDOM files of ptfile.Save for a file of one of the
// run's kinds, and only those whose writer is gone — the writer holds a
// flock on its file while it writes, and the PID in the name (when there
// is one; torchfit before PIDs wrote .NAME.tmp-RANDOM) must be dead or
// this process's own (a process that is not writing there now: a previous
// life under the same PID).
func (r *Run) removeOrphanTemps() (removed []string, err error) {
	entries, err := os.ReadDir(r.cfg.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, e := range entries {
		m := tempName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		if _, _, ok := r.kind(m[1]); !ok {
			continue
		}
		if m[2] != "" {
			pid, err := strconv.Atoi(m[2])
			if err != nil || (pid != os.Getpid() && processAlive(pid)) {
				continue
			}
		}
		path := filepath.Join(r.cfg.Dir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			continue // gone already, or not ours to read
		}
		// A writer holds LOCK_EX until it closes the file: if the lock is
		// taken, the write is live.
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		} else {
			removed = append(removed, e.Name())
		}
		f.Close()
	}
	return removed, errors.Join(errs...)
}

// tempName matches the temporary file ptfile.Save writes NAME into before
// renaming it: .NAME.tmp-PID-RANDOM (or .NAME.tmp-RANDOM).
var tempName = regexp.MustCompile(`^\.(.+)\.tmp-(?:(\d+)-)?\d+$`)

// processAlive reports whether a process with this PID exists (EPERM: it
// does, owned by someone else).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
