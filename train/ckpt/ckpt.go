// Package ckpt is torchfit's one checkpoint format: what a training
// checkpoint holds, written and read in PyTorch's torch.save format
// (package ptfile), so Python's torch.load opens it.
//
// A checkpoint is a dict of named parts; a part's name is the recipe's
// choice, and the single-model trainer uses PyTorch's usual ones:
//
//	model       OrderedDict: a module's state dict (Writer.Module)
//	optimizer   dict: an optimizer's named state (Writer.Optimizer)
//	scheduler   dict: a schedule's state (Writer.Schedule)
//	scaler      dict: a GradScaler's state (Writer.Scaler)
//	rng_state   uint8 tensor: the CPU generator (Writer.RNG)
//	loader      dict: epoch, batch, seed of the next batch (Writer.Loader);
//	            samples, world too for a data-parallel run's sharded loader
//	step, epoch, micro_batch, accum, effective_batch   ints (Writer.Int)
//	meta        dict of the recipe's plain values: preset, vocabulary (Writer.Meta)
//	run_id, run_checkpoints   the run that wrote it (Writer.Run)
//
// A recipe with several networks names each (a GAN: "generator",
// "discriminator", "optimizer_g", "optimizer_d"). Read loads a file once;
// File's methods restore each part, checking names and shapes before
// anything changes, so a file of another model is refused with the first
// mismatch named and nothing modified.
package ckpt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/torch/ptfile"
)

// Error is a checkpoint that cannot be used: unreadable, not a torchfit
// checkpoint, or of another model. Nothing was changed.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("checkpoint %s: %v", e.Path, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// UserError marks it as the user's input (a command line exits 2).
func (*Error) UserError() {}

// ---- writing ----------------------------------------------------------------

// Writer assembles a checkpoint. Add parts, then Save. Tensors are
// referenced, not copied: Save while the model is unchanged.
type Writer struct{ d *ptfile.Dict }

// NewWriter returns an empty checkpoint.
func NewWriter() *Writer { return &Writer{d: ptfile.NewDict()} }

func namedDict(ns []nn.Named, ordered bool) *ptfile.Dict {
	d := &ptfile.Dict{Ordered: ordered}
	for _, n := range ns {
		d.Set(n.Name, n.T)
	}
	return d
}

// Module adds m's state dict (an OrderedDict, as PyTorch's).
func (w *Writer) Module(key string, m nn.Module) { w.d.Set(key, namedDict(nn.StateDict(m), true)) }

// Optimizer adds o's named state.
func (w *Writer) Optimizer(key string, o nn.Optimizer) { w.d.Set(key, namedDict(o.State(), false)) }

// Schedule adds s's state (nothing when s is nil).
func (w *Writer) Schedule(key string, s *nn.Schedule) {
	if s != nil {
		w.d.Set(key, namedDict(s.State(), false))
	}
}

// Scaler adds a GradScaler's state (scale, growth tracker, settings).
func (w *Writer) Scaler(key string, s *amp.GradScaler) {
	sc := ptfile.NewDict()
	st := s.State()
	keys := make([]string, 0, len(st))
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sc.Set(k, st[k])
	}
	w.d.Set(key, sc)
}

// RNG adds the CPU generator's state as rng_state.
func (w *Writer) RNG() { w.d.Set("rng_state", torch.RNGState()) }

// Loader adds a loader's position as loader.
func (w *Writer) Loader(st data.State) {
	d := ptfile.NewDict("epoch", int64(st.Epoch), "batch", int64(st.Batch), "seed", int64(st.Seed))
	if st.World > 0 { // a position in samples (torch/data: State)
		d.Set("samples", int64(st.Samples))
		d.Set("world", int64(st.World))
	}
	w.d.Set("loader", d)
}

// Int adds an integer.
func (w *Writer) Int(key string, v int) { w.d.Set(key, int64(v)) }

// Meta adds the recipe's plain values (strings, numbers, nested dicts) as
// meta; nil adds an empty dict.
func (w *Writer) Meta(m *ptfile.Dict) {
	if m == nil {
		m = ptfile.NewDict()
	}
	w.d.Set("meta", m)
}

// Run records the run that writes the file and the base names of its
// checkpoints in the directory that it prunes (train.Run.Files), this one
// included.
func (w *Writer) Run(id string, files []string) {
	if id == "" {
		return
	}
	list := make([]any, len(files))
	for k, f := range files {
		list[k] = f
	}
	w.d.Set("run_id", id)
	w.d.Set("run_checkpoints", list)
}

// Save writes the checkpoint to path atomically (a temporary file, fsync,
// rename), creating the directory.
func (w *Writer) Save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return ptfile.Save(path, w.d)
}

// ---- reading ----------------------------------------------------------------

// File is a checkpoint read into memory. Free it when done.
type File struct {
	Path string
	d    *ptfile.Dict
	root any
}

// Read loads a checkpoint file.
func Read(path string) (*File, error) {
	v, err := ptfile.Load(path)
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	d, ok := v.(*ptfile.Dict)
	if !ok {
		ptfile.FreeAll(v)
		return nil, &Error{Path: path, Err: fmt.Errorf("not a torchfit checkpoint (a %T, not a dict)", v)}
	}
	return &File{Path: path, d: d, root: v}, nil
}

// Free releases the file's tensors.
func (f *File) Free() {
	if f != nil && f.root != nil {
		ptfile.FreeAll(f.root)
		f.root = nil
	}
}

func (f *File) fail(format string, args ...any) error {
	return &Error{Path: f.Path, Err: fmt.Errorf(format, args...)}
}

// Has reports whether the file has a part.
func (f *File) Has(key string) bool { _, ok := f.d.Get(key); return ok }

// Tensors returns a dict part's tensors by name.
func (f *File) Tensors(key string) (map[string]*torch.Tensor, error) {
	x, ok := f.d.Get(key)
	if !ok {
		return nil, f.fail("no %q entry", key)
	}
	d, ok := x.(*ptfile.Dict)
	if !ok {
		return nil, f.fail("%q is a %T, not a dict", key, x)
	}
	out := map[string]*torch.Tensor{}
	for _, e := range d.Entries {
		name, _ := e.Key.(string)
		tv, ok := e.Value.(*torch.Tensor)
		if !ok {
			return nil, f.fail("%q[%v] is not a tensor", key, e.Key)
		}
		out[name] = tv
	}
	return out, nil
}

// CheckModule reports whether part key holds m's state dict, name for name
// and shape for shape, without changing m.
func (f *File) CheckModule(key string, m nn.Module) error {
	sd, err := f.Tensors(key)
	if err != nil {
		return err
	}
	var missing, unexpected []string
	have := map[string]bool{}
	for _, p := range nn.StateDict(m) {
		have[p.Name] = true
		src, ok := sd[p.Name]
		if !ok {
			missing = append(missing, p.Name)
			continue
		}
		if fmt.Sprint(src.Shape()) != fmt.Sprint(p.T.Shape()) {
			return f.fail("it was saved from another model: %s has shape %v in the checkpoint, %v in this model", p.Name, src.Shape(), p.T.Shape())
		}
	}
	for k := range sd {
		if !have[k] {
			unexpected = append(unexpected, k)
		}
	}
	if len(missing) > 0 || len(unexpected) > 0 {
		sort.Strings(unexpected)
		return f.fail("it was saved from another model: missing keys %v, unexpected keys %v", head(missing), head(unexpected))
	}
	return nil
}

// Module loads part key into m (strict: CheckModule first).
func (f *File) Module(key string, m nn.Module) error {
	if err := f.CheckModule(key, m); err != nil {
		return err
	}
	sd, _ := f.Tensors(key)
	if _, err := nn.LoadStateDict(m, sd, true); err != nil {
		return f.fail("%v", err)
	}
	return nil
}

// Optimizer loads part key into o.
func (f *File) Optimizer(key string, o nn.Optimizer) error {
	st, err := f.Tensors(key)
	if err != nil {
		return err
	}
	if err := o.LoadState(st); err != nil {
		return f.fail("%s: %v", key, err)
	}
	return nil
}

// Schedule loads part key into s, when the file has it.
func (f *File) Schedule(key string, s *nn.Schedule) error {
	if s == nil || !f.Has(key) {
		return nil
	}
	st, err := f.Tensors(key)
	if err != nil {
		return err
	}
	if err := s.LoadState(st); err != nil {
		return f.fail("%s: %v", key, err)
	}
	return nil
}

// Scaler loads part key into s when the file's scaler was enabled.
func (f *File) Scaler(key string, s *amp.GradScaler) error {
	x, ok := f.d.Get(key)
	if !ok {
		return nil
	}
	d, ok := x.(*ptfile.Dict)
	if !ok {
		return nil
	}
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
		if err := s.LoadState(st); err != nil {
			return f.fail("%s: %v", key, err)
		}
	}
	return nil
}

// RNG restores the CPU generator from rng_state, when present.
func (f *File) RNG() error {
	rng := f.d.Tensor("rng_state")
	if rng == nil {
		return nil
	}
	if err := torch.Try(func() { torch.SetRNGState(rng) }); err != nil {
		return f.fail("rng_state: %v", err)
	}
	return nil
}

// Int returns an integer part.
func (f *File) Int(key string) (int, error) {
	x, ok := f.d.Get(key)
	if !ok {
		return 0, f.fail("no %q entry", key)
	}
	switch n := x.(type) {
	case int64:
		return int(n), nil
	case float64:
		return int(n), nil
	}
	return 0, f.fail("%q is a %T, not a number", key, x)
}

// Loader returns the loader position.
func (f *File) Loader() (data.State, error) {
	x, _ := f.d.Get("loader")
	d, ok := x.(*ptfile.Dict)
	if !ok {
		return data.State{}, f.fail("no loader position")
	}
	st := map[string]int64{}
	for _, e := range d.Entries {
		k, _ := e.Key.(string)
		if n, ok := e.Value.(int64); ok {
			st[k] = n
		}
	}
	return data.State{Epoch: int(st["epoch"]), Batch: int(st["batch"]), Seed: uint64(st["seed"]),
		Samples: int(st["samples"]), World: int(st["world"])}, nil
}

// Meta returns the recipe's plain values, a copy that outlives the file
// (tensors are dropped), or nil.
func (f *File) Meta() *ptfile.Dict {
	m, ok := f.d.Get("meta")
	if !ok {
		return nil
	}
	d, ok := m.(*ptfile.Dict)
	if !ok {
		return nil
	}
	return copyPlain(d)
}

// Run returns the run that wrote the file and its checkpoints then.
func (f *File) Run() (id string, files []string, err error) {
	x, ok := f.d.Get("run_id")
	if !ok {
		return "", nil, nil
	}
	if id, ok = x.(string); !ok {
		return "", nil, f.fail("run_id is a %T, not a string", x)
	}
	if x, ok := f.d.Get("run_checkpoints"); ok {
		list, ok := x.([]any)
		if !ok {
			return "", nil, f.fail("run_checkpoints is a %T, not a list", x)
		}
		for _, v := range list {
			name, ok := v.(string)
			if !ok || name == "" || name == "." || name == ".." || filepath.Base(name) != name {
				return "", nil, f.fail("run_checkpoints holds %v, not a file name", v)
			}
			files = append(files, name)
		}
	}
	return id, files, nil
}

func head(xs []string) []string {
	if len(xs) > 8 {
		return append(xs[:8:8], fmt.Sprintf("... %d more", len(xs)-8))
	}
	return xs
}

// copyPlain copies a dict dropping tensors (they are freed with the file).
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

// ---- names in a directory ------------------------------------------------------

var stepName = regexp.MustCompile(`^checkpoint_step_(\d+)\.pt$`)

// ParseStep returns the step a step checkpoint's base name is for.
func ParseStep(name string) (int, bool) {
	m := stepName.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// StepPath names the checkpoint of a step in dir.
func StepPath(dir string, step int) string {
	return filepath.Join(dir, fmt.Sprintf("checkpoint_step_%06d.pt", step))
}

// EpochPath names the end-of-epoch checkpoint (as the seed's
// checkpoints/checkpoint_epoch_15.pt).
func EpochPath(dir string, epoch int) string {
	return filepath.Join(dir, fmt.Sprintf("checkpoint_epoch_%d.pt", epoch))
}

// ErrNone is returned by Latest for a directory without step checkpoints.
var ErrNone = errors.New("no checkpoint_step_*.pt")

// Steps returns the step numbers of the step checkpoints in dir, sorted.
func Steps(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, e := range entries {
		if m := stepName.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// Latest returns the newest step checkpoint in dir (of any run).
func Latest(dir string) (string, error) {
	steps, err := Steps(dir)
	if err != nil {
		return "", err
	}
	if len(steps) == 0 {
		return "", fmt.Errorf("%s: %w", dir, ErrNone)
	}
	return StepPath(dir, steps[len(steps)-1]), nil
}
