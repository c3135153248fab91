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
	// Count the ticks before making them: a float counter stops
	// counting past 2^53 (i++ leaves it as it is), and a step the span
	// dwarfs would append without end. Step keeps n near 5·Target; more
	// means the step lost precision against lo and hi, and the ends alone
	// are marked.
	first := math.Ceil(lo/minor - 1e-9)
	n := math.Floor(hi/minor+1e-9) - first + 1
	if !(n >= 1 && n <= float64(maxTicks(t.Target))) {
		return []plot.Tick{{Value: lo, Label: Label(lo, step)}, {Value: hi, Label: Label(hi, step)}}
	}
	out := make([]plot.Tick, 0, int(n))
	for k := range int(n) {
		i := first + float64(k)
		tk := plot.Tick{Value: i * minor}
		if k := tk.Value / step; math.Abs(k-math.Round(k)) < 1e-6 {
			tk.Value = math.Round(k) * step
			tk.Label = Label(tk.Value, step)
		}
		if tk.Value < lo-minor*1e-6 || tk.Value > hi+minor*1e-6 {
			continue // rounded off a span too fine for its step
		}
		out = append(out, tk)
	}
	if len(out) == 0 {
		return []plot.Tick{{Value: lo, Label: Label(lo, step)}, {Value: hi, Label: Label(hi, step)}}
	}
	return out
}

// maxTicks bounds the ticks, minor ones included, that Ticks makes for a
// target: Step cuts a span into at most target steps of five minor ticks
// each; the slack covers rounding at both ends.
func maxTicks(target int) int { return 5*(max(target, 1)+2) + 1 }

// nice are the mantissas of a tick step.
var nice = []float64{1, 2, 2.5, 5, 10}

// Step is the tick step for [lo, hi]: the least round number (1, 2, 2.5
// or 5 times a power of ten) that cuts the span into at most target steps.
// The span is taken in halves, since hi-lo overflows to +Inf for data
// near ±MaxFloat64; a step past MaxFloat64 is MaxFloat64, so that it
// stays finite.
func Step(lo, hi float64, target int) float64 {
	half := hi/2 - lo/2
	if half == 0 && hi > lo {
		return hi - lo // subnormal: halving rounded the span away
	}
	if !(half > 0) || !finite(half) {
		return 1
	}
	raw := half / float64(max(target, 1)) // half the raw step
	exp := math.Pow(10, math.Floor(math.Log10(raw)+math.Log10(2)))
	for _, m := range nice {
		if m/2*exp >= raw*(1-1e-9) {
			return math.Min(m*exp, math.MaxFloat64)
		}
	}
	return math.Min(10*exp, math.MaxFloat64)
}

// Extend widens [lo, hi] out to whole tick steps (Step with target), so
// both ends of an axis are labelled round numbers. An empty span grows
// to one around its value. Where widening would pass ±MaxFloat64, or
// the step does not settle, the span stays as it was.
func Extend(lo, hi float64, target int) (float64, float64) {
	if !finite(lo) || !finite(hi) {
		return lo, hi
	}
	lo0, hi0 := lo, hi
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
	if !finite(lo) || !finite(hi) {
		return lo0, hi0
	}
	// A wider span can call for a wider step: grow the step until the
	// widened span keeps it (a step or two; the bound stops a step that
	// no longer grows in float64).
	step := Step(lo, hi, target)
	slack := (hi/2 - lo/2) * 1e-6 // rounding of a and b, against a step too wide to hold [lo, hi]
	for range 64 {
		a, b := math.Floor(lo/step+1e-9)*step, math.Ceil(hi/step-1e-9)*step
		if !finite(a) || !finite(b) || a-lo > slack || hi-b > slack {
			break
		}
		if Step(a, b, target) <= step*(1+1e-9) {
			return a, b
		}
		step = Step(0, step*float64(target)*1.01, target)
	}
	return lo0, hi0
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
