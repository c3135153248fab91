package blas

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChoose(t *testing.T) {
	avx := Features{AVX: true}
	avx2 := Features{AVX: true, AVX2: true, FMA: true}
	avx512 := Features{AVX: true, AVX2: true, FMA: true, AVX512F: true, AVX512BW: true, AVX512VL: true, AVX512DQ: true, AVX512CD: true}
	bf16 := avx512
	bf16.AVX512BF16 = true
	partial := avx2 // AVX-512 F without BW/VL (Knights Landing): not SkylakeX's kernels
	partial.AVX512F, partial.AVX512CD = true, true
	noFMA := Features{AVX: true, AVX2: true}
	all := func(string) bool { return true }
	noSkylake := func(c string) bool { return c != "SkylakeX" }
	for _, c := range []struct {
		name     string
		current  string
		f        Features
		env      string
		has      func(string) bool
		want     string
		inReason string
	}{
		{"unknown CPU with AVX-512", "Prescott", avx512, "", all, "SkylakeX", "SkylakeX kernels"},
		{"unknown CPU with AVX-512 BF16", "Prescott", bf16, "", all, "SkylakeX", "avx512_bf16"},
		{"Zen 4 taken for a Zen", "Zen", avx512, "", all, "SkylakeX", "OpenBLAS chose Zen"},
		{"AVX2 CPU on SSE kernels", "Prescott", avx2, "", all, "Haswell", "Haswell kernels"},
		{"AVX-only CPU on SSE kernels", "Nehalem", avx, "", all, "Sandybridge", "Sandybridge kernels"},
		{"partial AVX-512 gets AVX2 kernels", "Prescott", partial, "", all, "Haswell", ""},
		{"AVX2 without FMA gets AVX kernels", "Core2", noFMA, "", all, "Sandybridge", ""},
		{"library without SkylakeX kernels", "Prescott", avx512, "", noSkylake, "Haswell", ""},
		{"no AVX at all", "Prescott", Features{}, "", all, "", "kept"},
		{"already the best", "SkylakeX", avx512, "", all, "", "kept"},
		{"OpenBLAS's Cooperlake is never downgraded", "Cooperlake", bf16, "", all, "", "kept"},
		{"Haswell kept on an AVX2 CPU", "Haswell", avx2, "", all, "", "kept"},
		{"a core torchfit does not know", "SapphireRapids", bf16, "", all, "", "does not rank"},
		{"the user's OPENBLAS_CORETYPE wins", "Prescott", avx512, "Prescott", all, "", "OPENBLAS_CORETYPE=Prescott"},
		{"the user's choice even when worse", "Nehalem", avx512, "NEHALEM", all, "", "is set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Choose(c.current, c.f, c.env, c.has)
			require.Equal(t, c.want, d.Core, d.Reason)
			require.Contains(t, d.Reason, c.inReason)
			if d.Core != "" {
				// never kernels the CPU cannot run
				for _, l := range ladder {
					if l.core == d.Core {
						require.True(t, l.runs(c.f))
					}
				}
				require.Greater(t, rankOf(d.Core), rank(c.current))
			}
		})
	}
}

func rankOf(core string) int {
	for _, l := range ladder {
		if l.core == core {
			return l.rank
		}
	}
	return -1
}

func TestFeaturesString(t *testing.T) {
	require.Equal(t, "none of avx, avx2, avx512", Features{}.String())
	require.Equal(t, "avx avx2 fma", Features{AVX: true, AVX2: true, FMA: true}.String())
}
