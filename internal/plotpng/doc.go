// Package plotpng draws two-panel line charts into PNG files (gonum/plot):
// the figures of monitor (memory over utilisation), report (loss over
// memory) and bench (step time beside step peak). It imports no libtorch,
// so package monitor stays free of it.
//
// A figure is two Panels, Stacked or SideBySide, each a title, axis labels
// and named series; the file is written atomically (package atomicfile).
package plotpng
