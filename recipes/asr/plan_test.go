package asr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/amp"
	"github.com/torchfit/torchfit/memplan"
	"github.com/torchfit/torchfit/recipes/asr"
	"github.com/torchfit/torchfit/torch"
)

// The planner on the ASR recipe's real step: under a budget between what
// micro-batch 4 and micro-batch 8 need, the plan it chooses trains under
// that cap without running out of memory, and a configuration it rejected
// (micro-batch 8, fp32, no checkpointing) runs out of memory there.
func TestPlanTrainsUnderTheCap(t *testing.T) {
	data := smallCorpus(t)
	base := asr.PlanConfig{Data: data, Preset: "tiny", Device: torch.CPU, EffectiveBatch: 8,
		Precisions: []amp.Precision{amp.FP32}}
	wide := base
	wide.Budget = 1 << 40
	all, err := asr.PlanMemory(wide)
	require.NoError(t, err)
	need := map[int]int64{}
	for _, r := range all.Rows {
		if !r.Checkpointing {
			need[r.MicroBatch] = r.Need()
		}
	}
	require.Contains(t, need, 4)
	require.Contains(t, need, 8)
	budget := int64(float64((need[4]+need[8])/2) / (1 - memplan.DefaultMargin))
	base.Budget = budget
	res, err := asr.PlanMemory(base)
	require.NoError(t, err)
	res.Table(os.Stderr)
	p := res.Plan
	require.True(t, p.Fits)
	rejected := memplan.Candidate{MicroBatch: 8, Accum: 1, Precision: amp.FP32}
	for _, r := range res.Rows {
		if r.Candidate == rejected {
			require.False(t, r.Fits, "micro-batch 8 needs %d of %d", r.Need(), budget)
		}
	}

	// Train on the worst case the plan was made for: the longest utterances.
	longest := longestCorpus(t, data, 8) // every batch of 8 is the worst case
	run := func(c memplan.Candidate) asr.Result {
		cfg := baseConfig(t, longest, t.TempDir())
		cfg.DModel, cfg.EncoderLayers = 0, 0 // the tiny preset, as planned
		cfg.MicroBatch, cfg.Accum, cfg.Precision, cfg.GradCheckpointing = c.MicroBatch, c.Accum, string(c.Precision), c.Checkpointing
		cfg.MaxSteps, cfg.CheckpointDir, cfg.ValidLimit, cfg.Workers = 3, "", 2, 0
		cfg.MemoryLimit = fmt.Sprint(budget)
		res, err := asr.Train(context.Background(), cfg)
		require.NoError(t, err)
		return res
	}
	chosen := run(p.Candidate)
	require.Zero(t, chosen.OOMEvents, "the chosen plan %v trains under the cap", p.Candidate)
	require.LessOrEqual(t, chosen.PeakMemory, budget)
	over := run(rejected)
	t.Logf("peaks under the cap: chosen %s, rejected %s (oom events %d)", torch.FormatBytes(chosen.PeakMemory), torch.FormatBytes(over.PeakMemory), over.OOMEvents)
	require.Positive(t, over.OOMEvents, "the rejected configuration ran out of memory under the cap")
	t.Logf("budget %s: chosen %v (peak %s, no OOM); rejected %v ran out of memory and trained at micro-batch %d",
		torch.FormatBytes(budget), p.Candidate, torch.FormatBytes(chosen.PeakMemory), rejected, over.MicroBatch)
}

// longestCorpus is a copy of the corpus whose training split holds only its
// n longest utterances (the audio is shared through a symlink).
func longestCorpus(t *testing.T, dir string, n int) string {
	t.Helper()
	out := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(dir, "train.jsonl"))
	require.NoError(t, err)
	type line struct {
		text     string
		duration float64
	}
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var u struct {
			Duration float64 `json:"duration"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &u))
		lines = append(lines, line{l, u.Duration})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].duration > lines[j].duration })
	var keep []string
	for _, l := range lines[:min(n, len(lines))] {
		keep = append(keep, l.text)
	}
	require.NoError(t, os.WriteFile(filepath.Join(out, "train.jsonl"), []byte(strings.Join(keep, "\n")+"\n"), 0o644))
	for _, f := range []string{"valid.jsonl", "test.jsonl"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(out, f), b, 0o644))
	}
	abs, err := filepath.Abs(filepath.Join(dir, "wav"))
	require.NoError(t, err)
	require.NoError(t, os.Symlink(abs, filepath.Join(out, "wav")))
	return out
}
