package recipes

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// --vram's help names the rows the recipe's table has: the sizes in
// order, then the named ones (Mamba's cpu was missing from it).
func TestVRAMUsage(t *testing.T) {
	table := map[string]Preset{"24gb": {}, "cpu": {}, "8gb": {}, "12gb": {}, "16gb": {}}
	require.Equal(t, []string{"8gb", "12gb", "16gb", "24gb", "cpu"}, VRAMRows(table))
	for _, c := range []struct {
		rows []string
		want string
	}{
		{nil, "the guide's settings for a GPU of this size: 8gb, 12gb, 16gb or 24gb"},
		{VRAMRows(table), "the guide's settings for a GPU of this size: 8gb, 12gb, 16gb or 24gb; or cpu"},
		{[]string{"8gb", "cpu", "tiny"}, "the guide's settings for a GPU of this size: 8gb; or cpu or tiny"},
	} {
		require.Equal(t, c.want, vramUsage(c.rows))
	}
	for _, row := range VRAMRows(table) {
		_, err := LookupVRAM(row, table)
		require.NoError(t, err, row)
	}
}

// CheckDecay takes a decay AdamW can apply (lr × decay below 1: the
// factor 1 − lr × decay each step keeps a weight's sign) and refuses the
// rest, naming --weight-decay (with 1e300 at lr 3e-4 the run diverged
// and blamed the learning rate).
func TestCheckDecay(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lr, decay float64
		ok        bool
	}{
		{"none", 1e-3, 0, true},
		{"the seeds' 0.1", 3e-4, 0.1, true},
		{"just below 1", 0.5, 1.999, true},
		{"lr × decay = 1", 0.5, 2, false},
		{"1e300", 3e-4, 1e300, false},
		{"negative", 1e-3, -0.1, false},
		{"NaN", 1e-3, math.NaN(), false},
		{"infinite", 1e-3, math.Inf(1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckDecay(tc.lr, tc.decay)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, "weight-decay", ce.Field)
		})
	}
}
