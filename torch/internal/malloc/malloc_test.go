package malloc

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Both settings, forced: glibc's start-up values mmap a 1 MiB tensor,
// torchfit's serve it from the heap; a 64 MiB one (above glibc's
// largest threshold) is mmap'ed either way.
func TestSettingsDecideMmap(t *testing.T) {
	if !IsGlibc() {
		t.Skip("not glibc")
	}
	defer func() { require.NoError(t, Set(Tuned)) }()
	for _, tc := range []struct {
		name string
		s    Settings
		n    int
		mmap bool
	}{
		{"glibc 1MiB", Glibc, 1 << 20, true},
		{"glibc 64KiB", Glibc, 64 << 10, false},
		{"tuned 1MiB", Tuned, 1 << 20, false},
		{"tuned 16MiB", Tuned, 16 << 20, false},
		{"tuned 64MiB", Tuned, 64 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, Set(tc.s))
			require.Equal(t, tc.mmap, IsMmapped(tc.n))
		})
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name  string
		glibc bool
		env   map[string]string
		apply bool
	}{
		{"default", true, nil, true},
		{"tuned asked", true, map[string]string{"TORCHFIT_MALLOC": "tuned"}, true},
		{"not glibc", false, nil, false},
		{"opt out", true, map[string]string{"TORCHFIT_MALLOC": "default"}, false},
		{"unknown value", true, map[string]string{"TORCHFIT_MALLOC": "fast"}, false},
		{"user mmap threshold", true, map[string]string{"MALLOC_MMAP_THRESHOLD_": "65536"}, false},
		{"user trim threshold", true, map[string]string{"MALLOC_TRIM_THRESHOLD_": "1"}, false},
		{"user top pad", true, map[string]string{"MALLOC_TOP_PAD_": "1"}, false},
		{"user mmap max", true, map[string]string{"MALLOC_MMAP_MAX_": "0"}, false},
		{"tunables", true, map[string]string{"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, false},
		{"other tunables", true, map[string]string{"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apply, reason := Decide(tc.glibc, func(k string) string { return tc.env[k] })
			require.Equal(t, tc.apply, apply, reason)
			if !apply {
				require.NotEmpty(t, reason)
			}
		})
	}
}

// The process's own start-up applied the tuned settings (the test runs
// without the user's variables).
func TestStartupApplied(t *testing.T) {
	if apply, _ := Decide(IsGlibc(), func(k string) string { return "" }); !apply {
		t.Skip("not glibc")
	}
	if Startup.Applied {
		require.False(t, IsMmapped(1<<20))
	} else {
		t.Logf("start-up left malloc alone: %s", Startup.Reason)
	}
}
