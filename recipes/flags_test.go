package recipes

import (
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
