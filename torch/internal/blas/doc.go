// Package blas gives libtorch the BLAS kernels the CPU can run fastest.
//
// Debian's libtorch does its float32 and float64 matrix products in
// OpenBLAS (0.3.21 in bookworm), built with DYNAMIC_ARCH: when it loads it
// picks one of its kernel sets (core types) from the CPU's model number,
// and a CPU it does not recognise gets the generic "Prescott" (SSE3)
// kernels — 5× slower than the AVX-512 ones on a 1024² matmul on such a
// machine. The environment variable OPENBLAS_CORETYPE overrides the choice,
// but OpenBLAS reads it while the process is loading, before any Go code
// runs.
//
// This package corrects the choice at start-up (its init, which runs
// before package torch's and before any tensor exists): it reads which
// instructions the CPU and the operating system support (AVX, AVX2+FMA,
// AVX-512 F/BW/VL/DQ/CD, AVX-512 BF16; golang.org/x/sys/cpu checks the
// OS's XSAVE state too), takes the best core type they allow that the
// library holds, and when that ranks above OpenBLAS's own choice, re-runs
// OpenBLAS's selection (its exported gotoblas_dynamic_quit and
// gotoblas_dynamic_init) with OPENBLAS_CORETYPE set to it, then restores
// the environment. Nothing has called BLAS yet at that point, and a
// DYNAMIC_ARCH build sizes its buffers for every core type, so this is
// what the variable would have done. It never picks kernels the CPU cannot
// run, never downgrades OpenBLAS's own choice, and leaves everything alone
// when the user set OPENBLAS_CORETYPE, when the BLAS is not OpenBLAS or
// when OpenBLAS was built for one CPU. Startup says what was done and why.
package blas
