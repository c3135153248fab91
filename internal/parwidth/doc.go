// Package parwidth tests that a native kernel package's at::parallel_for
// runs on libtorch's threads.
//
// libtorch's OpenMP parallel_for is a header template whose parallel
// region is compiled in the calling file, and only under -fopenmp; a
// kernel package built without it ran every parallel_for on the calling
// thread (the fused attention, dropout, selective scan and Adam did until
// 2026-11-28), and the BLAS the attention calls per tile, seeing no
// parallel region, threaded each small product itself: two threads ran
// the attention slower than one, and many times slower on a loaded
// machine. Each package compiles parwidth.h's probe (TF_PARALLEL_WIDTH)
// and tests it with Check.
package parwidth
