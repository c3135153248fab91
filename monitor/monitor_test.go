package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"
)

// fakeDevice is one NVML device in the fake library: a memory reading that
// grows by step on every read, and power that the board may not report.
type fakeDevice struct {
	name        string
	used, total uint64
	step        uint64
	power       bool
	memErr      bool
	// v2: the driver answers nvmlDeviceGetMemoryInfo_v2, whose Used
	// leaves out reserved (which v1's Used includes).
	v2       bool
	reserved uint64
}

// fakeNVML is the go-nvml mock standing in for libnvidia-ml.so.1 with the
// given devices; it counts Shutdown calls.
func fakeNVML(initRet nvml.Return, devs ...*fakeDevice) (*mock.Interface, *int) {
	shut := new(int)
	var mu sync.Mutex
	handles := make([]nvml.Device, len(devs))
	for i, d := range devs {
		handles[i] = &mock.Device{
			GetNameFunc: func() (string, nvml.Return) { return d.name, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				mu.Lock()
				defer mu.Unlock()
				if d.memErr {
					return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
				}
				m := nvml.Memory{Used: d.used, Total: d.total, Free: d.total - d.used}
				d.used += d.step
				return m, nvml.SUCCESS
			},
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
				mu.Lock()
				defer mu.Unlock()
				if !d.v2 || d.memErr {
					return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED
				}
				// The driver's reserve is in v1's Used, not in v2's.
				m := nvml.Memory_v2{Used: d.used - d.reserved, Reserved: d.reserved, Total: d.total, Free: d.total - d.used}
				d.used += d.step
				return m, nvml.SUCCESS
			},
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
				return nvml.Utilization{Gpu: 71, Memory: 40}, nvml.SUCCESS
			},
			GetPowerUsageFunc: func() (uint32, nvml.Return) {
				if !d.power {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				return 123456, nvml.SUCCESS // milliwatts
			},
			GetTemperatureFunc: func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 64, nvml.SUCCESS },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 3 << 30}}, nvml.SUCCESS
			},
		}
	}
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return initRet },
		ShutdownFunc:       func() nvml.Return { *shut++; return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(handles), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return handles[i], nvml.SUCCESS
		},
	}, shut
}

// TestOpenNVMLWithoutLibrary is the branch every machine without an NVIDIA
// driver takes: an error wrapping ErrNoNVML that names the library.
func TestOpenNVMLWithoutLibrary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	src, err := OpenNVML(missing)
	require.Nil(t, src)
	require.ErrorIs(t, err, ErrNoNVML)
	require.Contains(t, err.Error(), missing)
}

// TestOpenLib is the branch a machine with a driver takes, through the
// go-nvml mock: devices read, unsupported readings left zero, errors that
// mean no GPU wrapped in ErrNoNVML, Shutdown called on every way out.
func TestOpenLib(t *testing.T) {
	t.Run("two devices", func(t *testing.T) {
		lib, shut := fakeNVML(nvml.SUCCESS,
			&fakeDevice{name: "NVIDIA H100", used: 1 << 30, total: 80 << 30, power: true},
			&fakeDevice{name: "NVIDIA T4", used: 2 << 30, total: 16 << 30})
		src, err := openLib(lib, "fake")
		require.NoError(t, err)
		gs, err := src.Read()
		require.NoError(t, err)
		require.Equal(t, []GPU{
			{Index: 0, Name: "NVIDIA H100", MemUsed: 1 << 30, MemTotal: 80 << 30, Util: 71, MemUtil: 40, PowerW: 123.456, TempC: 64,
				Processes: []Process{{PID: 4242, MemUsed: 3 << 30}}},
			{Index: 1, Name: "NVIDIA T4", MemUsed: 2 << 30, MemTotal: 16 << 30, Util: 71, MemUtil: 40, PowerW: 0, TempC: 64,
				Processes: []Process{{PID: 4242, MemUsed: 3 << 30}}},
		}, gs)
		require.NoError(t, src.Close())
		require.Equal(t, 1, *shut)
	})
	for _, c := range []struct {
		name  string
		init  nvml.Return
		devs  []*fakeDevice
		noGPU bool
	}{
		{"driver not loaded", nvml.ERROR_DRIVER_NOT_LOADED, nil, true},
		{"library not found", nvml.ERROR_LIBRARY_NOT_FOUND, nil, true},
		{"no device", nvml.SUCCESS, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			lib, shut := fakeNVML(c.init, c.devs...)
			src, err := openLib(lib, "fake")
			require.Nil(t, src)
			require.ErrorIs(t, err, ErrNoNVML)
			if c.init == nvml.SUCCESS {
				require.Equal(t, 1, *shut, "NVML initialised, so shut down")
			}
		})
	}
	t.Run("a device lost while reading", func(t *testing.T) {
		d := &fakeDevice{name: "GPU", used: 1, total: 2}
		lib, _ := fakeNVML(nvml.SUCCESS, d)
		src, err := openLib(lib, "fake")
		require.NoError(t, err)
		defer src.Close()
		d.memErr = true
		_, err = src.Read()
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrNoNVML)
	})
}

// runFake monitors the host and a fake GPU whose memory grows 1 GiB per
// sample, for a few samples.
func runFake(t *testing.T, format Format, pid int) (Summary, []byte) {
	t.Helper()
	lib, _ := fakeNVML(nvml.SUCCESS, &fakeDevice{name: "NVIDIA H100", used: 40 << 30, total: 80 << 30, step: 1 << 30, power: true})
	src, err := openLib(lib, "fake")
	require.NoError(t, err)
	defer src.Close()
	var log, live bytes.Buffer
	sum, err := Run(context.Background(), Config{Interval: 20 * time.Millisecond, Duration: 150 * time.Millisecond, PID: pid,
		Log: &log, Format: format, Live: &live, GPU: src})
	require.NoError(t, err)
	require.Equal(t, StopDuration, sum.Stop)
	require.GreaterOrEqual(t, sum.Samples, 3)
	require.Contains(t, live.String(), "GPU0 ")
	require.Equal(t, strings.Count(live.String(), "\r"), sum.Samples, "one live line per sample")
	return sum, log.Bytes()
}

// TestRunWithGPU: samples go to the log in both formats, read back the
// same, and the summary's peak and mean follow the fake device's memory.
func TestRunWithGPU(t *testing.T) {
	for _, format := range []Format{JSONL, CSV} {
		sum, log := runFake(t, format, os.Getpid())
		n := sum.Samples
		require.Len(t, sum.GPUs, 1)
		g := sum.GPUs[0]
		require.Equal(t, uint64(40+n-1)<<30, g.MemPeak)
		require.Equal(t, uint64(40<<30)+uint64(n-1)<<29, g.MemMean)
		require.InDelta(t, 100*float64(40+n-1)/80, g.PeakPercent, 1e-9)
		require.Equal(t, uint32(71), g.UtilPeak)
		require.InDelta(t, 123.456, g.PowerPeak, 1e-9)
		require.Greater(t, sum.RSSPeak, int64(1<<20), "this test process's RSS")
		require.Zero(t, g.ProcPeak, "NVML lists pid 4242, not this process")

		path := filepath.Join(t.TempDir(), map[Format]string{JSONL: "m.jsonl", CSV: "m.csv"}[format])
		require.NoError(t, os.WriteFile(path, log, 0o644))
		require.True(t, IsLog(path))
		got, err := ReadLog(path)
		require.NoError(t, err)
		require.Len(t, got, n)
		for i, s := range got {
			require.Len(t, s.GPUs, 1)
			require.Equal(t, uint64(40+i)<<30, s.GPUs[0].MemUsed)
			require.Equal(t, "NVIDIA H100", s.GPUs[0].Name)
			require.Equal(t, os.Getpid(), s.PID)
		}
		if format == JSONL {
			lines := bytes.Split(bytes.TrimSpace(log), []byte("\n"))
			var last struct{ Summary Summary }
			require.NoError(t, json.Unmarshal(lines[len(lines)-1], &last))
			require.Equal(t, n, last.Summary.Samples)
			require.Equal(t, "duration reached", last.Summary.StopReason)
		}
		png := filepath.Join(t.TempDir(), "m.png")
		require.NoError(t, Plot(path, png))
		b, err := os.ReadFile(png)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(b, []byte("\x89PNG")))

		var out bytes.Buffer
		sum.Write(&out)
		require.Contains(t, out.String(), "GPU 0 (NVIDIA H100): memory peak")
		require.Contains(t, out.String(), "process")
	}
}

// TestRunHostOnly: without a GPU source the monitor reads the host, and a
// watched command's end stops it.
func TestRunHostOnly(t *testing.T) {
	cmd := exec.Command("sleep", "0.3")
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var log bytes.Buffer
	start := time.Now()
	sum, err := Run(context.Background(), Config{Interval: 50 * time.Millisecond, PID: cmd.Process.Pid, Exited: done, Log: &log, Format: CSV})
	require.NoError(t, err)
	require.Equal(t, StopExited, sum.Stop)
	require.Less(t, time.Since(start), 3*time.Second)
	require.Empty(t, sum.GPUs)
	require.Greater(t, sum.HostMemPeak, int64(0))
	require.Greater(t, sum.RSSPeak, int64(0), "sleep's RSS")
	rows := strings.Split(strings.TrimSpace(log.String()), "\n")
	require.Equal(t, strings.Join(CSVHeader, ","), rows[0])
	require.Len(t, rows, sum.Samples+1)
	var out bytes.Buffer
	sum.Write(&out)
	require.Contains(t, out.String(), "GPU: none monitored")
	require.Contains(t, out.String(), "watched process ended")
}

// TestRunContextAndErrors: a cancelled context stops the run; an
// unreadable /proc file or GPU stops it with an error.
func TestRunContextAndErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(80 * time.Millisecond); cancel() }()
	sum, err := Run(ctx, Config{Interval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, StopContext, sum.Stop)

	_, err = Run(context.Background(), Config{Duration: time.Second, procStat: filepath.Join(t.TempDir(), "stat"), procMeminfo: "/proc/meminfo"})
	require.ErrorIs(t, err, os.ErrNotExist)

	d := &fakeDevice{name: "GPU", used: 1, total: 2, memErr: true}
	lib, _ := fakeNVML(nvml.SUCCESS, d)
	src, err := openLib(lib, "fake")
	require.NoError(t, err)
	_, err = Run(context.Background(), Config{Interval: 10 * time.Millisecond, Duration: time.Second, GPU: src})
	require.Error(t, err)
}

// TestHostReadings: /proc/stat and /proc/meminfo as the kernel writes them.
func TestHostReadings(t *testing.T) {
	dir := t.TempDir()
	stat := filepath.Join(dir, "stat")
	write := func(line string) {
		require.NoError(t, os.WriteFile(stat, []byte(line+"\ncpu0 1 2 3 4\n"), 0o644))
	}
	write("cpu  100 0 100 700 100 0 0 0 0 0")
	a, err := readCPU(stat)
	require.NoError(t, err)
	write("cpu  150 0 150 750 150 0 0 0 0 0") // 100 busy of 200
	b, err := readCPU(stat)
	require.NoError(t, err)
	require.InDelta(t, 50, busyPercent(a, b), 1e-9)
	require.Zero(t, busyPercent(b, b))
	write("intr 1 2 3")
	_, err = readCPU(stat)
	require.Error(t, err)

	mi := filepath.Join(dir, "meminfo")
	require.NoError(t, os.WriteFile(mi, []byte("MemTotal:       1000 kB\nMemFree:   100 kB\nMemAvailable:    400 kB\n"), 0o644))
	total, used, err := readMemInfo(mi)
	require.NoError(t, err)
	require.Equal(t, int64(1000*1024), total)
	require.Equal(t, int64(600*1024), used)
	require.NoError(t, os.WriteFile(mi, []byte("MemTotal: 1000 kB\n"), 0o644))
	_, _, err = readMemInfo(mi)
	require.Error(t, err)

	rss, err := readRSS(os.Getpid())
	require.NoError(t, err)
	require.Greater(t, rss, int64(1<<20))
	_, err = readRSS(1 << 30)
	require.True(t, errors.Is(err, os.ErrNotExist))
}

func TestReading(t *testing.T) {
	for _, c := range []struct {
		peak, mean float64
		want       []string
	}{
		{90, 75, []string{"above the seed's expected 60–80 %", "above the seed's 50–70 %"}},
		{70, 60, []string{"within the seed's expected 60–80 %", "within the seed's 50–70 %"}},
		{30, 20, []string{"below the seed's expected 60–80 %", "below the seed's 50–70 %"}},
	} {
		r := GPUSummary{PeakPercent: c.peak, MeanPercent: c.mean}.Reading()
		for _, w := range c.want {
			require.Contains(t, r, w)
		}
	}
}

// TestReadLogErrors: a log that is neither format, or a CSV row cut
// short, is an error naming the place.
func TestReadLogErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"cpu_percent": 1}`+"\n{oops\n"), 0o644))
	_, err := ReadLog(bad)
	require.ErrorContains(t, err, "line 2")
	short := filepath.Join(dir, "short.csv")
	require.NoError(t, os.WriteFile(short, []byte(strings.Join(CSVHeader, ",")+"\n1,2,3\n"), 0o644))
	_, err = ReadLog(short)
	require.Error(t, err)
	metrics := filepath.Join(dir, "metrics.jsonl")
	require.NoError(t, os.WriteFile(metrics, []byte(`{"step": 1, "loss": 2}`+"\n"), 0o644))
	require.False(t, IsLog(metrics))
	require.False(t, IsLog(filepath.Join(dir, "none")))
}

// Used is nvidia-smi's memory.used: v2's Used (without the driver's
// reserve) where the driver has it, v1's otherwise.
func TestMemoryUsedAsNvidiaSMI(t *testing.T) {
	for _, tc := range []struct {
		name string
		dev  fakeDevice
		want uint64
	}{
		{"v2", fakeDevice{name: "H100", used: 2570 << 20, total: 80 << 30, v2: true, reserved: 479 << 20}, 2091 << 20},
		{"v1 only", fakeDevice{name: "old", used: 2570 << 20, total: 80 << 30}, 2570 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.dev
			lib, _ := fakeNVML(nvml.SUCCESS, &d)
			src, err := openLib(lib, "fake")
			require.NoError(t, err)
			defer src.Close()
			gpus, err := src.Read()
			require.NoError(t, err)
			require.Equal(t, tc.want, gpus[0].MemUsed)
		})
	}
}

// TestPanels: the series drawn with and without a GPU, and the
// utilisation axis from 0 to 100 % however flat the CPU.
func TestPanels(t *testing.T) {
	var host, gpu []Sample
	for i, cpu := range []float64{51.2, 52.4, 51.7, 52.0} {
		s := Sample{Elapsed: float64(i + 1), CPU: cpu, HostMemUsed: 20 << 30, HostMemTotal: 64 << 30}
		host = append(host, s)
		s.PID, s.RSS = 42, 3<<30
		s.GPUs = []GPU{{Index: 0, MemUsed: uint64(30+i) << 30, MemTotal: 80 << 30, Util: 90}}
		gpu = append(gpu, s)
	}
	for _, tc := range []struct {
		name      string
		samples   []Sample
		mem, util []string
	}{
		{"host only", host, []string{"host used"}, []string{"host CPU"}},
		{"a GPU and a process", gpu, []string{"GPU 0 used", "PID 42 RSS", "host used"}, []string{"GPU 0 utilisation", "host CPU"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := panels(tc.samples)
			require.Len(t, ps, 2)
			names := func(i int) []string {
				var out []string
				for _, s := range ps[i].Series {
					require.Len(t, s.XYs, len(tc.samples))
					out = append(out, s.Name)
				}
				return out
			}
			require.Equal(t, tc.mem, names(0))
			require.Equal(t, tc.util, names(1))
			require.Equal(t, "seconds", ps[1].X)
			lo, hi, ok := ps[1].YRange()
			require.True(t, ok)
			require.Equal(t, [2]float64{0, 100}, [2]float64{lo, hi}, "percentages on a 0–100 axis")
			lo, _, ok = ps[0].YRange()
			require.True(t, ok)
			require.Zero(t, lo, "memory from zero")
		})
	}
}
