package bench

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// Table writes results as the markdown table docs/performance.md keeps: per twin,
// threads and precision, the median step on each side, Go/Python as the
// ratio of the medians and as the median and range of the per-repetition
// ratios, the ratio of the median process CPU times per step, each side's step peak above what it holds between steps, and the
// check's differences. When a result has a compiled Python side
// (Options.Compiled), six columns follow: torch.compile's median step,
// Go over it (wall and CPU time), compiled over eager Python, and the
// compiled twin's first step (compilation included) with the graphs dynamo
// compiled, and the compiled twin's check (✗: beyond Tolerance); or
// "n/a: " and the reason it has none.
func Table(w io.Writer, rs []Result) {
	compiled := slices.ContainsFunc(rs, Result.HasCompiled)
	head := "| recipe | threads | precision | batch | length | Go ms/step | Python ms/step | Go / Python | per pair (median, range) | Go / Python CPU time | Go peak | Python peak | check: loss Δ, worst grad Δ |"
	rule := "|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"
	if compiled {
		head += " compiled Python ms/step | Go / compiled | Go / compiled CPU time | compiled / eager Python | compile: first step s (graphs) | compiled check: loss Δ, worst grad Δ |"
		rule += "---:|---:|---:|---:|---:|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, r := range rs {
		pr := r.PairRatios()
		length := "default"
		if r.Config.Length > 0 {
			length = fmt.Sprint(r.Config.Length)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %d | %s | %.1f | %.1f | **%.2f** | %.2f [%.2f–%.2f] | %.2f | %s | %s | %.0e, %.0e |",
			r.Twin, r.Config.Threads, r.Config.Precision, r.Config.Batch, length,
			median(flat(r.Go))*1e3, median(flat(r.Py))*1e3, r.Ratio(),
			median(pr), slices.Min(pr), slices.Max(pr), r.CPURatio(), mib(r.GoPeak), pyPeak(r), r.Check.LossRel(), r.Check.MaxRel)
		if compiled {
			fmt.Fprint(w, compiledCells(r))
		}
		fmt.Fprintln(w)
	}
}

// compiledCells are Table's compiled-Python columns of r.
func compiledCells(r Result) string {
	switch {
	case r.CompiledNA != "":
		return fmt.Sprintf(" n/a: %s | – | – | – | – | – |", cell(r.CompiledNA))
	case len(r.PyCompiled) == 0:
		return " – | – | – | – | – | – |"
	}
	chk := "–"
	if c := r.CompiledCheck; c != nil {
		chk = fmt.Sprintf("%.0e, %.0e", c.LossRel(), c.MaxRel)
		if !r.CompiledCheckOK() {
			chk += fmt.Sprintf(" ✗ (%s)", cell(c.Worst))
		}
	}
	return fmt.Sprintf(" %.1f | **%.2f** | %.2f | %.2f | %.1f (%d) | %s |", median(flat(r.PyCompiled))*1e3,
		r.CompiledRatio(), r.CompiledCPURatio(), r.CompiledOverEager(), r.CompileSeconds, r.CompileGraphs, chk)
}

// cell makes s safe inside a markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}

// VariantTable writes each Go variant's median step (and CPU time) over
// torchfit's default, measured in the same rotation (a lever's effect: the variant
// is torchfit without it).
func VariantTable(w io.Writer, rs []Result) {
	names := map[string]bool{}
	for _, r := range rs {
		for n := range r.Variants {
			names[n] = true
		}
	}
	if len(names) == 0 {
		return
	}
	var ns []string
	for n := range names {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	fmt.Fprintf(w, "| recipe | threads | precision | Go ms/step | %s |\n", strings.Join(ns, " | "))
	fmt.Fprintf(w, "|---|---:|---|---:|%s\n", strings.Repeat("---:|", len(ns)))
	for _, r := range rs {
		cells := make([]string, len(ns))
		for k, n := range ns {
			if _, ok := r.Variants[n]; ok {
				cells[k] = fmt.Sprintf("%.1f ms (%.2f×; CPU %.2f×)", median(flat(r.Variants[n]))*1e3, r.VariantRatio(n), r.VariantCPURatio(n))
			}
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.1f | %s |\n", r.Twin, r.Config.Threads, r.Config.Precision,
			median(flat(r.Go))*1e3, strings.Join(cells, " | "))
	}
}

// ProfileTable writes where each result's steps spent their time
// (Options.Profile), as markdown: Go/Python; the host floor, Python's
// profiled time in libtorch over its profiled step (what Go/Python would
// be with a binding that cost nothing, on the same kernels); on a GPU the
// device's busy ms per step and the floor it puts under Go/Python (busy
// over Python's step), kernels and host syncs; the operators Go calls per
// step, those Python's twin calls itself, and all ATen records (nested
// and backward ones included). Results without a profile show why.
func ProfileTable(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "| recipe | threads | precision | Go / Python | host floor | GPU ms/step | device floor | kernels/step | syncs/step | calls Go / Python | ATen ops/step (Python) |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		p := r.PyProfile
		if p == nil {
			if r.ProfileNA != "" {
				fmt.Fprintf(w, "| %s | %d | %s | %.2f | n/a: %s | | | | | | |\n", r.Twin, r.Config.Threads, r.Config.Precision, r.Ratio(), cell(r.ProfileNA))
			}
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.2f | **%.2f** | %.2f | %.2f | %.0f | %.1f | %d / %.0f | %.0f |\n",
			r.Twin, r.Config.Threads, r.Config.Precision, r.Ratio(), p.HostFloor(),
			1e3*p.PerStep(p.DeviceBusy), p.DeviceFloor(r.PyMedian()), p.PerStep(float64(p.Kernels)), p.PerStep(float64(p.Syncs)),
			r.GoOps, p.PerStep(float64(p.TopOps)), p.PerStep(float64(p.Ops)))
	}
}

// pyPeak is the Python peak's cell: the figure, or why there is none.
func pyPeak(r Result) string {
	if r.PyPeakNote != "" {
		return r.PyPeakNote
	}
	return mib(r.PyPeak)
}

func mib(b int64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}
