// Package freecheck tests that a constructor leaves nothing to the
// garbage collector: what it allocates, nn.Free releases at once.
//
// A temporary left to a tensor's finalizer (a random tensor scaled into a
// parameter, a table copied into a weight) is freed at some later
// collection, so it counts in whichever peak is measured next; the
// recipes' memory tests read different peaks depending on when the
// collector ran. Collection is off while a case runs, so such a
// temporary is always seen.
package freecheck
