package train_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/nn"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
	"github.com/torchfit/torchfit/train"
	"github.com/torchfit/torchfit/train/ckpt"
)

// fitter is the regression model with AdamW, hidden units wide, ready for
// Fit (8 steps of 8 samples an epoch).
type fitter struct {
	m         *regression
	opt       nn.Optimizer
	tr        *train.Trainer
	ds        *data.TensorDataset
	newLoader func(*data.State) (train.Loader, error)
}

func newFitter(t testing.TB, hidden int64) *fitter {
	torch.SetNumThreads(1)
	f := &fitter{ds: regressionData(64)}
	torch.ManualSeed(1)
	f.m = &regression{}
	f.m.l1 = nn.RegisterModule(&f.m.Base, "l1", nn.NewLinear(16, hidden, true))
	f.m.l2 = nn.RegisterModule(&f.m.Base, "l2", nn.NewLinear(hidden, hidden, true))
	f.m.l3 = nn.RegisterModule(&f.m.Base, "l3", nn.NewLinear(hidden, 1, true))
	f.opt = nn.NewAdamW(nn.Parameters(f.m), nn.AdamWDefaults(1e-3))
	tr, err := train.New(f.m, f.opt, f.m.loss, train.Config{MicroBatch: 4, Accum: 2, Device: torch.CPU})
	require.NoError(t, err)
	f.tr = tr
	f.newLoader = func(st *data.State) (train.Loader, error) {
		return data.NewLoader(data.Dataset[data.Sample](f.ds), data.Collate, data.Options{BatchSize: 8, Shuffle: true, Seed: 7, Resume: st})
	}
	t.Cleanup(func() {
		f.opt.Free()
		nn.Free(f.m)
		f.ds.Free()
	})
	return f
}

// fit runs Fit on a fresh small model with checkpoints every step into dir.
func fit(t *testing.T, dir string, steps int, resume string, edit func(*train.FitConfig)) (train.FitResult, error) {
	f := newFitter(t, 32)
	fc := train.FitConfig{Epochs: 100, MaxSteps: steps, CheckpointDir: dir, CheckpointEvery: 1, KeepLast: 3, Resume: resume}
	if edit != nil {
		edit(&fc)
	}
	return train.Fit(context.Background(), f.tr, f.newLoader, fc)
}

// snapshot returns the files of dir and their contents.
func snapshot(t *testing.T, dir string) map[string]string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}

func stepName(n int) string { return filepath.Base(ckpt.StepPath("", n)) }

func stepNames(ns ...int) []string {
	out := make([]string, len(ns))
	for k, n := range ns {
		out[k] = stepName(n)
	}
	return out
}

// otherRun fills dir with step checkpoints of another run, named steps.
func otherRun(t *testing.T, dir string, steps ...int) map[string]string {
	src := t.TempDir()
	_, err := fit(t, src, 3, "", nil)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for k, n := range steps {
		b, err := os.ReadFile(ckpt.StepPath(src, 3-k%3))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(ckpt.StepPath(dir, n), b, 0o644))
	}
	return snapshot(t, dir)
}

func runIDOf(t *testing.T, path string) (string, []string) {
	f := newFitter(t, 32)
	c, err := f.tr.LoadCheckpoint(path)
	require.NoError(t, err)
	return c.RunID, c.RunFiles
}

func TestFitPrunesAndReportsOnlyItsOwnCheckpoints(t *testing.T) {
	cases := []struct {
		name  string
		steps int
		keep  []int // this run's step checkpoints at the end
	}{
		{"two steps beside another run's 138-140", 2, []int{1, 2}},
		{"keep-last 3 applies within the run", 5, []int{3, 4, 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			before := otherRun(t, dir, 138, 139, 140)
			var log []string
			res, err := fit(t, dir, c.steps, "", nil)
			require.NoError(t, err, log)
			require.Equal(t, ckpt.StepPath(dir, c.steps), res.Checkpoint, "the run reports its own last checkpoint")
			var want []string
			for _, n := range c.keep {
				want = append(want, ckpt.StepPath(dir, n))
			}
			require.Equal(t, want, res.Checkpoints)
			after := snapshot(t, dir)
			for name, content := range before {
				require.Equal(t, content, after[name], "the other run's %s is untouched", name)
			}
			require.Len(t, after, len(before)+len(c.keep), "the other run's 3 files and this run's kept ones")
			for _, n := range c.keep {
				id, files := runIDOf(t, ckpt.StepPath(dir, n))
				require.Equal(t, res.RunID, id)
				require.Contains(t, files, stepName(n))
			}
		})
	}
}

func TestFitRefusesToOverwriteAnotherRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	before := otherRun(t, dir, 1, 2, 3)
	started := false
	_, err := fit(t, dir, 2, "", func(fc *train.FitConfig) { fc.Start = func() error { started = true; return nil } })
	var conflict *train.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, stepNames(1, 2), conflict.Files, "the two files this run would write; step 3 is out of its reach")
	require.Equal(t, dir, conflict.Dir)
	require.False(t, started, "refused before anything ran")
	require.Equal(t, before, snapshot(t, dir), "nothing written, nothing deleted")

	// An epoch checkpoint is in the way too.
	edir := filepath.Join(t.TempDir(), "ck")
	otherRun(t, edir, 500)
	require.NoError(t, os.Rename(ckpt.StepPath(edir, 500), ckpt.EpochPath(edir, 1)))
	_, err = fit(t, edir, 0, "", func(fc *train.FitConfig) { fc.Epochs = 1 })
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, []string{"checkpoint_epoch_1.pt"}, conflict.Files)

	// Overwrite replaces the two files and leaves step 3 alone.
	res, err := fit(t, dir, 2, "", func(fc *train.FitConfig) { fc.Overwrite = true })
	require.NoError(t, err)
	after := snapshot(t, dir)
	require.Equal(t, before[stepName(3)], after[stepName(3)])
	require.Len(t, after, 3)
	for _, n := range []int{1, 2} {
		id, _ := runIDOf(t, ckpt.StepPath(dir, n))
		require.Equal(t, res.RunID, id, "step %d is the new run's", n)
	}
}

func TestResumedRunPrunesItsOwnEarlierCheckpoints(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	before := otherRun(t, dir, 138, 139, 140)
	first, err := fit(t, dir, 4, "", nil)
	require.NoError(t, err)
	require.Equal(t, []string{ckpt.StepPath(dir, 2), ckpt.StepPath(dir, 3), ckpt.StepPath(dir, 4)}, first.Checkpoints)

	res, err := fit(t, dir, 6, first.Checkpoint, nil)
	require.NoError(t, err)
	require.Equal(t, first.RunID, res.RunID, "a resumed run is the same run")
	require.Equal(t, ckpt.StepPath(dir, 6), res.Checkpoint)
	after := snapshot(t, dir)
	for name, content := range before {
		require.Equal(t, content, after[name], "the other run's %s is untouched", name)
	}
	for _, n := range []int{2, 3} {
		require.NoFileExists(t, ckpt.StepPath(dir, n), "the run's own step %d was pruned as one run", n)
	}
	for _, n := range []int{4, 5, 6} {
		require.FileExists(t, ckpt.StepPath(dir, n))
	}
	require.Len(t, after, 6)
	_, files := runIDOf(t, res.Checkpoint)
	require.Equal(t, stepNames(4, 5, 6), files[len(files)-3:])

	// Resuming from an earlier checkpoint of the run redoes its later
	// steps over its own files; a file of another run in the way is
	// refused.
	redo, err := fit(t, dir, 6, ckpt.StepPath(dir, 4), nil)
	require.NoError(t, err)
	require.Equal(t, first.RunID, redo.RunID)
	require.Equal(t, []string{ckpt.StepPath(dir, 5), ckpt.StepPath(dir, 6)}, redo.Checkpoints)
	after = snapshot(t, dir)
	require.Len(t, after, 6)
	require.NoError(t, os.WriteFile(ckpt.StepPath(dir, 6), []byte(before[stepName(140)]), 0o644))
	_, err = fit(t, dir, 6, ckpt.StepPath(dir, 4), nil)
	var conflict *train.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, stepNames(6), conflict.Files)
	after = snapshot(t, dir)

	// Resuming into another directory carries the run id and leaves the
	// first directory alone.
	other := filepath.Join(t.TempDir(), "ck2")
	moved, err := fit(t, other, 7, ckpt.StepPath(dir, 5), nil)
	require.NoError(t, err)
	require.Equal(t, first.RunID, moved.RunID)
	require.Equal(t, after, snapshot(t, dir))
	require.Equal(t, []string{ckpt.StepPath(other, 6), ckpt.StepPath(other, 7)}, moved.Checkpoints)
}

// deadPID returns the PID of a process that has exited.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

func TestFitRemovesOrphanedTempFiles(t *testing.T) {
	dir := t.TempDir()
	live := exec.Command("sleep", "60")
	require.NoError(t, live.Start())
	defer func() { live.Process.Kill(); live.Wait() }()
	dead := deadPID(t)
	locked := fmt.Sprintf(".checkpoint_step_000010.pt.tmp-%d-2", dead)
	cases := []struct {
		name    string
		removed bool
	}{
		{fmt.Sprintf(".checkpoint_step_000007.pt.tmp-%d-123", dead), true},            // its writer is dead
		{".checkpoint_step_000008.pt.tmp-123456789", true},                            // older name, no PID; lock free
		{fmt.Sprintf(".checkpoint_epoch_2.pt.tmp-%d-5", os.Getpid()), true},           // this process, not writing it
		{fmt.Sprintf(".checkpoint_step_000009.pt.tmp-%d-1", live.Process.Pid), false}, // a live process's
		{locked, false}, // a writer holds its lock
		{".notes.tmp-1", false},
		{"checkpoint_step_000011.pt.tmp-1", false},
		{".checkpoint_step_000012.pt.tmp-x", false},
		{".model.pt.tmp-1-1", false},
		{".checkpoint_step_000013.pt.bak", false},
	}
	for _, c := range cases {
		require.NoError(t, os.WriteFile(filepath.Join(dir, c.name), []byte("partial"), 0o644))
	}
	f, err := os.Open(filepath.Join(dir, locked))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))

	_, err = fit(t, dir, 1, "", nil)
	require.NoError(t, err)
	for _, c := range cases {
		if c.removed {
			require.NoFileExists(t, filepath.Join(dir, c.name))
		} else {
			require.FileExists(t, filepath.Join(dir, c.name))
		}
	}
}

const (
	killDirEnv    = "TORCHFIT_FIT_KILL_DIR"
	killResumeEnv = "TORCHFIT_FIT_KILL_RESUME"
	killHidden    = 2048 // 4.2M parameters: 50 MB checkpoints with AdamW's state
)

// TestFitKillChild is the child of TestKillDuringCheckpointWrites: it
// trains the wide model, saving every step, until it is killed.
func TestFitKillChild(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("child process only")
	}
	f := newFitter(t, killHidden)
	_, err := train.Fit(context.Background(), f.tr, f.newLoader, train.FitConfig{
		Epochs: 1000, CheckpointDir: dir, CheckpointEvery: 1, KeepLast: 3, Resume: os.Getenv(killResumeEnv)})
	t.Fatalf("the child should have been killed: %v", err)
}

var tempRE = regexp.MustCompile(`^\.checkpoint_step_(\d+)\.pt\.tmp-(\d+)-\d+$`)

type temp struct {
	step int
	pid  string
}

// temps returns the temporary checkpoint files in dir.
func temps(t *testing.T, dir string) map[string]temp {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]temp{}
	for _, e := range entries {
		if m := tempRE.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			out[e.Name()] = temp{n, m[2]}
		}
	}
	return out
}

// corrupt returns the step checkpoints of dir that do not load.
func corrupt(t *testing.T, dir string) (files, bad int) {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	f := newFitter(t, killHidden)
	for _, e := range entries {
		if regexp.MustCompile(`^checkpoint_step_\d+\.pt$`).MatchString(e.Name()) {
			files++
			if _, err := f.tr.LoadCheckpoint(filepath.Join(dir, e.Name())); err != nil {
				t.Logf("%s: %v", e.Name(), err)
				bad++
			}
		}
	}
	return files, bad
}

// TestKillDuringCheckpointWrites kills a training process with SIGKILL in
// the middle of writing a 50 MB checkpoint, several times, resuming each
// time from the newest checkpoint: the next start removes the dead
// writer's temporary file, no checkpoint is ever corrupt, and the run
// resumes.
func TestKillDuringCheckpointWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("writes many 50 MB checkpoints")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(3))
	kills := 6
	if n, err := strconv.Atoi(os.Getenv("TORCHFIT_KILLS")); err == nil && n > 0 {
		kills = n // a longer campaign: TORCHFIT_KILLS=12
	}
	midWrite, prev := 0, map[string]temp{}
	for round := 0; round < kills; round++ {
		resume, start := "", 0
		if latest, err := ckpt.Latest(dir); err == nil {
			resume = latest
			fmt.Sscanf(filepath.Base(latest), "checkpoint_step_%d.pt", &start)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestFitKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), killDirEnv+"="+dir, killResumeEnv+"="+resume)
		require.NoError(t, cmd.Start())
		pid := strconv.Itoa(cmd.Process.Pid)
		// Wait until the child writes the checkpoint of one of its first
		// three steps, then kill it a random few milliseconds into it.
		target := start + 1 + rng.Intn(3)
		deadline := time.Now().Add(2 * time.Minute)
		seen := false
		for !seen && time.Now().Before(deadline) {
			now := temps(t, dir)
			for _, tmp := range now {
				seen = seen || (tmp.pid == pid && tmp.step >= target)
			}
			if seen {
				for name := range prev {
					require.NotContains(t, now, name, "round %d: the child's start removed the previous writer's temporary file", round)
				}
			}
			time.Sleep(time.Millisecond)
		}
		require.True(t, seen, "round %d: the child started a checkpoint write", round)
		time.Sleep(time.Duration(rng.Intn(40)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		prev = temps(t, dir)
		if len(prev) > 0 {
			midWrite++
		}
		files, bad := corrupt(t, dir)
		if resume == "" {
			resume = "nothing"
		}
		t.Logf("kill %d (resumed from %s): %d temporary file(s) left, %d step checkpoints, %d corrupt", round+1, filepath.Base(resume), len(prev), files, bad)
		require.Zero(t, bad)
	}
	left := len(temps(t, dir))
	latest, err := ckpt.Latest(dir)
	require.NoError(t, err)
	var names []string
	for name := range snapshot(t, dir) {
		names = append(names, name)
	}
	sort.Strings(names)

	// A start of Fit removes the dead writers' temporary files and resumes.
	f := newFitter(t, killHidden)
	c, err := f.tr.LoadCheckpoint(latest)
	require.NoError(t, err)
	f2 := newFitter(t, killHidden)
	res, err := train.Fit(context.Background(), f2.tr, f2.newLoader, train.FitConfig{
		Epochs: 1000, MaxSteps: c.Step + 1, CheckpointDir: dir, CheckpointEvery: 1, KeepLast: 3, Resume: latest})
	require.NoError(t, err)
	require.Equal(t, ckpt.StepPath(dir, c.Step+1), res.Checkpoint, "the run resumed at step %d", c.Step+1)
	files, bad := corrupt(t, dir)
	t.Logf("%d kills, %d in the middle of a write; temporary files before the last start %d, after it %d; %d step checkpoints, %d corrupt; resumed at step %d (dir before: %v)",
		kills, midWrite, left, len(temps(t, dir)), files, bad, c.Step+1, names)
	require.Empty(t, temps(t, dir))
	require.Zero(t, bad)
	require.Positive(t, midWrite, "at least one kill hit a write")
	require.LessOrEqual(t, files, 3, "keep-last 3 held across the kills")
}
