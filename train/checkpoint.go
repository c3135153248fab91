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

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
	"github.com/torchfit/torchfit/train/ckpt"
)

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

// SaveCheckpoint writes the trainer's complete state to path atomically
// (package ckpt's format). It belongs to no run: Fit writes its own with
// the run's id. Data parallel (Config.Parallel), every rank calls it and
// rank 0 writes; an optimizer whose state is split over the ranks
// (GatheredState) is gathered first, so the file holds the whole state.
func (t *Trainer) SaveCheckpoint(path string, loader data.State, epoch int, meta *ptfile.Dict) error {
	return t.withGathered(func() error {
		if !t.writer() {
			return nil
		}
		return t.saveCheckpoint(path, loader, epoch, meta, "", nil)
	})
}

// writer says whether this process writes checkpoints: rank 0 of a data
// parallel run, or the only process.
func (t *Trainer) writer() bool { return t.cfg.Parallel == nil || t.cfg.Parallel.Rank() == 0 }

// withGathered runs fn with a GatheredState optimizer's whole state
// gathered (on every rank: a collective), and fn alone otherwise.
func (t *Trainer) withGathered(fn func() error) error {
	g, ok := t.Opt.(GatheredState)
	if !ok {
		return fn()
	}
	var release func()
	err := t.Thread().DoErr(func() error {
		var err error
		release, err = g.GatherState()
		return err
	})
	if err != nil {
		return err
	}
	defer t.Thread().Do(release)
	return fn()
}

func (t *Trainer) saveCheckpoint(path string, loader data.State, epoch int, meta *ptfile.Dict, runID string, runFiles []string) error {
	return t.Thread().DoErr(func() error {
		return torch.TidyErr(func() error {
			w := ckpt.NewWriter()
			w.Module("model", t.Model)
			w.Optimizer("optimizer", t.Opt)
			w.Schedule("scheduler", t.Sched)
			w.Scaler("scaler", t.Scaler)
			w.RNG()
			w.Loader(loader)
			w.Int("step", t.step)
			w.Int("epoch", epoch)
			w.Int("micro_batch", t.engine.MicroBatch())
			w.Int("accum", t.cfg.Accum)
			w.Int("effective_batch", t.cfg.EffectiveBatch())
			w.Meta(meta)
			w.Run(runID, runFiles)
			return w.Save(path)
		})
	})
}

// LoadCheckpoint restores a checkpoint written by SaveCheckpoint into the
// trainer (model, optimizer, schedule, scaler, RNG, step, micro-batch) and
// returns where the run was. Nothing changes when the file is corrupt or
// belongs to another model (missing keys, other shapes): the error (a
// *ckpt.Error) names the problem, and the file is only read.
func (t *Trainer) LoadCheckpoint(path string) (c Checkpoint, err error) {
	t.Thread().Do(func() { c, err = t.loadCheckpoint(path) })
	return c, err
}

func (t *Trainer) loadCheckpoint(path string) (Checkpoint, error) {
	f, err := ckpt.Read(path)
	if err != nil {
		return Checkpoint{}, err
	}
	defer f.Free()
	// Check everything before changing anything.
	if err := f.CheckModule("model", t.Model); err != nil {
		return Checkpoint{}, err
	}
	if _, err := f.Tensors("optimizer"); err != nil {
		return Checkpoint{}, err
	}
	var c Checkpoint
	if c.Loader, err = f.Loader(); err != nil {
		return Checkpoint{}, err
	}
	for _, p := range []struct {
		key string
		dst *int
	}{{"step", &c.Step}, {"epoch", &c.Epoch}, {"micro_batch", &c.MicroBatch}, {"accum", &c.Accum}} {
		if *p.dst, err = f.Int(p.key); err != nil {
			return Checkpoint{}, err
		}
	}
	if c.RunID, c.RunFiles, err = f.Run(); err != nil {
		return Checkpoint{}, err
	}
	c.Meta = f.Meta()
	for _, load := range []func() error{
		func() error { return f.Module("model", t.Model) },
		func() error { return f.Optimizer("optimizer", t.Opt) },
		func() error { return f.Schedule("scheduler", t.Sched) },
		func() error { return f.Scaler("scaler", t.Scaler) },
		f.RNG,
	} {
		if err := load(); err != nil {
			return Checkpoint{}, err
		}
	}
	t.step = c.Step
	t.SetMicroBatch(c.MicroBatch)
	return c, nil
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
	if n, ok := ckpt.ParseStep(name); ok {
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
		names[k] = filepath.Base(ckpt.StepPath("", s))
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
		path := ckpt.StepPath(r.dir, r.steps[0])
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
		if n, ok := ckpt.ParseStep(name); ok {
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
