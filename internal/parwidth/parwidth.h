// parwidth.h: a probe each native kernel package compiles into its own
// translation unit, to test that at::parallel_for there runs on libtorch's
// threads.
//
// libtorch's OpenMP parallel_for is a header template: the `omp parallel`
// region is compiled in the file that calls it, and only when that file is
// compiled with -fopenmp (_OPENMP defined). Without it, parallel_for runs
// the whole range on the calling thread, and the BLAS called inside (not in
// a parallel region then) threads each small product of its own.
#pragma once

#include <ATen/Parallel.h>

#include <atomic>
#include <cstdint>

// TF_PARALLEL_WIDTH defines extern "C" int32_t name(void): the number of
// threads at::parallel_for ran 1024 single-item tasks on (at most
// at::get_num_threads()), or -1 if it threw.
#define TF_PARALLEL_WIDTH(name)                                                          \
  extern "C" int32_t name(void) {                                                        \
    try {                                                                                \
      std::atomic<int32_t> width{0};                                                     \
      at::parallel_for(0, 1024, 1, [&](int64_t, int64_t) {                               \
        const int32_t w = static_cast<int32_t>(at::get_thread_num()) + 1;                \
        int32_t cur = width.load();                                                      \
        while (cur < w && !width.compare_exchange_weak(cur, w)) {                        \
        }                                                                                \
      });                                                                                \
      return width.load();                                                               \
    } catch (...) {                                                                      \
      return -1;                                                                         \
    }                                                                                    \
  }
