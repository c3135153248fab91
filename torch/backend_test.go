package torch

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The shim's classification of C++ exceptions, driven through the real
// catch block by an injected throw inside an op call.
func TestBackendFaultsAreNotOutOfMemory(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fault        Fault
		oom, backend bool
		msg          string
	}{
		{"bad_alloc without a size", FaultBadAlloc, false, true, "std::bad_alloc"},
		{"bad_array_new_length", FaultBadArrayNewLength, false, true, "std::bad_array_new_length"},
		{"broken promise", FaultBrokenPromise, false, true, "romise"},
		{"ordinary libtorch error", FaultLibtorchError, false, false, "injected libtorch error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			x := Ones([]int64{4})
			defer x.Free()
			InjectFault(tc.fault, 1)
			err := Try(func() { x.Add(x).Free() })
			require.Error(t, err)
			require.Equal(t, tc.oom, errors.Is(err, ErrOutOfMemory), "%v", err)
			require.Equal(t, tc.backend, errors.Is(err, ErrBackend), "%v", err)
			require.Contains(t, err.Error(), tc.msg)
			var te *Error
			require.True(t, errors.As(err, &te))
			require.Equal(t, "aten::add", te.Op)
			// Armed for one call only: the next op works.
			require.NoError(t, Try(func() { x.Add(x).Free() }))
		})
	}
}

// A std::bad_alloc is classified by whether the host has memory left,
// not by which allocation happened to fail first: with a further
// allocation impossible (a probe of 2^62 bytes stands in for a host whose
// memory is gone) it is out of memory, every time; with memory there (the
// real 256 MiB probe) a backend fault, every time. A bad_array_new_length
// is a size gone wrong whatever the host has.
func TestBadAllocIsOutOfMemoryWhenTheHostIsOut(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	x := Ones([]int64{4})
	defer x.Free()
	for _, tc := range []struct {
		name         string
		fault        Fault
		exhausted    bool
		oom, backend bool
		msg          string
	}{
		{"bad_alloc, host out of memory", FaultBadAlloc, true, true, false, "out of host memory"},
		{"bad_alloc again, host out of memory", FaultBadAlloc, true, true, false, "out of host memory"},
		{"bad_alloc, memory there", FaultBadAlloc, false, false, true, "std::bad_alloc"},
		{"bad_array_new_length, host out of memory", FaultBadArrayNewLength, true, false, true, "std::bad_array_new_length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.exhausted {
				prev := setExhaustionProbe(1 << 62)
				defer setExhaustionProbe(prev)
			}
			InjectFault(tc.fault, 1)
			err := Try(func() { x.Add(x).Free() })
			require.Error(t, err)
			require.Equal(t, tc.oom, errors.Is(err, ErrOutOfMemory), "%v", err)
			require.Equal(t, tc.backend, errors.Is(err, ErrBackend), "%v", err)
			require.Contains(t, err.Error(), tc.msg)
			var te *Error
			require.True(t, errors.As(err, &te))
			require.Equal(t, tc.oom, te.OOM)
			if tc.oom {
				require.Equal(t, CPU, te.Device)
				require.Zero(t, te.Requested, "no size known")
				require.NotContains(t, err.Error(), "oneDNN")
			}
		})
	}
	// A stale refusal of 4 PiB left in the CPU stats does not make a
	// later exhausted bad_alloc an implausible request.
	require.Error(t, Try(func() { Empty([]int64{1 << 50}).Free() }))
	prev := setExhaustionProbe(1 << 62)
	InjectFault(FaultBadAlloc, 1)
	err := Try(func() { x.Add(x).Free() })
	setExhaustionProbe(prev)
	require.ErrorIs(t, err, ErrOutOfMemory)
}

// The counting allocator's refusal is out of memory; a request past any
// machine (a corrupt size) is not.
func TestOutOfMemoryNeedsAPlausibleSize(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, SetMemoryLimit(CPU, 1<<20))
	err := Try(func() { Zeros([]int64{1 << 20}).Free() }) // 4 MiB under a 1 MiB cap
	require.NoError(t, SetMemoryLimit(CPU, 0))
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.False(t, errors.Is(err, ErrBackend))

	// 2^50 float32 elements: libtorch's own allocator refuses 4 PiB.
	err = Try(func() { Empty([]int64{1 << 50}).Free() })
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrOutOfMemory), "a 4 PiB request is not memory running out: %v", err)
}

// Every OS thread that calls into torchfit computes with libtorch's thread
// count, not OpenMP's process default. Setting a count that differs from
// the number of CPUs forces the branch on any machine.
func TestNewThreadsGetLibtorchThreadCount(t *testing.T) {
	prev := NumThreads()
	defer SetNumThreads(prev)
	want := runtime.NumCPU() + 1
	SetNumThreads(want)
	before, after, err := ThreadProbe()
	require.NoError(t, err)
	if before == -1 {
		t.Skip("this libtorch has no OpenMP")
	}
	require.Equal(t, runtime.NumCPU(), before, "OpenMP's default on a new thread")
	require.Equal(t, want, after, "the thread's count after its first torchfit call")
}

func TestOneDNNCacheIsBounded(t *testing.T) {
	n := OneDNNCacheCapacity()
	if n == -1 {
		t.Skip("this libtorch exposes no oneDNN API")
	}
	// Go sees the environment the process started with, not the shim's
	// setenv: a value here is the user's own, and wins.
	want := 1024 // oneDNN's default and ideep's
	if v, err := strconv.Atoi(os.Getenv("LRU_CACHE_CAPACITY")); err == nil && v > 0 {
		want = min(want, v) // never more than ideep's per-thread cache
	}
	if v := os.Getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY"); v != "" {
		want, _ = strconv.Atoi(v)
	}
	require.Equal(t, want, n)
	prev, err := SetOneDNNCacheCapacity(0)
	require.NoError(t, err)
	require.Equal(t, want, prev)
	require.Equal(t, 0, OneDNNCacheCapacity())
	_, err = SetOneDNNCacheCapacity(want)
	require.NoError(t, err)
}

func TestMainThreadRunsEverythingOnOneOSThread(t *testing.T) {
	main := Main()
	var mu sync.Mutex
	tids := map[int]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				main.Do(func() {
					x := Ones([]int64{8})
					x.Add(x).Free()
					x.Free()
					main.Do(func() { // nested: runs in place
						mu.Lock()
						tids[syscall.Gettid()] = true
						mu.Unlock()
					})
				})
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	require.Len(t, tids, 1, "every Do ran on one OS thread")
	require.False(t, main.OnThread())

	// A *Error panic comes back as itself; DoErr returns errors.
	err := Try(func() { main.Do(func() { Ones([]int64{2}).Matmul(Ones([]int64{3})) }) })
	var te *Error
	require.True(t, errors.As(err, &te), "%v", err)
	require.EqualError(t, main.DoErr(func() error { return errors.New("boom") }), "boom")
	require.PanicsWithValue(t, "plain", func() { main.Do(func() { panic("plain") }) })
}

func TestOneDNNVersion(t *testing.T) {
	v := OneDNNVersion()
	if v == "" {
		t.Skip("this libtorch hides oneDNN")
	}
	require.Regexp(t, `^\d+\.\d+\.\d+$`, v)
	if a, b, _ := LibtorchVersion(); a == 1 && b == 13 {
		require.Equal(t, "2.6.3", v, "Debian's libdnnl2")
	}
}

// The clamp to ideep's capacity, forced: this test binary again with
// LRU_CACHE_CAPACITY=100, where oneDNN's cache must be 100 too.
func TestOneDNNCacheFollowsIdeep(t *testing.T) {
	if os.Getenv("LRU_CACHE_CAPACITY") != "" || os.Getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") != "" || OneDNNCacheCapacity() == -1 {
		t.Skip("set by the environment, or no oneDNN API")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestOneDNNCacheIsBounded$", "-test.v")
	cmd.Env = append(os.Environ(), "LRU_CACHE_CAPACITY=100")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "--- PASS: TestOneDNNCacheIsBounded")
}

func TestOOMDevice(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want Device
	}{
		{"CPU out of memory: tried to allocate 4000000 bytes (3.81 MiB)", CPU},
		{"DefaultCPUAllocator: not enough memory: you tried to allocate 8 bytes.", CPU},
		{"CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total capacity; 1.00 GiB already allocated)", CUDA(0)},
		{"CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 79.15 GiB total capacity; 76 GiB already allocated)", CUDA(3)},
		{"CUDA out of memory.", CUDA(0)},
	} {
		require.Equal(t, tc.want, oomDevice(tc.msg), tc.msg)
	}
}

func TestRNGSnapshot(t *testing.T) {
	ManualSeed(3)
	r := TakeRNG()
	defer r.Free()
	a := Randn([]int64{5}).Float32s()
	r.Restore()
	b := Randn([]int64{5}).Float32s()
	require.Equal(t, a, b, "the same numbers after Restore")
	c := Randn([]int64{5}).Float32s()
	require.NotEqual(t, a, c)
}
