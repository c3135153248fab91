package mamba

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// The learning rate of each optimizer step (the schedule at the number of
// steps taken before it): never 0 in the warm-up, so a 1-step run trains;
// the base at the warm-up's end; the floor, 0.1 of the base, at step
// total; without a warm-up, Hugging Face's cosine schedule.
func TestScheduleFirstStepTrains(t *testing.T) {
	for _, tc := range []struct {
		name                string
		warmup, total, step int
		want                float64
	}{
		{"1-step run, seed's warm-up", 2000, 1, 0, 1.0 / 2000},
		{"first step", 4, 100, 0, 0.25},
		{"last warm-up step", 4, 100, 3, 1},
		{"first step after it", 4, 100, 4, 1},
		{"at total", 4, 100, 100, 0.1},
		{"no warm-up", 0, 10, 0, 1},
		{"no warm-up, second step", 0, 10, 1, 0.1 + 0.9*0.5*(1+math.Cos(math.Pi*0.1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, schedule(tc.warmup, tc.total)(tc.step), 1e-12)
		})
	}
}
