package ptfile_test

import (
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/ptfile"
)

const killDirEnv = "TORCHFIT_SAVE_KILL_DIR"

// killTensorElems is the float32 count of each of the writer's two tensors
// (2 × 25M × 4 bytes = 200 MB a file).
func killTensorElems() int64 {
	if s := os.Getenv("TORCHFIT_SAVE_KILL_ELEMS"); s != "" {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	return 25 << 20
}

// TestSaveKillHelper is the writer process of TestSaveAtomicUnderKill: it
// saves checkpoint after checkpoint to the same path until killed. It
// does nothing unless TORCHFIT_SAVE_KILL_DIR is set.
func TestSaveKillHelper(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("helper process for TestSaveAtomicUnderKill")
	}
	n := killTensorElems()
	path := filepath.Join(dir, "ckpt.pt")
	for iter := 1; ; iter++ {
		torch.Tidy(func() {
			v := float64(iter)
			sd := torch.StateDict{
				{Name: "a", T: torch.Full([]int64{n}, v)},
				{Name: "b", T: torch.Full([]int64{n / 1024, 1024}, -v)},
			}
			if err := ptfile.Save(path, ptfile.NewDict("iter", iter, "model", sd)); err != nil {
				t.Fatal(err)
			}
		})
		os.WriteFile(filepath.Join(dir, "done"), []byte(strconv.Itoa(iter)), 0o644)
	}
}

// TestSaveAtomicUnderKill SIGKILLs a process in the middle of writing
// 200 MB checkpoints: the final path must then either not exist or load
// completely and consistently, and temporary files must never carry the
// final name.
func TestSaveAtomicUnderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("writes several 200 MB files")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.pt")
	rng := rand.New(rand.NewSource(1))
	sawFile, sawMissing := false, false
	// Temporary files are .ckpt.pt.tmp-PID-RANDOM (PID: the writer's).
	tmpName := regexp.MustCompile(`^\.ckpt\.pt\.tmp-(\d+)-\d+$`)
	pids := map[string]bool{}
	for round := 0; round < 4; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSaveKillHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), killDirEnv+"="+dir)
		require.NoError(t, cmd.Start())
		pids[strconv.Itoa(cmd.Process.Pid)] = true
		delay := time.Duration(300+rng.Intn(2500)) * time.Millisecond
		time.Sleep(delay)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()

		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			name := e.Name()
			if name == "ckpt.pt" || name == "done" {
				continue
			}
			m := tmpName.FindStringSubmatch(name)
			require.NotNil(t, m, "unexpected file %s", name)
			require.True(t, pids[m[1]], "temporary file %s carries the PID of a writer this test started", name)
		}
		if _, err := os.Stat(path); os.IsNotExist(err) {
			sawMissing = true
			t.Logf("round %d (killed after %v): no file yet", round, delay)
			continue
		}
		sawFile = true
		torch.Tidy(func() {
			v, err := ptfile.Load(path)
			require.NoError(t, err, "round %d: the final file must load", round)
			d := v.(*ptfile.Dict)
			iter, _ := d.Get("iter")
			m, _ := d.Get("model")
			sd := m.(*ptfile.Dict)
			want := float64(iter.(int64))
			a, b := sd.Tensor("a"), sd.Tensor("b")
			n := killTensorElems()
			require.Equal(t, []int64{n}, a.Shape())
			require.Equal(t, []int64{n / 1024, 1024}, b.Shape())
			require.True(t, a.Equal(torch.Full([]int64{n}, want)), "round %d: tensor a of iteration %v is intact", round, want)
			require.True(t, b.Equal(torch.Full([]int64{n / 1024, 1024}, -want)), "round %d: tensor b intact", round)
			t.Logf("round %d (killed after %v): ckpt of iteration %v loads intact; dir has %d entries", round, delay, want, len(entries))
		})
	}
	t.Logf("saw a complete file: %v, saw no file: %v", sawFile, sawMissing)
}
