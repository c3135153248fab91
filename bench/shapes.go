package bench

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
	"github.com/torchfit/torchfit/torch/data"
)

// ShapeResult is one padding multiple of a shape sweep: the same
// sequence of batches (utterances of random lengths) padded to a
// multiple of Multiple frames.
type ShapeResult struct {
	Multiple int
	Steps    int
	Shapes   int       // distinct padded lengths met
	Times    []float64 // seconds per step, in order
	// RSSGrowth is the process's resident memory after the steps minus
	// before them (bytes).
	RSSGrowth int64
	// Waste is padded frames over real frames, minus one.
	Waste float64
}

// ASRShapeSweep trains the ASR conformer at preset on steps batches of
// cfg.Batch utterances whose lengths are drawn uniformly from 50–100 % of
// cfg.Length frames (a new draw every step, the same draws for every
// multiple), padded to each of multiples in turn (lever 4, shape
// bucketing: 1 pads to the longest utterance only, so nearly every step
// meets a new shape). Warm-up steps at the longest length come first.
func ASRShapeSweep(preset string, cfg Config, multiples []int, steps, warmup int) ([]ShapeResult, error) {
	torch.Main().Do(func() { torch.SetNumThreads(cfg.Threads) })
	inst, err := ASRTwin{preset}.Build(cfg)
	if err != nil {
		return nil, err
	}
	s := inst.(*SingleModel)
	defer s.Free()
	frames := cfg.Length
	if frames <= 0 {
		frames = DefaultFrames
	}
	for k := 0; k < warmup; k++ {
		if err := s.Step(); err != nil {
			return nil, err
		}
	}
	mels := s.Spec["mels"].(int64)
	var out []ShapeResult
	for _, m := range multiples {
		rng := rand.New(rand.NewPCG(cfg.Seed, 61))
		collate := asr.CollatePadded(m)
		r := ShapeResult{Multiple: m, Steps: steps}
		shapes := map[int64]bool{}
		var real, padded int64
		before, err := rss()
		if err != nil {
			return nil, err
		}
		for k := 0; k < steps; k++ {
			var b *data.Batch
			err := torch.Main().DoErr(func() error {
				samples := make([]data.Sample, cfg.Batch)
				for i := range samples {
					n := int64(frames/2 + rng.IntN(frames/2+1))
					real += n
					ids := make([]int64, max(1, n/8))
					for j := range ids {
						ids[j] = asr.UNKID + 1 + rng.Int64N(asrVocab-asr.UNKID-1)
					}
					samples[i] = data.Sample{"feats": torch.Randn([]int64{n, mels}), "tokens": torch.FromSlice(ids, nil)}
				}
				var err error
				b, err = collate(samples)
				for _, smp := range samples {
					for _, t := range smp {
						t.Free()
					}
				}
				return err
			})
			if err != nil {
				return nil, err
			}
			t := b.Fields["feats"].Shape()[1]
			shapes[t] = true
			padded += t * int64(cfg.Batch)
			old := s.Batch
			s.Batch = b
			t0 := time.Now()
			err = s.Step()
			r.Times = append(r.Times, time.Since(t0).Seconds())
			s.Batch = old
			b.Free()
			if err != nil {
				return nil, err
			}
		}
		after, err := rss()
		if err != nil {
			return nil, err
		}
		r.Shapes, r.RSSGrowth, r.Waste = len(shapes), after-before, float64(padded)/float64(real)-1
		out = append(out, r)
	}
	return out, nil
}

// ShapeTable writes a sweep's results.
func ShapeTable(w io.Writer, rs []ShapeResult) {
	fmt.Fprintln(w, "| pad frames to a multiple of | steps | distinct shapes | mean ms/step | median ms/step | RSS growth | padding waste |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		var sum float64
		for _, t := range r.Times {
			sum += t
		}
		fmt.Fprintf(w, "| %d | %d | %d | %.1f | %.1f | %+.1f MiB | %.1f %% |\n", r.Multiple, r.Steps, r.Shapes,
			1e3*sum/float64(len(r.Times)), 1e3*median(r.Times), float64(r.RSSGrowth)/(1<<20), 100*r.Waste)
	}
}

// rss is the process's resident set size in bytes (/proc/self/status).
func rss() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fs := strings.Fields(rest)
			if len(fs) >= 1 {
				kb, err := strconv.ParseInt(fs[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("bench: no VmRSS in /proc/self/status")
}
