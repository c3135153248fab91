// Package ckpt is torchfit's one checkpoint format: what a training
// checkpoint holds, written and read in PyTorch's torch.save format
// (package ptfile), so Python's torch.load opens it.
//
// A checkpoint is a dict of named parts; a part's name is the recipe's
// choice, and the single-model trainer uses PyTorch's usual ones:
//
//	model       OrderedDict: a module's state dict (Writer.Module)
//	optimizer   dict: the optimizer's state_dict() as PyTorch's (Writer.Optimizer):
//	            {"state": {0: {"step", "exp_avg", ...}, ...}, "param_groups": [...]}
//	scheduler   dict: LambdaLR's state_dict() (Writer.Schedule)
//	scaler      dict: GradScaler's state_dict() (Writer.Scaler)
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
// mismatch named and nothing modified. ReadParts loads only the parts
// named (inference: "meta" and "model"), so an optimizer's state is never
// allocated where only the weights are wanted. Open reads one file in
// several calls: Reader.Describe gives a part's tensors' shapes without
// allocating them (CheckModule works on it) and Reader.Parts reads parts,
// so a resume (train.Trainer.LoadCheckpoint) checks the model against the
// file's description and then holds one part's tensors at a time.
//
// The optimizer, scheduler and scaler parts are PyTorch's own state_dict()
// layouts, so a Python loop resumes a torchfit run with
// model.load_state_dict(ck["model"]), opt.load_state_dict(ck["optimizer"]),
// sched.load_state_dict(ck["scheduler"]) and
// scaler.load_state_dict(ck["scaler"]), and torchfit resumes from a Python
// torch.save of those (Read accepts PyTorch's layouts and torchfit's
// older flat ones: "state.<param>.exp_avg", "param_groups.0.lr", ...).
//
// torch.load(path, weights_only=True) opens these files on PyTorch 2.x.
// PyTorch 1.13's weights_only unpickler has no BINFLOAT opcode ("Unsupported
// operand 71"): it refuses any Python float, so every checkpoint with an
// optimizer (lr, betas) or scaler (scale), as it refuses PyTorch's own
// torch.save(opt.state_dict()); weights_only=False opens them there.
package ckpt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

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

func namedDict(ns torch.StateDict, ordered bool) *ptfile.Dict {
	d := &ptfile.Dict{Ordered: ordered}
	for _, n := range ns {
		d.Set(n.Name, n.T)
	}
	return d
}

// Module adds m's state dict (an OrderedDict, as PyTorch's).
func (w *Writer) Module(key string, m nn.Module) { w.d.Set(key, namedDict(nn.StateDict(m), true)) }

// Optimizer adds o's state as PyTorch's optimizer state_dict() (so
// torch.optim's load_state_dict takes it): "state", a dict from parameter
// index to its buffers ("step", "exp_avg", ... as 0-d and parameter-shaped
// tensors), and "param_groups", a list of dicts of the hyperparameters,
// "params" the indices. Parameters are numbered across the groups in
// order (o.Groups()), as PyTorch numbers them: a Python optimizer made
// over the same parameters in the same order and groups loads it. The
// keys are those of the loaded libtorch's PyTorch (1.13's or 2.x's). An
// optimizer PyTorch has no layout for (nn.KindOf gives none, for it or
// for the optimizer a wrapper struct embeds) is written as torchfit's flat
// named state.
func (w *Writer) Optimizer(key string, o nn.Optimizer) {
	d, err := optimizerDict(o)
	if err != nil {
		panic(fmt.Sprintf("ckpt: Optimizer(%q): %v", key, err)) // State's own keys: a bug
	}
	if d == nil {
		w.d.Set(key, namedDict(o.State(), false))
		return
	}
	w.d.Set(key, d)
}

// Schedule adds s's state as LambdaLR's state_dict() (last_epoch,
// base_lrs, _last_lr, _step_count, ...; lr_lambdas None, as PyTorch saves
// a function), nothing when s is nil.
func (w *Writer) Schedule(key string, s *nn.Schedule) {
	if s != nil {
		w.d.Set(key, scheduleDict(s))
	}
}

// Scaler adds a GradScaler's state as PyTorch's GradScaler.state_dict():
// scale, growth_factor, backoff_factor, growth_interval, _growth_tracker;
// an empty dict for a disabled scaler.
func (w *Writer) Scaler(key string, s *amp.GradScaler) { w.d.Set(key, scalerDict(s)) }

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
	Path  string
	d     *ptfile.Dict
	root  any
	parts []string // what ReadParts read; nil: every part
	keys  []any    // the file's parts, read or not (ReadParts)
}

// Read loads a checkpoint file, every part: what resuming a run needs.
func Read(path string) (*File, error) { return read(path, nil) }

// ReadParts loads only the named parts of a checkpoint, and only their
// tensors' storages (ptfile.LoadParts): ReadParts(path, "meta", "model")
// is what inference needs, without the optimizer's moments, which for
// AdamW are twice the weights' bytes and would otherwise be held while the
// model is built. Has reports every part of the file, read or not; asking
// for the contents of a part the file has but that was not named is a bug
// in the caller and panics (a part the file lacks is absent, as in Read).
func ReadParts(path string, parts ...string) (*File, error) {
	if parts == nil {
		parts = []string{}
	}
	return read(path, parts)
}

func read(path string, parts []string) (*File, error) {
	var v any
	var keys []any
	var err error
	if parts == nil {
		v, err = ptfile.Load(path)
	} else {
		var d *ptfile.Dict
		if d, keys, err = ptfile.LoadParts(path, parts...); err == nil {
			v = d
		}
	}
	return newFile(path, v, keys, parts, err)
}

// Reader reads one checkpoint file in several calls: its model described
// and checked first, say, then its other parts, then the model's tensors,
// so that no more than one part's tensors are held at a time. Every call
// reads the file Open opened, whatever happens to its path meanwhile.
type Reader struct {
	Path string
	f    *os.File
	size int64
}

// Open opens a checkpoint for reading part by part. Close it.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &Error{Path: path, Err: err}
	}
	return &Reader{Path: path, f: f, size: st.Size()}, nil
}

// Close closes the file; Files read from it stay valid.
func (r *Reader) Close() error { return r.f.Close() }

// Parts reads the named parts, as ReadParts does.
func (r *Reader) Parts(parts ...string) (*File, error) {
	return r.read(ptfile.LoadPartsFrom, parts)
}

// Describe is Parts with each tensor a *ptfile.TensorInfo, its shape and
// dtype (ptfile.DescribePartsFrom): nothing is allocated, and the parts'
// storage records are read through to their checksums, so that reading
// the parts afterwards cannot fail on the file's account. CheckModule
// works on a described part; restoring one (Module, Optimizer, ...) is
// an error.
func (r *Reader) Describe(parts ...string) (*File, error) {
	return r.read(ptfile.DescribePartsFrom, parts)
}

func (r *Reader) read(load func(io.ReaderAt, int64, ...string) (*ptfile.Dict, []any, error), parts []string) (*File, error) {
	if parts == nil {
		parts = []string{}
	}
	d, keys, err := load(r.f, r.size, parts...)
	if err != nil {
		return newFile(r.Path, nil, nil, parts, err)
	}
	return newFile(r.Path, d, keys, parts, nil)
}

// newFile is the File of what was read, or the error of reading it.
func newFile(path string, v any, keys []any, parts []string, err error) (*File, error) {
	if errors.Is(err, torch.ErrOutOfMemory) {
		// Not the file's fault: the memory (or the cap) is too small.
		return nil, fmt.Errorf("checkpoint %s: loading: %w", path, err)
	}
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	d, ok := v.(*ptfile.Dict)
	if !ok {
		ptfile.FreeAll(v)
		return nil, &Error{Path: path, Err: fmt.Errorf("not a torchfit checkpoint (a %T, not a dict)", v)}
	}
	return &File{Path: path, d: d, root: v, parts: parts, keys: keys}, nil
}

// get returns part key, panicking when the file has it but it was not
// read (ReadParts, Reader.Parts); a part the file lacks is absent.
func (f *File) get(key string) (any, bool) {
	if f.parts != nil && !slices.Contains(f.parts, key) && slices.Contains(f.keys, any(key)) {
		panic(fmt.Sprintf("ckpt: part %q of %s asked for, but the file was read with parts %q", key, f.Path, f.parts))
	}
	return f.d.Get(key)
}

// Keys returns every part of the file, read or not, in file order.
func (f *File) Keys() []string {
	keys := f.keys
	if f.parts == nil {
		keys = f.d.Keys()
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if s, ok := k.(string); ok {
			out = append(out, s)
		}
	}
	return out
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

// Has reports whether the file has a part (read by ReadParts or not).
func (f *File) Has(key string) bool {
	if f.parts != nil {
		return slices.Contains(f.keys, any(key))
	}
	_, ok := f.d.Get(key)
	return ok
}

// dict returns part key, a dict.
func (f *File) dict(key string) (*ptfile.Dict, error) {
	x, ok := f.get(key)
	if !ok {
		return nil, f.fail("no %q entry", key)
	}
	d, ok := x.(*ptfile.Dict)
	if !ok {
		return nil, f.fail("%q is a %T, not a dict", key, x)
	}
	return d, nil
}

// Tensors returns a dict part's tensors, in file order. They are the
// file's: File.Free releases them.
func (f *File) Tensors(key string) (torch.StateDict, error) {
	d, err := f.dict(key)
	if err != nil {
		return nil, err
	}
	out := make(torch.StateDict, 0, len(d.Entries))
	for _, e := range d.Entries {
		name, _ := e.Key.(string)
		tv, ok := e.Value.(*torch.Tensor)
		if !ok {
			return nil, f.fail("%q[%v] is not a tensor", key, e.Key)
		}
		out = append(out, torch.Named{Name: name, T: tv})
	}
	return out, nil
}

// Shapes returns a dict part's tensors' shapes by name, read or described
// (Reader.Describe).
func (f *File) Shapes(key string) (map[string][]int64, error) {
	d, err := f.dict(key)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]int64, len(d.Entries))
	for _, e := range d.Entries {
		name, _ := e.Key.(string)
		switch v := e.Value.(type) {
		case *torch.Tensor:
			out[name] = v.Shape()
		case *ptfile.TensorInfo:
			out[name] = v.Shape
		default:
			return nil, f.fail("%q[%v] is not a tensor", key, e.Key)
		}
	}
	return out, nil
}

// CheckModule reports whether part key holds m's state dict, name for name
// and shape for shape, without changing m. The part may be described
// (Reader.Describe) rather than read.
func (f *File) CheckModule(key string, m nn.Module) error {
	sd, err := f.Shapes(key)
	if err != nil {
		return err
	}
	var missing, unexpected []string
	have := map[string]bool{}
	for _, p := range nn.StateDict(m) {
		have[p.Name] = true
		shape, ok := sd[p.Name]
		if !ok {
			missing = append(missing, p.Name)
			continue
		}
		if fmt.Sprint(shape) != fmt.Sprint(p.T.Shape()) {
			return f.fail("it was saved from another model: %s has shape %v in the checkpoint, %v in this model", p.Name, shape, p.T.Shape())
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

// optimizerState returns part key as o.LoadState's named tensors, from
// PyTorch's state_dict() layout or torchfit's flat one (files written
// before PyTorch's); free releases what it made.
func (f *File) optimizerState(key string, o nn.Optimizer) (sd map[string]*torch.Tensor, free func(), err error) {
	x, ok := f.get(key)
	if !ok {
		return nil, nil, f.fail("no %q entry", key)
	}
	d, ok := x.(*ptfile.Dict)
	if !ok {
		return nil, nil, f.fail("%q is a %T, not a dict", key, x)
	}
	if !isPyTorchOptimizer(d) {
		st, err := f.Tensors(key)
		return st.Map(), func() {}, err
	}
	if e := torch.Try(func() { sd, free, err = optimizerFromPyTorch(d, o) }); e != nil {
		err = e // a tensor error (a freed tensor)
	}
	if err != nil {
		return nil, nil, f.fail("%s: %w", key, err)
	}
	return sd, free, nil
}

// CheckOptimizer reports whether part key is an optimizer state o can
// load (groups, parameters, shapes), without changing o.
func (f *File) CheckOptimizer(key string, o nn.Optimizer) error {
	sd, free, err := f.optimizerState(key, o)
	if err != nil {
		return err
	}
	defer free()
	index, _, shapes := paramIndex(o)
	for k, t := range sd {
		rest, ok := strings.CutPrefix(k, "state.")
		i := strings.LastIndexByte(rest, '.')
		if !ok || i < 0 {
			continue
		}
		p, ok := index[rest[:i]]
		if !ok {
			return f.fail("%s: state of a parameter %q this optimizer does not have", key, rest[:i])
		}
		if buf := rest[i+1:]; buf != "step" && fmt.Sprint(t.Shape()) != fmt.Sprint(shapes[p]) {
			return f.fail("%s: it was saved from another model: %s has shape %v, the parameter %v", key, k, t.Shape(), shapes[p])
		}
	}
	return nil
}

// Optimizer loads part key into o: PyTorch's state_dict() layout (what
// Writer.Optimizer writes, or Python's torch.save of opt.state_dict()) or
// torchfit's older flat named state.
func (f *File) Optimizer(key string, o nn.Optimizer) error {
	sd, free, err := f.optimizerState(key, o)
	if err != nil {
		return err
	}
	defer free()
	if err := o.LoadState(sd); err != nil {
		return f.fail("%s: %w", key, err)
	}
	return nil
}

// Schedule loads part key into s, when the file has it: a PyTorch
// scheduler's state_dict() (last_epoch and base_lrs are what s keeps) or
// torchfit's older flat state.
func (f *File) Schedule(key string, s *nn.Schedule) error {
	if s == nil || !f.Has(key) {
		return nil
	}
	x, _ := f.get(key)
	if d, ok := x.(*ptfile.Dict); ok {
		if _, torchLayout := d.Get("base_lrs"); torchLayout {
			last, base, err := scheduleFromPyTorch(d)
			if err == nil {
				err = s.SetState(last, base)
			}
			if err != nil {
				return f.fail("%s: %w", key, err)
			}
			return nil
		}
	}
	st, err := f.Tensors(key)
	if err != nil {
		return err
	}
	if err := s.LoadState(st.Map()); err != nil {
		return f.fail("%s: %w", key, err)
	}
	return nil
}

// Scaler loads part key into s when the file's scaler was enabled: a
// GradScaler.state_dict() (scale, _growth_tracker; empty when disabled)
// or torchfit's older layout (scale, growth_tracker, enabled). s keeps
// its own growth factor, backoff factor and interval.
func (f *File) Scaler(key string, s *amp.GradScaler) error {
	x, ok := f.get(key)
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
		if n, ok := number(e.Value); ok {
			st[strings.TrimPrefix(k, "_")] = n // PyTorch's _growth_tracker
		}
	}
	if enabled, old := st["enabled"]; old && enabled != 1 || len(st) == 0 {
		return nil
	}
	if err := s.LoadState(st); err != nil {
		return f.fail("%s: %w", key, err)
	}
	return nil
}

// RNG restores the CPU generator from rng_state, when present.
func (f *File) RNG() error {
	x, _ := f.get("rng_state")
	rng, _ := x.(*torch.Tensor)
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
	x, ok := f.get(key)
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
	x, _ := f.get("loader")
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
	m, ok := f.get("meta")
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
	x, ok := f.get("run_id")
	if !ok {
		return "", nil, nil
	}
	if id, ok = x.(string); !ok {
		return "", nil, f.fail("run_id is a %T, not a string", x)
	}
	if x, ok := f.get("run_checkpoints"); ok {
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
