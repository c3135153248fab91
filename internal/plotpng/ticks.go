package plotpng

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// Ticks marks an axis at round numbers: about Target labelled ticks, a
// step of 1, 2, 2.5 or 5 times a power of ten, with unlabelled minor
// ticks between them.
type Ticks struct{ Target int }

// Ticks implements plot.Ticker.
func (t Ticks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || !finite(lo) || !finite(hi) {
		return []plot.Tick{{Value: lo, Label: Label(lo, 1)}}
	}
	step := Step(lo, hi, t.Target)
	minor := step / 5
	if m := step / math.Pow(10, math.Floor(math.Log10(step))); math.Abs(m-2) < 1e-9 {
		minor = step / 4
	}
	var out []plot.Tick
	first := math.Ceil(lo/minor - 1e-9)
	for i := first; i*minor <= hi+minor*1e-9; i++ {
		v := i * minor
		if k := v / step; math.Abs(k-math.Round(k)) < 1e-6 {
			v = math.Round(k) * step
			out = append(out, plot.Tick{Value: v, Label: Label(v, step)})
		} else {
			out = append(out, plot.Tick{Value: v})
		}
	}
	return out
}

// nice are the mantissas of a tick step.
var nice = []float64{1, 2, 2.5, 5, 10}

// Step is the tick step for [lo, hi]: the least round number (1, 2, 2.5
// or 5 times a power of ten) that cuts the span into at most target steps.
func Step(lo, hi float64, target int) float64 {
	span := hi - lo
	if !(span > 0) || !finite(span) {
		return 1
	}
	raw := span / float64(max(target, 1))
	exp := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range nice {
		if m*exp >= raw*(1-1e-9) {
			return m * exp
		}
	}
	return 10 * exp
}

// Extend widens [lo, hi] out to whole tick steps (Step with target), so
// both ends of an axis are labelled round numbers. An empty span grows
// to one around its value.
func Extend(lo, hi float64, target int) (float64, float64) {
	if !finite(lo) || !finite(hi) {
		return lo, hi
	}
	if hi <= lo {
		d := math.Abs(lo) / 10
		if d == 0 {
			d = 1
		}
		if lo == 0 {
			return 0, 1
		}
		lo, hi = lo-d, hi+d
	}
	// A wider span can call for a wider step: grow the step until the
	// widened span keeps it.
	for step := Step(lo, hi, target); ; step = Step(0, step*float64(target)*1.01, target) {
		a, b := math.Floor(lo/step+1e-9)*step, math.Ceil(hi/step-1e-9)*step
		if Step(a, b, target) <= step*(1+1e-9) {
			return a, b
		}
	}
}

// Label is v written for a tick step: as many decimals as the step needs
// ("2.5", "0.10", "300"), or in exponent form ("2e-05") for steps below
// 0.001 and values of a million and more.
func Label(v, step float64) string {
	if math.Abs(v) < step*1e-9 {
		v = 0
	}
	d := 0
	for ; d < 12; d++ {
		s := step * math.Pow(10, float64(d))
		if math.Abs(s-math.Round(s)) < 1e-6*s {
			break
		}
	}
	if d > 3 || math.Abs(v) >= 1e6 {
		// Round away the float noise of v = k·step before printing it.
		r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
		return strconv.FormatFloat(r, 'g', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}
