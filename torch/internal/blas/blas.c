// blas.c: OpenBLAS's kernel selection, re-run from Go (see choose.go).
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels when it is
// loaded, from the CPU model or from OPENBLAS_CORETYPE; its exported
// gotoblas_dynamic_quit/gotoblas_dynamic_init re-run that choice. Symbols
// are looked up at run time: with another BLAS (MKL, reference) or an
// OpenBLAS without DYNAMIC_ARCH, nothing here does anything.
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"

typedef char* (*str_fn)(void);
typedef void (*void_fn)(void);

static void* sym(const char* name) { return dlsym(RTLD_DEFAULT, name); }

int tf_blas_info(const char** core, const char** config, int* dynamic) {
  str_fn corename = (str_fn)sym("openblas_get_corename");
  str_fn cfg = (str_fn)sym("openblas_get_config");
  *core = corename ? corename() : NULL;
  *config = cfg ? cfg() : NULL;
  *dynamic = sym("gotoblas_dynamic_init") != NULL && sym("gotoblas_dynamic_quit") != NULL;
  return corename != NULL;
}

int tf_blas_has_core(const char* core) {
  // Each core's kernel table is the global gotoblas_<NAME> (upper case).
  char name[64] = "gotoblas_";
  size_t n = strlen(name);
  for (const char* p = core; *p && n + 1 < sizeof name; p++) name[n++] = (char)toupper((unsigned char)*p);
  name[n] = 0;
  return sym(name) != NULL;
}

void* tf_blas_table(void) {
  void** g = (void**)sym("gotoblas");
  return g ? *g : NULL;
}

void tf_blas_set_table(void* t) {
  void** g = (void**)sym("gotoblas");
  if (g && t) *g = t;
}

int tf_blas_select(const char* core, const char** now) {
  void_fn quit = (void_fn)sym("gotoblas_dynamic_quit");
  void_fn init = (void_fn)sym("gotoblas_dynamic_init");
  str_fn corename = (str_fn)sym("openblas_get_corename");
  if (!quit || !init || !corename) return 0;
  // OpenBLAS reads the variable in gotoblas_dynamic_init; the process's
  // environment is left as it was.
  const char* old = getenv("OPENBLAS_CORETYPE");
  char* saved = old ? strdup(old) : NULL;
  setenv("OPENBLAS_CORETYPE", core, 1);
  quit();
  init();
  if (saved) {
    setenv("OPENBLAS_CORETYPE", saved, 1);
    free(saved);
  } else {
    unsetenv("OPENBLAS_CORETYPE");
  }
  *now = corename();
  return 1;
}
