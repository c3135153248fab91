package accumulate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
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
type Checkpoint struct {
	Step, Epoch       int
	MicroBatch, Accum int
	Loader            data.State
	Meta              *torch.Dict
}

func namedDict(ns []nn.Named, ordered bool) *torch.Dict {
	d := &torch.Dict{Ordered: ordered}
	for _, n := range ns {
		d.Set(n.Name, n.T)
	}
	return d
}

// SaveCheckpoint writes the trainer's complete state to path atomically.
func (t *Trainer) SaveCheckpoint(path string, loader data.State, epoch int, meta *torch.Dict) error {
	return torch.TidyErr(func() error {
		ck := torch.NewDict()
		ck.Set("model", namedDict(nn.StateDict(t.Model), true))
		ck.Set("optimizer", namedDict(t.Opt.State(), false))
		if t.Sched != nil {
			ck.Set("scheduler", namedDict(t.Sched.State(), false))
		}
		sc := torch.NewDict()
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
		ck.Set("loader", torch.NewDict("epoch", int64(loader.Epoch), "batch", int64(loader.Batch), "seed", int64(loader.Seed)))
		ck.Set("step", int64(t.step))
		ck.Set("epoch", int64(epoch))
		ck.Set("micro_batch", int64(t.micro))
		ck.Set("accum", int64(t.cfg.Accum))
		ck.Set("effective_batch", int64(t.cfg.EffectiveBatch()))
		if meta == nil {
			meta = torch.NewDict()
		}
		ck.Set("meta", meta)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return torch.Save(path, ck)
	})
}

// LoadCheckpoint restores a checkpoint written by SaveCheckpoint into the
// trainer (model, optimizer, schedule, scaler, RNG, step, micro-batch) and
// returns where the run was. Nothing changes when the file is corrupt or
// belongs to another model (missing keys, other shapes): the error names
// the problem, and the file is only read.
func (t *Trainer) LoadCheckpoint(path string) (Checkpoint, error) {
	v, err := torch.Load(path)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("accumulate: checkpoint %s: %w", path, err)
	}
	defer torch.FreeAll(v)
	ck, ok := v.(*torch.Dict)
	if !ok {
		return Checkpoint{}, fmt.Errorf("accumulate: %s is not a torchfit checkpoint (a %T, not a dict)", path, v)
	}
	fail := func(format string, args ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("accumulate: checkpoint %s: "+format, append([]any{path}, args...)...)
	}
	tensors := func(key string) (map[string]*torch.Tensor, error) {
		x, ok := ck.Get(key)
		if !ok {
			return nil, fmt.Errorf("no %q entry", key)
		}
		d, ok := x.(*torch.Dict)
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
		d, ok := x.(*torch.Dict)
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
	if m, ok := ck.Get("meta"); ok {
		if d, ok := m.(*torch.Dict); ok {
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
		if d, ok := x.(*torch.Dict); ok {
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
func copyPlain(d *torch.Dict) *torch.Dict {
	out := &torch.Dict{Ordered: d.Ordered}
	for _, e := range d.Entries {
		switch v := e.Value.(type) {
		case *torch.Tensor:
		case *torch.Dict:
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

// LatestCheckpoint returns the newest step checkpoint in dir.
func LatestCheckpoint(dir string) (string, error) {
	steps, err := stepCheckpoints(dir)
	if err != nil {
		return "", err
	}
	if len(steps) == 0 {
		return "", fmt.Errorf("accumulate: no checkpoint_step_*.pt in %s", dir)
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

// pruneCheckpoints keeps the newest keep step checkpoints in dir.
func pruneCheckpoints(dir string, keep int) error {
	if keep <= 0 {
		return nil
	}
	steps, err := stepCheckpoints(dir)
	if err != nil {
		return err
	}
	var errs []error
	for len(steps) > keep {
		if err := os.Remove(StepCheckpointPath(dir, steps[0])); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		steps = steps[1:]
	}
	return errors.Join(errs...)
}
