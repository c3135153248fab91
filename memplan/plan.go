package memplan

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/torch"
)

// Candidate is one training configuration the planner measures.
type Candidate struct {
	MicroBatch    int
	Accum         int // accumulation steps: ceil(EffectiveBatch / MicroBatch)
	Precision     amp.Precision
	Checkpointing bool // activation (gradient) checkpointing
}

// Levers counts the memory levers c pulls: accumulation (Accum > 1),
// checkpointing, and a precision other than fp32.
func (c Candidate) Levers() int {
	n := 0
	if c.Accum > 1 {
		n++
	}
	if c.Checkpointing {
		n++
	}
	if c.Precision != amp.FP32 {
		n++
	}
	return n
}

func (c Candidate) String() string {
	ck := "no checkpointing"
	if c.Checkpointing {
		ck = "checkpointing"
	}
	return fmt.Sprintf("micro-batch %d × %d accumulation steps, %s, %s", c.MicroBatch, c.Accum, c.Precision, ck)
}

// Measure runs a training step of candidate c — the same model, optimizer
// and loss as the training will use, on its worst-case batch (the longest
// sequences) — and measures it, leaving the model as it was (DryRun does
// this). An error wrapping torch.ErrOutOfMemory means c does not fit; any
// other error stops the planner.
type Measure func(c Candidate) (Measurement, error)

// Defaults of PlanOptions.
const (
	DefaultMargin    = 0.10 // a tenth of the budget is kept free
	DefaultTolerance = 0.05 // times within 5 % of each other are equal
	DefaultRounds    = 2    // finalists measured twice more
	// None sets Margin, Tolerance or Rounds to zero (their zero value
	// means the default).
	None = -1
)

// PlanOptions configures Plan.
type PlanOptions struct {
	// Budget is the device memory the training may use, in bytes
	// (--memory-limit, --vram): everything allocated on the device counts,
	// weights and optimizer state included.
	Budget int64
	// EffectiveBatch is the batch an optimizer step sees; it stays the
	// same whatever the micro-batch.
	EffectiveBatch int
	// MaxMicroBatch is the largest micro-batch tried (default, and at
	// most, EffectiveBatch).
	MaxMicroBatch int
	// Precisions are those allowed (default amp.FP32 only): the caller
	// knows the device — Precisions(device, amp.HostCPU()) lists those
	// worth trying.
	Precisions []amp.Precision
	// Checkpointing lists the checkpointing settings allowed (default
	// false only; {false, true} lets the planner use it).
	Checkpointing []bool
	// Margin is the fraction of Budget kept free (default DefaultMargin;
	// None for no margin): a candidate fits when its measured need is at
	// most (1 − Margin)·Budget. Real batches vary, allocators fragment,
	// and evaluation and checkpointing allocate too.
	Margin float64
	// Tolerance is how close, as a fraction, two times per effective batch
	// must be to count as equal (default DefaultTolerance; None for exact
	// equality): among the fitting candidates within Tolerance of the
	// fastest, the one with the fewest levers wins.
	Tolerance float64
	// Rounds is how many more times the finalists — the fitting candidates
	// within 25 % of the fastest, at most 6 — are measured, in turn, before
	// choosing (default DefaultRounds; None for none). Each keeps its
	// fastest times: on a shared machine a single step's time is noisy,
	// and measuring the finalists in turn spreads a change in load over
	// all of them.
	Rounds int
	// Exact, for a trainer whose micro-batches are all full (its
	// effective batch is MicroBatch·Accum), makes only micro-batches that
	// divide EffectiveBatch eligible: after the search, the largest
	// divisor at most the largest fitting micro-batch is measured (rather
	// than the balanced one), and rows such as 3 × 6 for 16 — which would
	// change the effective batch to 18 — are never chosen (Row.Exact says
	// which).
	Exact bool
	// Report, when set, is called with each row as soon as it is
	// measured (dry runs of a real model take seconds each: a front end
	// shows progress with it).
	Report func(Row)
}

// Row is one measured candidate.
type Row struct {
	Candidate
	Measurement
	// Fits: measured without running out of memory, and Need() within the
	// usable budget.
	Fits bool
	// Err is the out-of-memory error when the measurement ran out of
	// memory (the Measurement is then zero).
	Err error
	// PerBatch is the time per effective batch: Accum·Micro + Update (an
	// upper bound when MicroBatch does not divide the effective batch:
	// the last micro-batch is smaller).
	PerBatch time.Duration
	// Runs is how many times the candidate was measured (finalists are
	// measured again; times are the fastest, memory the highest).
	Runs   int
	Chosen bool
}

// Result is Plan's answer.
type Result struct {
	// Plan is the chosen configuration (Rows' Chosen row); zero when none
	// fits.
	Plan Row
	// Why says why Plan won.
	Why string
	// Rows are the candidates measured, in the order measured.
	Rows []Row
	// Skipped lists the (precision, checkpointing) pairs not measured, and
	// why.
	Skipped []string
	// Options are the options with defaults filled in; Usable is
	// (1 − Margin)·Budget.
	Options PlanOptions
	Usable  int64
}

// Precisions returns the precisions worth planning with on device: fp32,
// and fp16 (with a GradScaler) on CUDA, bf16 on a CPU that computes it
// natively (libtorch emulates it on others: it saves memory but runs many
// times slower).
func Precisions(device torch.Device, cpu amp.CPU) []amp.Precision {
	switch {
	case device.IsCUDA():
		return []amp.Precision{amp.FP32, amp.FP16}
	case cpu.NativeBF16:
		return []amp.Precision{amp.FP32, amp.BF16}
	}
	return []amp.Precision{amp.FP32}
}

func (o PlanOptions) resolve() (PlanOptions, error) {
	const fn = "Plan"
	if o.Budget <= 0 {
		return o, optErr(fn, "Budget", "%d bytes (want > 0)", o.Budget)
	}
	if o.EffectiveBatch < 1 {
		return o, optErr(fn, "EffectiveBatch", "%d (want >= 1)", o.EffectiveBatch)
	}
	switch {
	case o.MaxMicroBatch == 0 || o.MaxMicroBatch > o.EffectiveBatch:
		o.MaxMicroBatch = o.EffectiveBatch
	case o.MaxMicroBatch < 0:
		return o, optErr(fn, "MaxMicroBatch", "%d (want >= 0)", o.MaxMicroBatch)
	}
	frac := func(field string, v, def float64) (float64, error) {
		switch {
		case v == 0:
			return def, nil
		case v == None:
			return 0, nil
		case math.IsNaN(v) || v < 0 || v >= 1:
			return v, optErr(fn, field, "%v (want a fraction in [0, 1), or None)", v)
		}
		return v, nil
	}
	var err error
	if o.Margin, err = frac("Margin", o.Margin, DefaultMargin); err != nil {
		return o, err
	}
	if o.Tolerance, err = frac("Tolerance", o.Tolerance, DefaultTolerance); err != nil {
		return o, err
	}
	switch {
	case o.Rounds == 0:
		o.Rounds = DefaultRounds
	case o.Rounds == None:
		o.Rounds = 0
	case o.Rounds < 0:
		return o, optErr(fn, "Rounds", "%d (want >= 0, or None)", o.Rounds)
	}
	if len(o.Precisions) == 0 {
		o.Precisions = []amp.Precision{amp.FP32}
	}
	seen := map[amp.Precision]bool{}
	for _, p := range o.Precisions {
		switch p {
		case amp.FP32, amp.BF16, amp.FP16:
		default:
			return o, optErr(fn, "Precisions", "unknown precision %q (want amp.FP32, amp.BF16 or amp.FP16)", string(p))
		}
		if seen[p] {
			return o, optErr(fn, "Precisions", "%s listed twice", p)
		}
		seen[p] = true
	}
	if len(o.Checkpointing) == 0 {
		o.Checkpointing = []bool{false}
	}
	if len(o.Checkpointing) > 2 || (len(o.Checkpointing) == 2 && o.Checkpointing[0] == o.Checkpointing[1]) {
		return o, optErr(fn, "Checkpointing", "%v (want {false}, {true} or {false, true})", o.Checkpointing)
	}
	if len(o.Checkpointing) == 2 {
		o.Checkpointing = []bool{false, true} // without first: it decides whether with is measured
	}
	return o, nil
}

// Plan picks the micro-batch, accumulation, checkpointing and precision
// for a training run of o.EffectiveBatch under o.Budget bytes from
// measured dry runs.
//
// For each allowed precision and checkpointing setting it searches the
// largest micro-batch that fits, measuring candidates with m: doubling
// from 1, then bisecting between the last fit and the first miss (as
// FindBatchSize). A candidate fits when its measurement did not run out of
// memory and Held + Peak ≤ (1 − Margin)·Budget. The largest fitting
// micro-batch is then balanced — the smallest micro-batch with the same
// accumulation count, ceil(E / ceil(E / n)), is measured too: it saves
// memory at no cost in steps. Checkpointing is not measured for a
// precision whose plain run already fits at the largest micro-batch: at
// the same micro-batch it only adds a forward pass.
//
// Of the candidates that fit, a micro-batch larger than its balanced size
// is set aside when the balanced one fits too (same steps, less memory).
// The finalists — the remaining candidates within 25 % of the fastest, at
// most 6 — are then measured Rounds more times, in turn, each keeping its
// fastest times. Plan picks the fastest per effective batch (Accum·Micro +
// Update); among those within Tolerance of it, the one with the fewest
// levers (accumulation, checkpointing, low precision), then the faster. When nothing fits, the error wraps ErrNoPlan and the Result
// still holds the table.
//
// The measurements run without a cap, and the budget is compared with
// what they measured, rather than under a cap of Budget: a candidate over
// the budget is measured in full, so the table shows by how much it
// misses; a step that fails half-way never leaves the measurement, or
// the model, in doubt; and a margin applies to every candidate the same
// way. A candidate larger than the device itself runs out of memory and
// counts as not fitting.
func Plan(o PlanOptions, m Measure) (Result, error) {
	var res Result
	o, err := o.resolve()
	res.Options = o
	if err != nil {
		return res, err
	}
	if m == nil {
		return res, optErr("Plan", "Measure", "nil")
	}
	res.Usable = int64((1 - o.Margin) * float64(o.Budget))
	eff := o.EffectiveBatch
	accumFor := func(n int) int { return (eff + n - 1) / n }
	for _, prec := range o.Precisions {
		plainReachesMax := false
		for _, ck := range o.Checkpointing {
			if ck && plainReachesMax {
				res.Skipped = append(res.Skipped, fmt.Sprintf("%s with checkpointing: without it micro-batch %d already fits", prec, o.MaxMicroBatch))
				continue
			}
			measured := map[int]bool{}
			fits := func(n int) (bool, error) {
				c := Candidate{MicroBatch: n, Accum: accumFor(n), Precision: prec, Checkpointing: ck}
				r := Row{Candidate: c}
				if err := res.measure(&r, m); err != nil {
					return false, err
				}
				measured[n] = true
				res.Rows = append(res.Rows, r)
				if o.Report != nil {
					o.Report(r)
				}
				return r.Fits, nil
			}
			n, err := search(o.MaxMicroBatch, fits)
			if err != nil {
				return res, err
			}
			if n == 0 {
				continue
			}
			if !ck && n == o.MaxMicroBatch {
				plainReachesMax = true
			}
			b := balanced(eff, n)
			if o.Exact {
				b = divisorAtMost(eff, n)
			}
			if b < n && !measured[b] {
				if _, err := fits(b); err != nil {
					return res, err
				}
			}
		}
	}
	for round := 0; round < o.Rounds; round++ {
		for _, k := range finalists(res.Rows, eff, o.Exact) {
			if err := res.measure(&res.Rows[k], m); err != nil {
				return res, err
			}
		}
	}
	best := choose(res.Rows, eff, o.Tolerance, o.Exact)
	if best < 0 {
		return res, fmt.Errorf("%w: effective batch %d in %s (%s usable after a %.0f%% margin)", ErrNoPlan, eff,
			torch.FormatBytes(o.Budget), torch.FormatBytes(res.Usable), 100*o.Margin)
	}
	res.Rows[best].Chosen = true
	res.Plan = res.Rows[best]
	res.Why = why(res.Rows, eff, best, o.Tolerance, o.Exact)
	return res, nil
}

// measure measures r's candidate (again, when r has run before: keeping
// the fastest times and the highest memory).
func (res *Result) measure(r *Row, m Measure) error {
	meas, err := m(r.Candidate)
	switch {
	case errors.Is(err, torch.ErrOutOfMemory):
		r.Measurement, r.Err, r.Fits, r.PerBatch = Measurement{}, err, false, 0
	case err != nil:
		return fmt.Errorf("memplan: Plan: measuring %v: %w", r.Candidate, err)
	case r.Runs == 0:
		r.Measurement = meas
	default:
		r.Held, r.Peak = max(r.Held, meas.Held), max(r.Need(), meas.Need())-max(r.Held, meas.Held)
		r.Micro, r.Update = min(r.Micro, meas.Micro), min(r.Update, meas.Update)
	}
	r.Runs++
	if r.Err == nil {
		r.Fits = r.Need() <= res.Usable
		r.PerBatch = time.Duration(r.Accum)*r.Micro + r.Update
	}
	return nil
}

// Finalists: the fitting rows within finalistBand of the fastest, at most
// maxFinalists of them.
const (
	finalistBand = 0.25
	maxFinalists = 6
)

func finalists(rows []Row, e int, exact bool) []int {
	var idx []int
	ok := eligible(rows, e, exact)
	for k := range rows {
		if ok[k] {
			idx = append(idx, k)
		}
	}
	sort.SliceStable(idx, func(i, j int) bool { return rows[idx[i]].PerBatch < rows[idx[j]].PerBatch })
	if len(idx) == 0 {
		return nil
	}
	limit := float64(rows[idx[0]].PerBatch) * (1 + finalistBand)
	n := 0
	for n < len(idx) && n < maxFinalists && float64(rows[idx[n]].PerBatch) <= limit {
		n++
	}
	return idx[:n]
}

// balanced is the smallest micro-batch that splits e into as many
// micro-batches as n does.
func balanced(e, n int) int {
	a := (e + n - 1) / n
	return (e + a - 1) / a
}

// divisorAtMost is the largest divisor of e that is at most n.
func divisorAtMost(e, n int) int {
	for d := min(e, n); d > 1; d-- {
		if e%d == 0 {
			return d
		}
	}
	return 1
}

// Exact reports whether r's micro-batches of MicroBatch, Accum of them,
// make the effective batch e: false when a trainer with full
// micro-batches would change it (3 × 6 = 18 for 16).
func (r Row) Exact(e int) bool { return r.MicroBatch*r.Accum == e }

// eligible reports which rows may be chosen: those that fit (and, with
// exact, make the effective batch e exactly), except a
// micro-batch larger than its balanced size when the balanced one (same
// precision, checkpointing and number of accumulation steps) fits too —
// it would only take more memory for the same steps (45 + 19 rather than
// 32 + 32), and a faster time would be noise.
func eligible(rows []Row, e int, exact bool) []bool {
	type key struct {
		n    int
		prec amp.Precision
		ck   bool
	}
	fits := map[key]bool{}
	for _, r := range rows {
		if r.Fits {
			fits[key{r.MicroBatch, r.Precision, r.Checkpointing}] = true
		}
	}
	ok := make([]bool, len(rows))
	for k, r := range rows {
		b := balanced(e, r.MicroBatch)
		ok[k] = r.Fits && (b == r.MicroBatch || !fits[key{b, r.Precision, r.Checkpointing}]) && (!exact || r.Exact(e))
	}
	return ok
}

// choose returns the index of the row to pick (-1: none fits).
func choose(rows []Row, e int, tol float64, exact bool) int {
	ok := eligible(rows, e, exact)
	fastest := -1
	for k, r := range rows {
		if ok[k] && (fastest < 0 || r.PerBatch < rows[fastest].PerBatch) {
			fastest = k
		}
	}
	if fastest < 0 {
		return -1
	}
	limit := float64(rows[fastest].PerBatch) * (1 + tol)
	best := fastest
	for k, r := range rows {
		if !ok[k] || float64(r.PerBatch) > limit {
			continue
		}
		b := rows[best]
		if r.Levers() < b.Levers() || (r.Levers() == b.Levers() && r.PerBatch < b.PerBatch) {
			best = k
		}
	}
	return best
}

func why(rows []Row, e, best int, tol float64, exact bool) string {
	ok := eligible(rows, e, exact)
	fastest := best
	for k, r := range rows {
		if ok[k] && r.PerBatch < rows[fastest].PerBatch {
			fastest = k
		}
	}
	if fastest == best {
		return "the fastest that fits"
	}
	return fmt.Sprintf("within %.0f%% of the fastest that fits (%v, %s) with fewer levers (%d, not %d)", 100*tol,
		rows[fastest].Candidate, fmtDur(rows[fastest].PerBatch), rows[best].Levers(), rows[fastest].Levers())
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// Table prints the candidates measured, grouped by precision and
// checkpointing, by micro-batch, the chosen one marked, then the choice.
func (r Result) Table(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "memory plan: effective batch %d, budget %s, margin %.0f%% → %s usable\n", o.EffectiveBatch,
		torch.FormatBytes(o.Budget), 100*o.Margin, torch.FormatBytes(r.Usable))
	order := map[amp.Precision]int{}
	for k, p := range o.Precisions {
		order[p] = k
	}
	rows := append([]Row(nil), r.Rows...)
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Precision != b.Precision {
			return order[a.Precision] < order[b.Precision]
		}
		if a.Checkpointing != b.Checkpointing {
			return !a.Checkpointing
		}
		return a.MicroBatch < b.MicroBatch
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tprecision\tcheckpointing\tmicro-batch\taccum\theld\tpeak\tneed\tfits\tmicro-batch time\tupdate\tper effective batch\truns\t")
	changes := false
	for _, x := range rows {
		mark := ""
		if x.Chosen {
			mark = "→"
		}
		accum := fmt.Sprint(x.Accum)
		if o.Exact && !x.Exact(o.EffectiveBatch) {
			accum, changes = accum+"*", true
		}
		ck := "no"
		if x.Checkpointing {
			ck = "yes"
		}
		if x.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t-\t-\t-\tOOM\t-\t-\t-\t%d\t\n", mark, x.Precision, ck, x.MicroBatch, accum, x.Runs)
			continue
		}
		fits := "yes"
		if !x.Fits {
			fits = "over"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", mark, x.Precision, ck, x.MicroBatch, accum,
			torch.FormatBytes(x.Held), torch.FormatBytes(x.Peak), torch.FormatBytes(x.Need()), fits,
			fmtDur(x.Micro), fmtDur(x.Update), fmtDur(x.PerBatch), x.Runs)
	}
	tw.Flush()
	if changes {
		fmt.Fprintf(w, "* micro-batch × accum is not the effective batch %d: it would change it (not chosen)\n", o.EffectiveBatch)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "not measured: %s\n", s)
	}
	if r.Plan.MicroBatch == 0 {
		fmt.Fprintf(w, "no configuration fits in %s\n", torch.FormatBytes(r.Usable))
		return
	}
	fmt.Fprintf(w, "chosen: %v: %s per effective batch, needs %s of %s usable (%s)\n", r.Plan.Candidate,
		fmtDur(r.Plan.PerBatch), torch.FormatBytes(r.Plan.Need()), torch.FormatBytes(r.Usable), r.Why)
}

// String is the table.
func (r Result) String() string {
	var b strings.Builder
	r.Table(&b)
	return b.String()
}
