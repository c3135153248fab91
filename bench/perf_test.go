package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakePerf plays perf's side of --control: it reads commands from ctl
// and answers each on ack (with answer, "ack" for perf's own), and sends
// what it was told on the returned channel.
func fakePerf(t *testing.T, answer string) (spec string, got <-chan []string) {
	t.Helper()
	dir := t.TempDir()
	ctl, ack := filepath.Join(dir, "ctl"), filepath.Join(dir, "ack")
	require.NoError(t, syscall.Mkfifo(ctl, 0o600))
	require.NoError(t, syscall.Mkfifo(ack, 0o600))
	ch := make(chan []string, 1)
	go func() {
		var cmds []string
		defer func() { ch <- cmds }()
		c, err := os.Open(ctl)
		if err != nil {
			return
		}
		defer c.Close()
		a, err := os.OpenFile(ack, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer a.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			cmds = append(cmds, sc.Text())
			fmt.Fprintf(a, "%s\n\x00", answer) // as perf writes it
		}
	}()
	return ctl + "," + ack, ch
}

func TestPerfControl(t *testing.T) {
	spec, got := fakePerf(t, "ack")
	p, err := OpenPerfControl(spec)
	require.NoError(t, err)
	o := Options{Perf: p}
	steps := 0
	run := func() ([]float64, []float64, error) { steps++; return []float64{1}, []float64{1}, nil }
	for _, side := range []string{"go", "unfused-adamw", "python", compiledSide} {
		ts, _, err := o.recorded(side, run)
		require.NoError(t, err)
		require.Equal(t, []float64{1}, ts)
	}
	require.NoError(t, p.Close())
	require.Equal(t, 4, steps)
	// Only Go's and eager Python's steps are recorded.
	require.Equal(t, []string{"enable", "disable", "enable", "disable"}, <-got)
}

func TestPerfControlRefused(t *testing.T) {
	spec, got := fakePerf(t, "error")
	p, err := OpenPerfControl(spec)
	require.NoError(t, err)
	ran := false
	_, _, err = Options{Perf: p}.recorded("go", func() ([]float64, []float64, error) { ran = true; return nil, nil, nil })
	require.ErrorContains(t, err, `answered "error"`)
	require.False(t, ran)
	require.NoError(t, p.Close())
	<-got

	for _, spec := range []string{"", "ctl", "ctl,", ",ack"} {
		_, err := OpenPerfControl(spec)
		require.Error(t, err, spec)
		require.True(t, strings.Contains(err.Error(), "CTL,ACK"), spec)
	}
	_, err = OpenPerfControl(filepath.Join(t.TempDir(), "none") + ",x")
	require.ErrorIs(t, err, os.ErrNotExist)
}
