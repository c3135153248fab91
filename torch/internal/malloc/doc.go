// Package malloc tunes glibc's allocator for training at start-up.
//
// libtorch's CPU tensors come from malloc (posix_memalign). glibc serves
// a request of 128 KiB or more with a fresh mmap and returns it to the
// kernel with munmap when it is freed, so a large activation is mapped,
// faulted in page by page, zeroed by the kernel and unmapped again; its
// dynamic threshold rises only as far as the largest chunk freed so far,
// and the heaps of threads other than the main one (torchfit runs
// libtorch on one: torch.Main) give memory back as soon as their top
// exceeds the trim threshold. A training loop allocates the same sizes
// step after step, so this package raises, in its init (before package
// torch's and before any tensor exists), the mmap threshold to 32 MiB
// (the most glibc's own dynamic threshold reaches on 64-bit), the trim
// threshold to 128 MiB and the top pad to 16 MiB (mallopt
// M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_TOP_PAD): freed activations stay
// in the heap and the next step reuses them.
//
// It leaves glibc alone when the user set any of MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_, MALLOC_MMAP_MAX_ or a
// glibc.malloc tunable in GLIBC_TUNABLES (the user's setting wins), when
// TORCHFIT_MALLOC=default, and when the C library is not glibc. The
// counting allocator's figures (allocated, peak) are what tensors hold and
// do not change; the process's RSS keeps freed activations for the next
// step instead of returning them.
package malloc
