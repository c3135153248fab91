// Package philox is the counter-based generator (Philox4x32-10) that the
// native kernels share: philox.h, a header-only C file they include. The
// Go side exists to test the header against the published known-answer
// vectors and to give Go code (tests, reference implementations) the same
// numbers.
package philox
