package malloc

/*
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

static int tf_malloc_glibc(void) {
#ifdef __GLIBC__
	return 1;
#else
	return 0;
#endif
}

// tf_malloc_set applies the three settings; it returns the number mallopt accepted.
static int tf_malloc_set(long mmap_threshold, long trim_threshold, long top_pad) {
#ifdef __GLIBC__
	return mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold) + mallopt(M_TRIM_THRESHOLD, (int)trim_threshold) +
	       mallopt(M_TOP_PAD, (int)top_pad);
#else
	return 0;
#endif
}

// tf_malloc_is_mmapped allocates n bytes as libtorch does (64-byte aligned),
// reports whether glibc served them with mmap (the chunk header's
// IS_MMAPPED bit) and frees them.
static int tf_malloc_is_mmapped(size_t n) {
#ifdef __GLIBC__
	void *p = NULL;
	if (posix_memalign(&p, 64, n) != 0) return -1;
	memset(p, 1, 64);
	int r = (((size_t *)p)[-1] & 2) != 0;
	free(p);
	return r;
#else
	return -1;
#endif
}
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
)

// Settings are glibc malloc parameters, in bytes.
type Settings struct {
	MmapThreshold int // M_MMAP_THRESHOLD: requests this large or larger are mmap'ed
	TrimThreshold int // M_TRIM_THRESHOLD: free memory at a heap's top kept before trimming
	TopPad        int // M_TOP_PAD: extra memory obtained when a heap grows
}

// Tuned is what torchfit applies at start-up.
var Tuned = Settings{MmapThreshold: 32 << 20, TrimThreshold: 128 << 20, TopPad: 16 << 20}

// Glibc is glibc's start-up values (its mmap threshold then rises
// dynamically; set with mallopt it stays fixed).
var Glibc = Settings{MmapThreshold: 128 << 10, TrimThreshold: 128 << 10, TopPad: 128 << 10}

// IsGlibc reports whether the process's C library is glibc.
func IsGlibc() bool { return C.tf_malloc_glibc() != 0 }

// Set applies s with mallopt. It is for start-up, tests and benchmarks
// that compare settings.
func Set(s Settings) error {
	if !IsGlibc() {
		return fmt.Errorf("malloc: the C library is not glibc")
	}
	if n := C.tf_malloc_set(C.long(s.MmapThreshold), C.long(s.TrimThreshold), C.long(s.TopPad)); n != 3 {
		return fmt.Errorf("malloc: mallopt accepted %d of 3 settings (%+v)", int(n), s)
	}
	return nil
}

// IsMmapped reports whether glibc serves an n-byte aligned allocation
// with its own mmap under the current settings (it allocates and frees
// one).
func IsMmapped(n int) bool { return C.tf_malloc_is_mmapped(C.size_t(n)) == 1 }

// userVars are the environment variables with which a user tunes glibc's
// malloc; any of them set leaves the allocator alone.
var userVars = []string{"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"}

// Decide says whether to tune glibc under the environment getenv reads,
// and why.
func Decide(glibc bool, getenv func(string) string) (apply bool, reason string) {
	if !glibc {
		return false, "not glibc: allocator left alone"
	}
	for _, v := range userVars {
		if getenv(v) != "" {
			return false, v + " is set: the user's malloc settings kept"
		}
	}
	if strings.Contains(getenv("GLIBC_TUNABLES"), "glibc.malloc.") {
		return false, "GLIBC_TUNABLES sets glibc.malloc: the user's malloc settings kept"
	}
	switch getenv("TORCHFIT_MALLOC") {
	case "", "tuned":
		return true, ""
	case "default":
		return false, "TORCHFIT_MALLOC=default: glibc's defaults kept"
	default:
		return false, "TORCHFIT_MALLOC=" + getenv("TORCHFIT_MALLOC") + " is neither tuned nor default: glibc's defaults kept"
	}
}

// Startup is what init did.
var Startup struct {
	Applied bool
	Reason  string
}

func init() {
	apply, reason := Decide(IsGlibc(), os.Getenv)
	if apply {
		if err := Set(Tuned); err != nil {
			reason = err.Error()
		} else {
			Startup.Applied = true
			reason = fmt.Sprintf("glibc malloc: mmap threshold %d MiB, trim threshold %d MiB, top pad %d MiB",
				Tuned.MmapThreshold>>20, Tuned.TrimThreshold>>20, Tuned.TopPad>>20)
		}
	}
	Startup.Reason = reason
}
