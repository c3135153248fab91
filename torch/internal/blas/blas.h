// blas.h: OpenBLAS's kernel choice, read and re-run (blas.c).
#ifndef TORCHFIT_BLAS_H
#define TORCHFIT_BLAS_H

// tf_blas_info reports the OpenBLAS in the process: its kernels' core name
// and build configuration (static strings, NULL when unknown), and whether
// it selects kernels at run time (DYNAMIC_ARCH). It returns 0 when no
// OpenBLAS is loaded.
int tf_blas_info(const char** core, const char** config, int* dynamic);
// tf_blas_has_core reports whether the library holds kernels for core.
int tf_blas_has_core(const char* core);
// tf_blas_select re-runs OpenBLAS's kernel selection as if
// OPENBLAS_CORETYPE were core, and reports the core it now uses (an
// unknown name makes OpenBLAS fall back to Prescott: check *now). No BLAS
// call may run meanwhile. Returns 0 when the library cannot re-select.
int tf_blas_select(const char* core, const char** now);

// tf_blas_table returns the kernel table in use (OpenBLAS's gotoblas;
// NULL when unknown) and tf_blas_set_table puts one back: a selection
// undone without going through names (Debian's 0.3.21 cannot select its
// own "Cooperlake" by name).
void* tf_blas_table(void);
void tf_blas_set_table(void* t);

#endif
