package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/internal/pyref"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/train/ckpt"
)

// toneCorpus8 is toneCorpus with 8 utterances a split: two global batches
// of 4 an epoch.
func toneCorpus8(t *testing.T) string {
	dir := t.TempDir()
	for _, split := range []string{"train", "valid", "test"} {
		var lines []string
		for k := range 8 {
			name := fmt.Sprintf("%s_%d.wav", split, k)
			out, err := exec.Command("sox", "-n", "-r", "16000", "-c", "1", "-b", "16", filepath.Join(dir, name),
				"synth", fmt.Sprint(0.3+0.05*float64(k)), "sine", fmt.Sprint(300+80*k)).CombinedOutput()
			require.NoError(t, err, string(out))
			text := []string{"का", "की", "कू", "के"}[k%4]
			b, _ := json.Marshal(map[string]any{"id": name, "path": name, "text": text, "duration": 0.3, "split": split})
			lines = append(lines, string(b))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, split+".jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	}
	return dir
}

// modelWeights reads a checkpoint's parameters (batch norm's running
// statistics left out: data parallel they are rank 0's, as in PyTorch).
func modelWeights(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	f, err := ckpt.Read(path)
	require.NoError(t, err)
	defer f.Free()
	ws, err := f.Tensors("model")
	require.NoError(t, err)
	out := map[string][]float32{}
	for _, w := range ws {
		if strings.Contains(w.Name, "running_") || strings.Contains(w.Name, "num_batches") {
			continue
		}
		out[w.Name] = torch.ToSlice[float32](w.T)
	}
	return out
}

func weightDiff(t *testing.T, a, b map[string][]float32) float64 {
	t.Helper()
	require.Equal(t, len(a), len(b))
	d := 0.0
	for k, x := range a {
		y, ok := b[k]
		require.True(t, ok, k)
		require.Len(t, y, len(x), k)
		for i := range x {
			d = max(d, math.Abs(float64(x[i])-float64(y[i])))
		}
	}
	return d
}

// ASR tiny trained on 2 ranks — started by `torchfit launch` and by
// torchrun --no-python, with and without ZeRO-1 — ends at the parameters
// of one process with the same global batch (2 × 2 per rank = 2 × 2
// accumulated), within 1e-5; a run resumes with another number of ranks
// (2 → 1 and 1 → 2) from an epoch checkpoint to the same parameters; a
// rank's bad flag stops the launch with the rank's exit status 2. Dropout
// is off: each process draws its own dropout masks (as in PyTorch).
func TestLaunchTrainsLikeOneProcess(t *testing.T) {
	if _, err := exec.LookPath("sox"); err != nil {
		t.Skip("sox missing: run 'make deps'")
	}
	bin := binary(t)
	data := toneCorpus8(t)
	tmp := t.TempDir()
	args := func(dir string, perRank bool, extra ...string) []string {
		a := []string{"asr", "train", "--data", data, "--preset", "tiny", "--d-model", "48", "--encoder-layers", "2",
			"--dropout", "0", "--device", "cpu", "--epochs", "2", "--valid-limit", "2", "--workers", "0", "--warmup", "1",
			"--threads", "1", "--checkpoint-every", "0", "--checkpoint-dir", filepath.Join(tmp, dir), "--batch-size", "2"}
		if perRank {
			a = append(a, "--grad-accum", "1")
		} else {
			a = append(a, "--grad-accum", "2")
		}
		return append(a, extra...)
	}
	final := func(dir string) string { return filepath.Join(tmp, dir, "checkpoint_step_000004.pt") }
	epoch1 := func(dir string) string { return filepath.Join(tmp, dir, "checkpoint_epoch_1.pt") }
	launch := func(cmd ...string) []string { return append([]string{"launch", "--nproc", "2", "--"}, cmd...) }

	r := runCLI(t, bin, args("one", false)...)
	require.Zero(t, r.code, r.stderr)
	ref := modelWeights(t, final("one"))

	type run struct {
		name string
		prog string // "": the torchfit binary
		args []string
	}
	runs := []run{
		{"launch", "", launch(args("launch", true)...)},
		{"launch --zero", "", launch(args("zero", true, "--zero")...)},
		{"resume 2 → 1 ranks", "", args("resume1", false, "--resume", epoch1("launch"))},
		{"resume 1 → 2 ranks, ZeRO-1", "", launch(args("resume2", true, "--resume", epoch1("one"), "--zero")...)},
	}
	// The torchrun of the Python under test (its TCPStore is the one the
	// ranks' libtorch speaks): Debian's beside /usr/bin/python3, the
	// venv's for the 2.11 leg.
	if torchrun, err := exec.LookPath(filepath.Join(filepath.Dir(pyref.Python), "torchrun")); err == nil {
		// Debian's torchrun 1.13 under Python 3.11 fails on its own
		// default --redirects 0 (enum.Flag no longer lists the zero
		// member); redirecting stderr (2) and teeing it back works.
		runs = append(runs, run{"torchrun --no_python", torchrun,
			append([]string{"--redirects", "2", "--tee", "2", "--no_python", "--nproc_per_node", "2", bin}, args("torchrun", true)...)})
	}
	for _, c := range runs {
		t.Run(c.name, func(t *testing.T) {
			var r result
			if c.prog == "" {
				r = runCLI(t, bin, c.args...)
			} else {
				r = runCLI(t, c.prog, c.args...)
			}
			require.Zero(t, r.code, r.stderr)
			require.Equal(t, 1, strings.Count(r.stdout, "trained 4 steps"), "rank 0 alone reports: %s", r.stdout)
			d := weightDiff(t, ref, modelWeights(t, final(checkpointDir(c.args))))
			t.Logf("%s: max |Δ parameter| vs one process %.2e", c.name, d)
			require.Less(t, d, 1e-5)
		})
	}

	t.Run("a rank's bad flag", func(t *testing.T) {
		r := runCLI(t, bin, launch(args("bad", true, "--preset", "huge")...)...)
		require.Equal(t, 2, r.code, r.stderr)
		require.Contains(t, r.stderr, "unknown model preset")
		require.Contains(t, lastLine(r.stderr), "rank")
	})
	t.Run("--zero without a launcher", func(t *testing.T) {
		r := runCLI(t, bin, args("nolaunch", false, "--zero")...)
		require.Equal(t, 2, r.code, r.stderr)
		require.Contains(t, lastLine(r.stderr), "torchfit launch")
	})
}

// checkpointDir returns the --checkpoint-dir of a command line.
func checkpointDir(args []string) string {
	for i, a := range args {
		if a == "--checkpoint-dir" && i+1 < len(args) {
			return filepath.Base(args[i+1])
		}
	}
	return ""
}

// A rank killed mid-run (SIGKILL, once a few step checkpoints exist) makes
// the other fail; `torchfit launch --max-restarts 1` starts both again,
// they resume from the last checkpoint in --checkpoint-dir and end at the
// parameters of the run nobody interrupted.
func TestLaunchRestartsFromTheLastCheckpoint(t *testing.T) {
	if _, err := exec.LookPath("sox"); err != nil {
		t.Skip("sox missing: run 'make deps'")
	}
	bin := binary(t)
	data := toneCorpus8(t)
	tmp := t.TempDir()
	args := func(dir string) []string {
		return []string{"asr", "train", "--data", data, "--preset", "tiny", "--d-model", "48", "--encoder-layers", "2",
			"--dropout", "0", "--device", "cpu", "--epochs", "8", "--valid-limit", "1", "--workers", "0", "--warmup", "1",
			"--threads", "1", "--checkpoint-every", "1", "--checkpoint-dir", filepath.Join(tmp, dir), "--batch-size", "2", "--grad-accum", "1"}
	}
	const steps = 16
	r := runCLI(t, bin, launch2(args("whole")...)...)
	require.Zero(t, r.code, r.stderr)
	ref := modelWeights(t, filepath.Join(tmp, "whole", fmt.Sprintf("checkpoint_step_%06d.pt", steps)))

	cmd := exec.Command(bin, append([]string{"launch", "--nproc", "2", "--max-restarts", "1", "--"}, args("restarted")...)...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Start())
	// Kill rank 1 (the launcher's second child) once step 3 is saved.
	killed := false
	for k := 0; k < 3000 && !killed; k++ {
		if _, err := os.Stat(filepath.Join(tmp, "restarted", "checkpoint_step_000003.pt")); err == nil {
			kids := children(t, cmd.Process.Pid)
			require.Len(t, kids, 2)
			pid, err := strconv.Atoi(kids[1])
			require.NoError(t, err)
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			killed = true
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.True(t, killed, "step 3 never saved: %s", se.String())
	require.NoError(t, cmd.Wait(), se.String())
	require.Contains(t, se.String(), "restarting every rank (restart 1 of 1)")
	require.Contains(t, se.String(), "restart 1: resuming from "+filepath.Join(tmp, "restarted", "checkpoint_step_"))
	require.Contains(t, so.String(), fmt.Sprintf("trained %d steps", steps))
	d := weightDiff(t, ref, modelWeights(t, filepath.Join(tmp, "restarted", fmt.Sprintf("checkpoint_step_%06d.pt", steps))))
	t.Logf("restarted after a kill: max |Δ parameter| vs the whole run %.2e", d)
	require.Less(t, d, 1e-5)
}

func launch2(cmd ...string) []string { return append([]string{"launch", "--nproc", "2", "--"}, cmd...) }

// children returns the PIDs of a process's children, in the order they
// were started. /proc lists them per thread (the one that forked each):
// the Go runtime may start a child from any of its threads.
func children(t *testing.T, pid int) []string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	require.NoError(t, err)
	var kids []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		for _, f := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(f)
			require.NoError(t, err)
			kids = append(kids, n)
		}
	}
	slices.Sort(kids) // PIDs grow: the start order, short of a wrap
	out := make([]string, len(kids))
	for i, k := range kids {
		out[i] = strconv.Itoa(k)
	}
	return out
}

// A user error every rank makes is printed once, by the launcher, with the
// rank's exit status (issue 24, item 11: once per rank, then again).
func TestLaunchPrintsARankErrorOnce(t *testing.T) {
	bin := binary(t)
	r := runCLI(t, bin, "launch", "--nproc", "2", "--", "asr", "train", "--lr", "-1", "--device", "cpu", "--data", t.TempDir())
	require.Equal(t, 2, r.code, r.stderr)
	requireOneLine(t, r.stderr, "--lr -1: must be a finite number > 0")
	require.Contains(t, r.stderr, "rank ")
}
