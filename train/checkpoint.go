package train

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// CheckpointError is a checkpoint that cannot be resumed from: unreadable,
// not a torchfit checkpoint, or saved from another model. Nothing was
// changed.
type CheckpointError struct {
	Path string
	Err  error
}

func (e *CheckpointError) Error() string {
	return fmt.Sprintf("train: checkpoint %s: %v", e.Path, e.Err)
}
func (e *CheckpointError) Unwrap() error { return e.Err }

// UserError marks it as the user's input (a command line exits 2).
func (*CheckpointError) UserError() {}

// Checkpoint is what a training checkpoint holds besides the tensors:
// where the run is. The file is a torch.save dict (Python can read it with
// torch.load, weights_only=True included):
//
//	model       OrderedDict of the model's state dict
//	optimizer   dict of the optimizer's named state (nn.Optimizer.State)
//	scheduler   dict (when a schedule is attached)
//	scaler      dict: scale, growth_tracker, ...
//	rng_state   uint8 tensor: the CPU generator
//	loader      dict: epoch, batch, seed (the next batch to train on)
//	step, epoch, micro_batch, accum, effective_batch   ints
//	meta        dict of the caller's values (preset, vocabulary, ...)
//	run_id      string: the run that wrote it (Fit; absent from SaveCheckpoint's files)
//	run_checkpoints  list of the base names of the run's step checkpoints
//	            in the same directory once this one is written, oldest
//	            first (those beyond keep-last are pruned right after)
type Checkpoint struct {
	Step, Epoch       int
	MicroBatch, Accum int
	Loader            data.State
	Meta              *ptfile.Dict
	// RunID is the run that wrote the file ("" for files written by
	// SaveCheckpoint or by torchfit before run ids); a Fit resuming from the
	// file continues that run.
	RunID string
	// RunFiles are the base names of the run's step checkpoints in the
	// file's directory when it was written, itself included.
	RunFiles []string
}

func namedDict(ns []nn.Named, ordered bool) *ptfile.Dict {
	d := &ptfile.Dict{Ordered: ordered}
	for _, n := range ns {
		d.Set(n.Name, n.T)
	}
	return d
}

// SaveCheckpoint writes the trainer's complete state to path atomically.
// It belongs to no run: Fit writes its own with the run's id.
func (t *Trainer) SaveCheckpoint(path string, loader data.State, epoch int, meta *ptfile.Dict) error {
	return t.saveCheckpoint(path, loader, epoch, meta, "", nil)
}

func (t *Trainer) saveCheckpoint(path string, loader data.State, epoch int, meta *ptfile.Dict, runID string, runFiles []string) error {
	return torch.TidyErr(func() error {
		ck := ptfile.NewDict()
		ck.Set("model", namedDict(nn.StateDict(t.Model), true))
		ck.Set("optimizer", namedDict(t.Opt.State(), false))
		if t.Sched != nil {
			ck.Set("scheduler", namedDict(t.Sched.State(), false))
		}
		sc := ptfile.NewDict()
		st := t.Scaler.State()
		keys := make([]string, 0, len(st))
		for k := range st {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sc.Set(k, st[k])
		}
		ck.Set("scaler", sc)
		ck.Set("rng_state", torch.RNGState())
		ck.Set("loader", ptfile.NewDict("epoch", int64(loader.Epoch), "batch", int64(loader.Batch), "seed", int64(loader.Seed)))
		ck.Set("step", int64(t.step))
		ck.Set("epoch", int64(epoch))
		ck.Set("micro_batch", int64(t.engine.MicroBatch()))
		ck.Set("accum", int64(t.cfg.Accum))
		ck.Set("effective_batch", int64(t.cfg.EffectiveBatch()))
		if meta == nil {
			meta = ptfile.NewDict()
		}
		ck.Set("meta", meta)
		if runID != "" {
			ck.Set("run_id", runID)
			files := make([]any, len(runFiles))
			for k, f := range runFiles {
				files[k] = f
			}
			ck.Set("run_checkpoints", files)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return ptfile.Save(path, ck)
	})
}

// LoadCheckpoint restores a checkpoint written by SaveCheckpoint into the
// trainer (model, optimizer, schedule, scaler, RNG, step, micro-batch) and
// returns where the run was. Nothing changes when the file is corrupt or
// belongs to another model (missing keys, other shapes): the error names
// the problem, and the file is only read.
func (t *Trainer) LoadCheckpoint(path string) (Checkpoint, error) {
	v, err := ptfile.Load(path)
	if err != nil {
		return Checkpoint{}, &CheckpointError{Path: path, Err: err}
	}
	defer ptfile.FreeAll(v)
	ck, ok := v.(*ptfile.Dict)
	if !ok {
		return Checkpoint{}, &CheckpointError{Path: path, Err: fmt.Errorf("not a torchfit checkpoint (a %T, not a dict)", v)}
	}
	fail := func(format string, args ...any) (Checkpoint, error) {
		return Checkpoint{}, &CheckpointError{Path: path, Err: fmt.Errorf(format, args...)}
	}
	tensors := func(key string) (map[string]*torch.Tensor, error) {
		x, ok := ck.Get(key)
		if !ok {
			return nil, fmt.Errorf("no %q entry", key)
		}
		d, ok := x.(*ptfile.Dict)
		if !ok {
			return nil, fmt.Errorf("%q is a %T, not a dict", key, x)
		}
		out := map[string]*torch.Tensor{}
		for _, e := range d.Entries {
			name, _ := e.Key.(string)
			tv, ok := e.Value.(*torch.Tensor)
			if !ok {
				return nil, fmt.Errorf("%q[%v] is not a tensor", key, e.Key)
			}
			out[name] = tv
		}
		return out, nil
	}
	num := func(key string) (int64, error) {
		x, ok := ck.Get(key)
		if !ok {
			return 0, fmt.Errorf("no %q entry", key)
		}
		switch n := x.(type) {
		case int64:
			return n, nil
		case float64:
			return int64(n), nil
		}
		return 0, fmt.Errorf("%q is a %T, not a number", key, x)
	}
	model, err := tensors("model")
	if err != nil {
		return fail("%v", err)
	}
	optState, err := tensors("optimizer")
	if err != nil {
		return fail("%v", err)
	}
	// Check the model before changing anything: strict names and shapes.
	own := nn.StateDict(t.Model)
	var missing, unexpected []string
	have := map[string]bool{}
	for _, p := range own {
		have[p.Name] = true
		src, ok := model[p.Name]
		if !ok {
			missing = append(missing, p.Name)
			continue
		}
		if fmt.Sprint(src.Shape()) != fmt.Sprint(p.T.Shape()) {
			return fail("it was saved from another model: %s has shape %v in the checkpoint, %v in this model", p.Name, src.Shape(), p.T.Shape())
		}
	}
	for k := range model {
		if !have[k] {
			unexpected = append(unexpected, k)
		}
	}
	if len(missing) > 0 || len(unexpected) > 0 {
		sort.Strings(unexpected)
		return fail("it was saved from another model: missing keys %v, unexpected keys %v", head(missing), head(unexpected))
	}
	var c Checkpoint
	var loaderState map[string]int64
	{
		x, _ := ck.Get("loader")
		d, ok := x.(*ptfile.Dict)
		if !ok {
			return fail("no loader position")
		}
		loaderState = map[string]int64{}
		for _, e := range d.Entries {
			k, _ := e.Key.(string)
			if n, ok := e.Value.(int64); ok {
				loaderState[k] = n
			}
		}
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"step", &c.Step}, {"epoch", &c.Epoch}, {"micro_batch", &c.MicroBatch}, {"accum", &c.Accum}} {
		n, err := num(f.key)
		if err != nil {
			return fail("%v", err)
		}
		*f.dst = int(n)
	}
	c.Loader = data.State{Epoch: int(loaderState["epoch"]), Batch: int(loaderState["batch"]), Seed: uint64(loaderState["seed"])}
	if id, ok := ck.Get("run_id"); ok {
		if c.RunID, ok = id.(string); !ok {
			return fail("run_id is a %T, not a string", id)
		}
		if x, ok := ck.Get("run_checkpoints"); ok {
			files, ok := x.([]any)
			if !ok {
				return fail("run_checkpoints is a %T, not a list", x)
			}
			for _, f := range files {
				name, ok := f.(string)
				if !ok || !ckptName.MatchString(name) {
					return fail("run_checkpoints holds %v, not a step checkpoint's name", f)
				}
				c.RunFiles = append(c.RunFiles, name)
			}
		}
	}
	if m, ok := ck.Get("meta"); ok {
		if d, ok := m.(*ptfile.Dict); ok {
			c.Meta = d
		}
	}
	if _, err := nn.LoadStateDict(t.Model, model, true); err != nil {
		return fail("%v", err)
	}
	if err := t.Opt.LoadState(optState); err != nil {
		return fail("optimizer: %v", err)
	}
	if t.Sched != nil {
		if st, err := tensors("scheduler"); err == nil {
			if err := t.Sched.LoadState(st); err != nil {
				return fail("scheduler: %v", err)
			}
		}
	}
	if x, ok := ck.Get("scaler"); ok {
		if d, ok := x.(*ptfile.Dict); ok {
			st := map[string]float64{}
			for _, e := range d.Entries {
				k, _ := e.Key.(string)
				switch n := e.Value.(type) {
				case float64:
					st[k] = n
				case int64:
					st[k] = float64(n)
				}
			}
			if st["enabled"] == 1 {
				if err := t.Scaler.LoadState(st); err != nil {
					return fail("scaler: %v", err)
				}
			}
		}
	}
	if rng := ck.Tensor("rng_state"); rng != nil {
		if err := torch.Try(func() { torch.SetRNGState(rng) }); err != nil {
			return fail("rng_state: %v", err)
		}
	}
	t.step = c.Step
	t.SetMicroBatch(c.MicroBatch)
	// The meta dict outlives the deferred FreeAll only when it holds no tensors.
	if c.Meta != nil {
		c.Meta = copyPlain(c.Meta)
	}
	return c, nil
}

func head(xs []string) []string {
	if len(xs) > 8 {
		return append(xs[:8:8], fmt.Sprintf("... %d more", len(xs)-8))
	}
	return xs
}

// copyPlain copies a dict dropping tensors (they are freed with the file's values).
func copyPlain(d *ptfile.Dict) *ptfile.Dict {
	out := &ptfile.Dict{Ordered: d.Ordered}
	for _, e := range d.Entries {
		switch v := e.Value.(type) {
		case *torch.Tensor:
		case *ptfile.Dict:
			out.Set(e.Key, copyPlain(v))
		default:
			out.Set(e.Key, v)
		}
	}
	return out
}

var ckptName = regexp.MustCompile(`^checkpoint_step_(\d+)\.pt$`)

// StepCheckpointPath names the checkpoint of a step in dir.
func StepCheckpointPath(dir string, step int) string {
	return filepath.Join(dir, fmt.Sprintf("checkpoint_step_%06d.pt", step))
}

// EpochCheckpointPath names the end-of-epoch checkpoint (as the seed's
// checkpoints/checkpoint_epoch_15.pt).
func EpochCheckpointPath(dir string, epoch int) string {
	return filepath.Join(dir, fmt.Sprintf("checkpoint_epoch_%d.pt", epoch))
}

// LatestCheckpoint returns the newest step checkpoint in dir, whichever
// run wrote it (FitResult.Checkpoint is the last one a run wrote).
func LatestCheckpoint(dir string) (string, error) {
	steps, err := stepCheckpoints(dir)
	if err != nil {
		return "", err
	}
	if len(steps) == 0 {
		return "", fmt.Errorf("train: no checkpoint_step_*.pt in %s", dir)
	}
	return StepCheckpointPath(dir, steps[len(steps)-1]), nil
}

func stepCheckpoints(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, e := range entries {
		if m := ckptName.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

var (
	epochName = regexp.MustCompile(`^checkpoint_epoch_(\d+)\.pt$`)
	// tempName matches the temporary file ptfile.Save writes a checkpoint
	// into before renaming it: .checkpoint_step_N.pt.tmp-PID-RANDOM (or,
	// from torchfit before PIDs were added, .checkpoint_step_N.pt.tmp-RANDOM).
	tempName = regexp.MustCompile(`^\.checkpoint_(?:step|epoch)_\d+\.pt\.tmp-(?:(\d+)-)?\d+$`)
)

// ConflictError is Fit's refusal, before the first step, to write
// checkpoints over files that another run wrote in the same directory
// (FitConfig.Overwrite allows it; resuming that run makes them this run's).
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

// run is what Fit knows of its run's checkpoints in the checkpoint
// directory. Only these files are ever pruned or overwritten (without
// FitConfig.Overwrite): the ones this process wrote and, when it resumed
// from a file in the same directory, that file, the run's step checkpoints
// listed in it, and files of the run written after it that are in the way.
type run struct {
	id    string
	dir   string
	keep  int
	steps []int           // step checkpoints in dir, ascending
	owned map[string]bool // base names of the run's files in dir
}

func newRunID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// adopt makes the checkpoint that Fit resumes from, and its run's step
// checkpoints listed in it, this run's when they are in dir. A listed file
// changed after the resumed one was written is no longer the run's (another
// run replaced it) and stays out.
func (r *run) adopt(resume string, c Checkpoint) error {
	same, err := sameDir(filepath.Dir(resume), r.dir)
	if err != nil || !same {
		return err
	}
	st, err := os.Stat(resume)
	if err != nil {
		return err
	}
	base := filepath.Base(resume)
	r.own(base)
	if c.RunID == "" {
		return nil
	}
	for _, name := range c.RunFiles {
		if fi, err := os.Stat(filepath.Join(r.dir, name)); err == nil && !fi.ModTime().After(st.ModTime()) {
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

// own records a file of dir as the run's.
func (r *run) own(name string) {
	r.owned[name] = true
	if m := ckptName.FindStringSubmatch(name); m != nil {
		n, _ := strconv.Atoi(m[1])
		if i := sort.SearchInts(r.steps, n); i == len(r.steps) || r.steps[i] != n {
			r.steps = slices.Insert(r.steps, i, n)
		}
	}
}

// stepFiles returns the base names of the run's step checkpoints once
// step n (none when n < 0) is written, before the oldest are pruned: a
// run killed between the write and the pruning still knows them when it
// resumes from the new file.
func (r *run) stepFiles(n int) []string {
	steps := append([]int(nil), r.steps...)
	if i := sort.SearchInts(steps, n); n >= 0 && (i == len(steps) || steps[i] != n) {
		steps = slices.Insert(steps, i, n)
	}
	names := make([]string, len(steps))
	for k, s := range steps {
		names[k] = filepath.Base(StepCheckpointPath("", s))
	}
	return names
}

// prune removes the run's oldest step checkpoints beyond keep (never a
// file of another run).
func (r *run) prune() error {
	if r.keep <= 0 {
		return nil
	}
	var errs []error
	for len(r.steps) > r.keep {
		path := StepCheckpointPath(r.dir, r.steps[0])
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		delete(r.owned, filepath.Base(path))
		r.steps = r.steps[1:]
	}
	return errors.Join(errs...)
}

// conflicts returns the files of other runs in dir that a run going from
// step first to at most step last, and from epoch firstEpoch to lastEpoch,
// could write over (step checkpoints first..last, epoch checkpoints
// firstEpoch+1..lastEpoch), and how many other checkpoints dir holds.
func (r *run) conflicts(first, last, firstEpoch, lastEpoch int) (clash []string, others int, err error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	for _, e := range entries {
		name := e.Name()
		if r.owned[name] {
			continue
		}
		if m := ckptName.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n >= first && n <= last {
				clash = append(clash, name)
			} else {
				others++
			}
		} else if m := epochName.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n > firstEpoch && n <= lastEpoch {
				clash = append(clash, name)
			} else {
				others++
			}
		}
	}
	return clash, others, nil
}

// claim makes the files among names (in dir) that carry the run's id the
// run's, and returns the others. It reads each file: Fit calls it only for
// the few files in the way of a resumed run.
func (r *run) claim(names []string) (others []string) {
	for _, name := range names {
		if runIDOf(filepath.Join(r.dir, name)) == r.id {
			r.own(name)
		} else {
			others = append(others, name)
		}
	}
	return others
}

// runIDOf returns the run id stored in a checkpoint ("" when there is
// none or the file does not load).
func runIDOf(path string) string {
	v, err := ptfile.Load(path)
	if err != nil {
		return ""
	}
	defer ptfile.FreeAll(v)
	if d, ok := v.(*ptfile.Dict); ok {
		if id, ok := d.Get("run_id"); ok {
			s, _ := id.(string)
			return s
		}
	}
	return ""
}

// removeOrphanTemps deletes the temporary files of checkpoint writes that
// a kill (or a crash) interrupted in dir: the hidden .checkpoint_*.pt.tmp-*
// files of ptfile.Save, and only those whose writer is gone — the writer
// holds a flock on its file while it writes, and the PID in the name
// (when there is one) must be dead or this process's own (a process that
// is not writing there now: a previous life under the same PID).
func removeOrphanTemps(dir string) (removed []string, err error) {
	entries, err := os.ReadDir(dir)
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
		if m[1] != "" {
			pid, err := strconv.Atoi(m[1])
			if err != nil || (pid != os.Getpid() && processAlive(pid)) {
				continue
			}
		}
		path := filepath.Join(dir, e.Name())
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

// processAlive reports whether a process with this PID exists (EPERM: it
// does, owned by someone else).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
