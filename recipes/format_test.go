package recipes

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/torchfit/torchfit/torch"
)

func TestCommas(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234", -123: "-123"} {
		require.Equal(t, want, Commas(n), "%d", n)
	}
}

func TestCountLayers(t *testing.T) {
	keys := func(names ...string) map[string]*torch.Tensor {
		m := map[string]*torch.Tensor{}
		for _, n := range names {
			m[n] = nil
		}
		return m
	}
	for _, tc := range []struct {
		name string
		w    map[string]*torch.Tensor
		want int
	}{
		{"none", keys("head.weight"), 0},
		{"three", keys("l.0.w", "l.0.b", "l.1.w", "l.2.w", "head.weight"), 3},
		{"gap", keys("l.0.w", "l.2.w"), -1},
		{"not a number", keys("l.x.w"), -1},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, CountLayers(tc.w, "l.")) })
	}
}

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{{0, "step", "0 steps"}, {1, "step", "1 step"}, {2, "step", "2 steps"}, {1, "GAN step", "1 GAN step"}, {150, "classifier step", "150 classifier steps"}} {
		require.Equal(t, tc.want, Plural(tc.n, tc.noun))
	}
}
