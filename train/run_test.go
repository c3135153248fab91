package train_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// twoModels is what a GAN run registers: two networks, their optimizers
// and a scaler.
type twoModels struct {
	gen, disc *nn.Linear
	optG      nn.Optimizer
	scaler    *amp.GradScaler
}

func newTwoModels(t *testing.T, seed uint64) *twoModels {
	torch.ManualSeed(seed)
	m := &twoModels{gen: nn.NewLinear(4, 3, true), disc: nn.NewLinear(3, 1, true)}
	m.optG = nn.NewSGD(nn.Parameters(m.gen), nn.SGDConfig{LR: 0.1, Momentum: 0.9})
	m.scaler = amp.NewGradScaler(torch.CPU, amp.ScalerOptions{})
	t.Cleanup(func() { m.optG.Free(); nn.Free(m.gen); nn.Free(m.disc) })
	return m
}

func (m *twoModels) register(r *train.Run) {
	r.Register("generator", m.gen)
	r.Register("discriminator", m.disc)
	r.Register("optimizer_g", m.optG)
	r.Register("scaler", m.scaler)
}

var (
	ganKind = train.Kind{Name: "checkpoint_gan_epoch_%d.pt", Prune: true}
	clsKind = train.Kind{Name: "checkpoint_epoch_%d.pt", Prune: true}
)

func names(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A run of several models owns files of two kinds: it prunes each kind
// to KeepLast, lists its files in each checkpoint, refuses a new run in
// its way, and a resumed run adopts its files and restores every part.
func TestRunOwnsSeveralModelsCheckpoints(t *testing.T) {
	dir := t.TempDir()
	m := newTwoModels(t, 1)
	r, err := train.StartRun(train.RunConfig{Dir: dir, Kinds: []train.Kind{ganKind, clsKind}, KeepLast: 2})
	require.NoError(t, err)
	m.register(r)
	require.NoError(t, r.Check(func(train.Kind, int) bool { return true }))
	var pruned []string
	for e := 1; e <= 3; e++ {
		ev, err := r.Save(ganKind.File(e), nil)
		require.NoError(t, err)
		require.Equal(t, filepath.Join(dir, ganKind.File(e)), ev.Path)
		pruned = append(pruned, ev.Pruned...)
	}
	require.Equal(t, []string{filepath.Join(dir, ganKind.File(1))}, pruned)
	// The classifier stage: the discriminator is gone from later files.
	r.Drop("discriminator", "optimizer_g", "scaler")
	_, err = r.Save(clsKind.File(1), func(w *ckpt.Writer) { w.Int("epoch", 1) })
	require.NoError(t, err)
	require.ElementsMatch(t, []string{ganKind.File(2), ganKind.File(3), clsKind.File(1)}, names(dir))

	f, err := ckpt.Read(filepath.Join(dir, clsKind.File(1)))
	require.NoError(t, err)
	defer f.Free()
	require.False(t, f.Has("discriminator"))
	id, files, err := f.Run()
	require.NoError(t, err)
	require.Equal(t, r.ID, id)
	require.Equal(t, []string{ganKind.File(2), ganKind.File(3), clsKind.File(1)}, files)

	// A new run that would write the same names is refused, naming them.
	other, err := train.StartRun(train.RunConfig{Dir: dir, Kinds: []train.Kind{ganKind, clsKind}})
	require.NoError(t, err)
	err = other.Check(func(k train.Kind, n int) bool { return k.Name == clsKind.Name })
	var conflict *train.ConflictError
	require.True(t, errors.As(err, &conflict))
	require.Equal(t, []string{clsKind.File(1)}, conflict.Files)
	require.NoError(t, other.Check(func(k train.Kind, n int) bool { return n > 5 }))

	// Resuming from the GAN file: the run's id, its listed files adopted,
	// and the registered parts restored from it.
	g3, err := ckpt.Read(filepath.Join(dir, ganKind.File(3)))
	require.NoError(t, err)
	defer g3.Free()
	id, files, err = g3.Run()
	require.NoError(t, err)
	res, err := train.StartRun(train.RunConfig{Dir: dir, Kinds: []train.Kind{ganKind, clsKind}, KeepLast: 2,
		Resume: filepath.Join(dir, ganKind.File(3)), ResumeID: id, ResumeFiles: files})
	require.NoError(t, err)
	require.Equal(t, r.ID, res.ID)
	require.True(t, res.Owns(ganKind.File(2)) && res.Owns(ganKind.File(3)))
	require.NoError(t, res.Check(func(train.Kind, int) bool { return true }), "clsKind 1 carries the run's id")
	m2 := newTwoModels(t, 2)
	m2.register(res)
	require.False(t, m2.gen.Weight.Equal(m.gen.Weight))
	require.NoError(t, res.Load(g3))
	require.True(t, m2.gen.Weight.Equal(m.gen.Weight))
	require.True(t, m2.disc.Weight.Equal(m.disc.Weight))
	// It prunes the adopted files as its own.
	ev, err := res.Save(ganKind.File(4), nil)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, ganKind.File(2))}, ev.Pruned)

	// A part the file does not hold is refused before anything changes.
	m3 := newTwoModels(t, 3)
	before := m3.gen.Weight.Float32s()
	cls, err := ckpt.Read(filepath.Join(dir, clsKind.File(1)))
	require.NoError(t, err)
	defer cls.Free()
	m3.register(res)
	var cerr *ckpt.Error
	require.True(t, errors.As(res.Load(cls), &cerr))
	require.Equal(t, before, m3.gen.Weight.Float32s())
}

// Check's line about files out of the run's way counts another run's
// files only: resumed, the run's own earlier files (not listed in the
// file it resumes from: a kind it does not prune) are not "not this run's".
func TestRunCountsOnlyOtherRunsFiles(t *testing.T) {
	dir := t.TempDir()
	keep := train.Kind{Name: "checkpoint_epoch_%d.pt"} // not pruned: not listed
	step := train.Kind{Name: "checkpoint_step_%d.pt", Prune: true}
	m := newTwoModels(t, 1)
	other, err := train.StartRun(train.RunConfig{Dir: dir, Kinds: []train.Kind{keep, step}})
	require.NoError(t, err)
	other.Register("generator", m.gen)
	_, err = other.Save(keep.File(9), nil)
	require.NoError(t, err)
	require.NoError(t, os.Rename(filepath.Join(dir, keep.File(9)), filepath.Join(dir, keep.File(0))))

	r, err := train.StartRun(train.RunConfig{Dir: dir, Kinds: []train.Kind{keep, step}, Overwrite: true})
	require.NoError(t, err)
	r.Register("generator", m.gen)
	for e := 1; e <= 3; e++ {
		_, err = r.Save(keep.File(e), nil)
		require.NoError(t, err)
	}
	_, err = r.Save(step.File(7), nil)
	require.NoError(t, err)

	f, err := ckpt.Read(filepath.Join(dir, step.File(7)))
	require.NoError(t, err)
	defer f.Free()
	id, files, err := f.Run()
	require.NoError(t, err)
	var lines []string
	res, err := train.StartRun(train.RunConfig{Dir: dir, Kinds: []train.Kind{keep, step},
		Resume: filepath.Join(dir, step.File(7)), ResumeID: id, ResumeFiles: files,
		Logf: func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }})
	require.NoError(t, err)
	require.NoError(t, res.Check(func(k train.Kind, n int) bool { return k.Name == step.Name && n > 7 }))
	require.Len(t, lines, 1, "%q", lines)
	require.Contains(t, lines[0], "also holds 1 checkpoint(s) that are not this run's", "the other run's epoch 0 only")
}

// Temporary files of killed writes of the run's kinds are removed; other
// hidden files are left alone.
func TestRunRemovesOrphanedTempsOfItsKinds(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".checkpoint_gan_epoch_4.pt.tmp-123456789", ".notes.txt.tmp-1", "checkpoint_gan_epoch_1.pt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644))
	}
	var logged []string
	_, err := train.StartRun(train.RunConfig{Dir: dir, Kinds: []train.Kind{ganKind, clsKind},
		Logf: func(f string, a ...any) { logged = append(logged, f) }})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{".notes.txt.tmp-1", "checkpoint_gan_epoch_1.pt"}, names(dir))
	require.Len(t, logged, 1)
}

// Fit calls Start once, after the checkpoint directory is checked and
// before the first step; its error stops Fit before anything is written.
func TestFitCallsStartBeforeTheFirstStep(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	var events []train.Event
	_, err := fit(t, dir, 2, "", func(fc *train.FitConfig) {
		fc.Start = func() error {
			calls++
			require.Empty(t, events, "no step before Start")
			return nil
		}
		fc.Events = func(e train.Event) {
			if _, ok := e.(train.StepEvent); ok {
				events = append(events, e)
			}
		}
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls)
	require.Len(t, events, 2)

	stop := errors.New("baseline failed")
	empty := t.TempDir()
	_, err = fit(t, empty, 2, "", func(fc *train.FitConfig) { fc.Start = func() error { return stop } })
	require.ErrorIs(t, err, stop)
	require.Empty(t, names(empty))

	// A directory Fit refuses never reaches Start.
	_, err = fit(t, dir, 2, "", func(fc *train.FitConfig) {
		fc.Start = func() error { t.Fatal("Start ran for a refused directory"); return nil }
	})
	var conflict *train.ConflictError
	require.ErrorAs(t, err, &conflict)
}

// A checkpoint directory the run cannot write in is refused before the
// first step (issue 24, item 6), not after the steps it would have saved.
func TestRunRefusesADirectoryItCannotWrite(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	for _, dir := range []string{file, filepath.Join(file, "below")} {
		r, err := train.StartRun(train.RunConfig{Dir: dir, Kinds: []train.Kind{train.StepKind}})
		if err == nil {
			err = r.Check(func(train.Kind, int) bool { return true })
		}
		var de *train.DirError
		require.ErrorAs(t, err, &de, dir)
		require.Equal(t, dir, de.Dir)
	}
	steps := 0
	_, err := fit(t, file, 2, "", func(fc *train.FitConfig) {
		fc.Events = func(e train.Event) {
			if _, ok := e.(train.StepEvent); ok {
				steps++
			}
		}
	})
	var de *train.DirError
	require.ErrorAs(t, err, &de)
	require.Zero(t, steps, "no step trained")
	// A missing directory that can be made passes, and is not made yet.
	parent := t.TempDir()
	fresh := filepath.Join(parent, "new", "ck")
	r, err := train.StartRun(train.RunConfig{Dir: fresh, Kinds: []train.Kind{train.StepKind}})
	require.NoError(t, err)
	require.NoError(t, r.Check(func(train.Kind, int) bool { return true }))
	require.Empty(t, names(parent), "the write check leaves nothing")
}
