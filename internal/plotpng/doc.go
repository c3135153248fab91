// Package plotpng draws line charts into PNG files (gonum/plot): the
// figures of report (loss and evaluations, lr, memory over one step axis),
// monitor (memory over utilisation) and bench (step time beside step
// peak). It imports no libtorch, so package monitor stays free of it.
//
// A figure is Panels in a Column (sharing x, the legends right of the plot
// areas) or SideBySide (the legends in a corner), each a title, axis labels
// and named series. Axes are ticked at round numbers (Ticks); a panel's y
// axis can start at zero and reach a least top (Panel.FromZero, Panel.Top:
// percentages on 0–100). The file is written atomically (package
// atomicfile).
package plotpng
