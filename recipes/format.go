package recipes

import (
	"fmt"
	"strconv"
	"strings"
)

// Commas writes n with thousands separators (1,234,567), as the seeds'
// parameter counts read.
func Commas(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r != '-' && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// CountLayers returns n when the state-dict keys under prefix (e.g.
// "encoder.layers.") are those of layers 0…n−1, and −1 when the numbering
// has a gap: how a recipe reads a checkpoint's depth. The values are
// tensors or their shapes (ckpt.File.Shapes).
func CountLayers[V any](w map[string]V, prefix string) int {
	seen := map[int]bool{}
	for k := range w {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(num)
		if err != nil || i < 0 {
			return -1
		}
		seen[i] = true
	}
	for i := range len(seen) {
		if !seen[i] {
			return -1
		}
	}
	return len(seen)
}

// Plural writes a count and its noun, "1 step", "2 steps" (the noun's
// plural with an s).
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
