package blas

import (
	"fmt"
	"strings"

	"golang.org/x/sys/cpu"
)

// Features are the instruction sets that decide the core type, each
// supported by the CPU and enabled by the operating system.
type Features struct {
	AVX, AVX2, FMA                                  bool
	AVX512F, AVX512BW, AVX512VL, AVX512DQ, AVX512CD bool
	AVX512BF16                                      bool
}

// HostFeatures reads the running CPU's.
func HostFeatures() Features {
	x := cpu.X86
	return Features{
		AVX: x.HasAVX, AVX2: x.HasAVX2, FMA: x.HasFMA,
		AVX512F: x.HasAVX512F, AVX512BW: x.HasAVX512BW, AVX512VL: x.HasAVX512VL,
		AVX512DQ: x.HasAVX512DQ, AVX512CD: x.HasAVX512CD, AVX512BF16: x.HasAVX512BF16,
	}
}

func (f Features) avx512() bool {
	return f.AVX512F && f.AVX512BW && f.AVX512VL && f.AVX512DQ && f.AVX512CD && f.AVX2 && f.FMA && f.AVX
}

// String lists the features present.
func (f Features) String() string {
	var s []string
	for _, x := range []struct {
		on   bool
		name string
	}{{f.AVX, "avx"}, {f.AVX2, "avx2"}, {f.FMA, "fma"}, {f.AVX512F, "avx512f"}, {f.AVX512BW, "avx512bw"},
		{f.AVX512VL, "avx512vl"}, {f.AVX512DQ, "avx512dq"}, {f.AVX512CD, "avx512cd"}, {f.AVX512BF16, "avx512_bf16"}} {
		if x.on {
			s = append(s, x.name)
		}
	}
	if len(s) == 0 {
		return "none of avx, avx2, avx512"
	}
	return strings.Join(s, " ")
}

// ladder holds the x86-64 core types torchfit chooses among, best first,
// with what each one's kernels execute. Cooperlake (SkylakeX's float
// kernels plus bfloat16 ones libtorch does not call) is not among them:
// OpenBLAS 0.3.21 picks it itself but cannot select it by name.
var ladder = []struct {
	core string
	rank int
	runs func(Features) bool
}{
	{"SkylakeX", 3, Features.avx512},
	{"Haswell", 2, func(f Features) bool { return f.AVX2 && f.FMA && f.AVX }},
	{"Sandybridge", 1, func(f Features) bool { return f.AVX }},
}

// rank orders OpenBLAS's own core names by the widest vectors their
// kernels use: 4 Cooperlake, 3 SkylakeX, 2 AVX2 (Haswell, Zen), 1 AVX,
// 0 SSE; -1 for a name torchfit does not know (a newer one), which it
// leaves alone.
func rank(core string) int {
	switch strings.ToLower(core) {
	case "cooperlake":
		return 4
	case "skylakex":
		return 3
	case "haswell", "zen":
		return 2
	case "sandybridge", "bulldozer", "piledriver", "steamroller", "excavator":
		return 1
	case "prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "nano", "barcelona", "opteron",
		"opteron_sse3", "bobcat", "athlon", "katmai", "coppermine", "northwood", "banias":
		return 0
	}
	return -1
}

// Decision is what Choose decides.
type Decision struct {
	Core   string // the core type to select ("": keep OpenBLAS's)
	Reason string
}

// Choose decides the core type from OpenBLAS's current one, the CPU's
// features, the user's OPENBLAS_CORETYPE (env, "" when unset) and which
// core types the library holds (has).
func Choose(current string, f Features, env string, has func(string) bool) Decision {
	if env != "" {
		return Decision{Reason: fmt.Sprintf("OPENBLAS_CORETYPE=%s is set: OpenBLAS uses %s", env, current)}
	}
	r := rank(current)
	if r < 0 {
		return Decision{Reason: fmt.Sprintf("OpenBLAS chose %s, a core type torchfit does not rank: kept", current)}
	}
	for _, c := range ladder {
		if !c.runs(f) || !has(c.core) {
			continue
		}
		if c.rank <= r {
			return Decision{Reason: fmt.Sprintf("OpenBLAS chose %s, the best this CPU (%s) runs: kept", current, f)}
		}
		return Decision{Core: c.core, Reason: fmt.Sprintf("OpenBLAS chose %s; the CPU has %s: %s kernels", current, f, c.core)}
	}
	return Decision{Reason: fmt.Sprintf("OpenBLAS chose %s; the CPU has %s: kept", current, f)}
}
